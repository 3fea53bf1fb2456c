"""SQL for step search on each database, behind one shape: `compile_where(query, vendor)`
gives the FROM, WHERE and relevance order of a typed query's index part and filters, as SQL
with `%s` parameters (Django's cursor style; the SQLite tests turn them into `?`).

PostgreSQL: `studio_step.search_vector`, a stored generated tsvector over the first
`INDEXED_CHARS` characters of the action (weight A) and observation (weight B), 'simple'
configuration, punctuation turned into spaces first (code and JSON split into their words),
with a GIN index (migration 0022). SQLite: `studio_step_fts`, an FTS5 external-content table
over the same bounded text, kept current by triggers on `studio_step`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from studio.search.query import FilterTerm, Query, TextTerm

INDEXED_CHARS = 20_000
FTS_TABLE = "studio_step_fts"
WEIGHT = {"action": "A", "observation": "B"}

JOINS = (
    " JOIN studio_branch b ON b.id = s.branch_id JOIN studio_trajectory t ON t.id = b.trajectory_id"
)
BASE_FROM = "studio_step s" + JOINS


@dataclass
class Compiled:
    from_sql: str
    where: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)
    rank_sql: str | None = None  # an ORDER BY expression, best first
    rank_params: list[Any] = field(default_factory=list)

    @property
    def where_sql(self) -> str:
        return " AND ".join(f"({w})" for w in self.where) or "1=1"


# --- PostgreSQL ---------------------------------------------------------------------------


def _pg_term(term: TextTerm) -> str:
    weight = WEIGHT.get(term.field or "", "")
    lexemes = []
    for i, word in enumerate(term.words):
        star = "*" if term.prefix and i == len(term.words) - 1 else ""
        mark = f":{star}{weight}" if (star or weight) else ""
        # words are runs of letters and digits (`tokens_of`): nothing to escape but quotes
        lexemes.append(f"'{word}'{mark}")
    return "(" + " <-> ".join(lexemes) + ")"


def pg_tsquery(terms: tuple[TextTerm, ...]) -> str:
    return " & ".join(_pg_term(t) for t in terms)


# --- SQLite FTS5 --------------------------------------------------------------------------


def _fts_term(term: TextTerm) -> str:
    phrase = '"' + " ".join(term.words) + '"' + (" *" if term.prefix else "")
    return f"{term.field} : {phrase}" if term.field else phrase


def fts_match(terms: tuple[TextTerm, ...]) -> str:
    return " AND ".join(_fts_term(t) for t in terms)


# --- filters (both) -----------------------------------------------------------------------


def _json(vendor: str, path: tuple[str, ...]) -> str:
    if vendor == "postgresql":
        inner = "".join(f"->'{p}'" for p in path[:-1])
        return f"(s.meta{inner}->>'{path[-1]}')"
    return f"json_extract(s.meta, '$.{'.'.join(path)}')"


def _meta_job(vendor: str) -> str:
    if vendor == "postgresql":
        return (
            "(CASE WHEN jsonb_typeof(s.meta->'job') = 'number' THEN (s.meta->>'job')::bigint END)"
        )
    return (
        "(CASE WHEN json_type(s.meta, '$.job') = 'integer' THEN json_extract(s.meta, '$.job') END)"
    )


NOT_EPISODE = "t.source_format <> 'episode'"
SOURCE_SQL = {
    "episode": "t.source_format = 'episode'",
    "perturbed": f"s.observation_source = 'perturbed' AND {NOT_EPISODE}",
    "simulated": (
        f"(s.observation_source = 'simulated' OR (s.observation_source = 'none' "
        f"AND s.provenance <> 'recorded')) AND {NOT_EPISODE}"
    ),
    "recorded": (
        f"(s.observation_source = 'recorded' OR (s.observation_source = 'none' "
        f"AND s.provenance = 'recorded')) AND {NOT_EPISODE}"
    ),
}


def source_of(observation_source: str, provenance: str, source_format: str) -> str:
    """A step's source in the words of `source:` (the same rules as `SOURCE_SQL`)."""
    if source_format == "episode":
        return "episode"
    if observation_source == "perturbed":
        return "perturbed"
    if observation_source == "simulated" or (
        observation_source == "none" and provenance != "recorded"
    ):
        return "simulated"
    return "recorded"


def filter_sql(term: FilterTerm, vendor: str) -> tuple[str, list[Any]]:
    params: list[Any]
    if term.field == "domain":
        sql, params = "t.domain = %s", [term.value]
    elif term.field == "source":
        sql, params = SOURCE_SQL[term.value], []
    elif term.field == "perturbation":
        sql, params = "s.observation_source = 'perturbed'", []
        if term.value != "*":
            sql += f" AND {_json(vendor, ('perturbation', 'label'))} = %s"
            params = [term.value]
    elif term.field == "verdict":
        # annotations of blind queues are not shown to everyone: they do not count here
        sql = (
            "EXISTS (SELECT 1 FROM studio_stepannotation a LEFT JOIN studio_annotationqueue q "
            "ON q.id = a.queue_id WHERE a.step_id = s.id AND a.verdict = %s "
            "AND (q.id IS NULL OR q.blind = %s))"
        )
        params = [term.value, False]
    elif term.field == "model":
        job = _meta_job(vendor)
        sql = (
            "s.observation_source <> 'recorded' AND (EXISTS (SELECT 1 FROM studio_simulationjob j "
            f"WHERE j.id = COALESCE({job}, b.job_id) AND j.backend <> 'retrieval' "
            f"AND LOWER(j.model) = LOWER(%s)) OR ({job} IS NULL "
            f"AND LOWER({_json(vendor, ('model',))}) = LOWER(%s)))"
        )
        params = [term.value, term.value]
    else:  # pragma: no cover - the parser admits no other field
        raise ValueError(term.field)
    if term.negated:
        sql = f"NOT COALESCE(({sql}), FALSE)"
    return sql, params


def compile_where(query: Query, vendor: str, project_ids: list[int]) -> Compiled:
    """The query's index terms and filters (not its regular expressions) over the steps of
    `project_ids`."""
    positive, negative = query.positive_text, query.negative_text
    if vendor == "postgresql":
        out = Compiled(BASE_FROM)
        if positive:
            out.where.append("s.search_vector @@ to_tsquery('simple', %s)")
            out.params.append(pg_tsquery(positive))
            out.rank_sql = "ts_rank(s.search_vector, to_tsquery('simple', %s)) DESC"
            out.rank_params = [pg_tsquery(positive)]
        for term in negative:
            out.where.append("NOT (s.search_vector @@ to_tsquery('simple', %s))")
            out.params.append(pg_tsquery((term,)))
    else:
        if positive:
            out = Compiled(f"{FTS_TABLE} f JOIN studio_step s ON s.id = f.rowid" + JOINS)
            out.where.append(f"{FTS_TABLE} MATCH %s")
            out.params.append(fts_match(positive))
            out.rank_sql = f"bm25({FTS_TABLE}) ASC"
        else:
            out = Compiled(BASE_FROM)
        for term in negative:
            out.where.append(
                f"s.id NOT IN (SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s)"
            )
            out.params.append(fts_match((term,)))
    out.where.append("t.project_id IN (" + ", ".join(["%s"] * len(project_ids)) + ")")
    out.params.extend(project_ids)
    for condition in query.filters:
        sql, params = filter_sql(condition, vendor)
        out.where.append(sql)
        out.params.extend(params)
    return out
