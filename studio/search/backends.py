"""SQL for step search on each database, behind one shape: `compile_branches(query, vendor,
project_ids, viewer)` gives the FROM, WHERE and relevance order of each way a step can match
(its own text; one of its annotations), as SQL with `%s` parameters (Django's cursor style;
the SQLite tests turn them into `?`). Each branch selects `s.id`.

The index (migrations 0022 and 0023), the first `INDEXED_CHARS` characters of each text,
punctuation turned into spaces (code and JSON split into their words):
- PostgreSQL: a stored generated tsvector column `search_vector` with a GIN index on
  `studio_step` (action weight A, observation B), `studio_stepannotation` (comment A, tags B,
  correction C) and `studio_trajectory` (title A, task B, world name C), 'simple'
  configuration; a field filter is a weight.
- SQLite: FTS5 tables `studio_step_fts` (external content: action, observation),
  `studio_annotation_fts` (comment, tag, correction) and `studio_trajectory_fts` (title,
  task, world), kept current by triggers; a field filter is a column filter.

Annotations count only where the viewer may see them (`Viewer`): blind review hides other
people's annotations of a step in a blind queue from its annotators until they submit theirs
(`studio.services.blinding`), and a search must not find a step by what its page hides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from studio.search.query import (
    ANNOTATION_FIELDS,
    STEP_FIELDS,
    TRAJECTORY_FIELDS,
    FilterTerm,
    Query,
    TextTerm,
)

INDEXED_CHARS = 20_000
FTS_TABLE = "studio_step_fts"
ANNOTATION_FTS = "studio_annotation_fts"
TRAJECTORY_FTS = "studio_trajectory_fts"
WEIGHT = {
    "action": "A",
    "observation": "B",
    "comment": "A",
    "tag": "B",
    "correction": "C",
    "title": "A",
    "task": "B",
    "world": "C",
}

JOINS = (
    " JOIN studio_branch b ON b.id = s.branch_id JOIN studio_trajectory t ON t.id = b.trajectory_id"
)
BASE_FROM = "studio_step s" + JOINS


@dataclass(frozen=True)
class Viewer:
    """Whose eyes a search looks with. `hidden_sql` selects the step ids whose annotations
    by others this viewer may not see (blind review); empty: they see every annotation."""

    user_id: int | None = None
    hidden_sql: str = ""
    hidden_params: tuple[Any, ...] = ()

    def visible(self, alias: str) -> tuple[str, list[Any]]:
        """A condition on annotation row `alias`: this viewer may see it."""
        if not self.hidden_sql:
            return "1=1", []
        return (
            f"({alias}.author_id = %s OR {alias}.step_id NOT IN ({self.hidden_sql}))",
            [self.user_id, *self.hidden_params],
        )


SEES_ALL = Viewer()


@dataclass
class Compiled:
    from_sql: str
    where: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)
    rank_sql: str | None = None  # an ORDER BY expression, best first
    rank_params: list[Any] = field(default_factory=list)
    rank_desc: bool = True  # a greater rank is better (ts_rank); False: bm25
    # PostgreSQL: the tsvector `rank_sql` ranks ("s.search_vector"), so that a query can
    # rank a bounded set of rows after choosing them (`candidates_sql`)
    rank_vector: str | None = None
    # PostgreSQL, a step's text with phrases or field terms (which the GIN index cannot
    # decide: each step it finds is tested against its tsvector): the same conditions with
    # the words alone (every word, any order and place), which the index decides
    exact_where: list[str] | None = None
    exact_params: list[Any] = field(default_factory=list)

    @property
    def where_sql(self) -> str:
        return " AND ".join(f"({w})" for w in self.where) or "1=1"

    def add(self, sql: str, params: list[Any] | None = None) -> None:
        self.where.append(sql)
        self.params.extend(params or [])

    @property
    def order_rank(self) -> str:
        assert self.rank_sql is not None
        return f"{self.rank_sql} {'DESC' if self.rank_desc else 'ASC'}"


# --- text matching ------------------------------------------------------------------------


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


def pg_words_tsquery(terms: tuple[TextTerm, ...]) -> str:
    """Every word of `terms`, anywhere, in no order and of no field: what the GIN index
    decides alone (a prefix stays a prefix)."""
    lexemes = []
    for term in terms:
        for i, word in enumerate(term.words):
            star = ":*" if term.prefix and i == len(term.words) - 1 else ""
            lexemes.append(f"'{word}'{star}")
    return " & ".join(lexemes)


def pg_rank(vector: str) -> str:
    """The relevance of tsvector `vector` to the tsquery given as the one parameter."""
    return f"ts_rank({vector}, to_tsquery('simple', %s))"


def _fts_term(term: TextTerm) -> str:
    phrase = '"' + " ".join(term.words) + '"' + (" *" if term.prefix else "")
    return f"{term.field} : {phrase}" if term.field else phrase


def fts_match(terms: tuple[TextTerm, ...]) -> str:
    return " AND ".join(_fts_term(t) for t in terms)


_FTS_OF = {"s": FTS_TABLE, "t": TRAJECTORY_FTS}


def match_sql(vendor: str, alias: str, terms: tuple[TextTerm, ...]) -> tuple[str, list[Any]]:
    """A condition on row `alias` (`s` a step, `t` a trajectory, any other an annotation):
    its indexed text matches every term."""
    if vendor == "postgresql":
        return f"{alias}.search_vector @@ to_tsquery('simple', %s)", [pg_tsquery(terms)]
    fts = _FTS_OF.get(alias, ANNOTATION_FTS)
    return f"{alias}.id IN (SELECT rowid FROM {fts} WHERE {fts} MATCH %s)", [fts_match(terms)]


def annotation_exists(
    vendor: str, viewer: Viewer, alias: str, terms: tuple[TextTerm, ...]
) -> tuple[str, list[Any]]:
    """A condition on step `s`: one annotation of it that the viewer sees matches `terms`."""
    visible, visible_params = viewer.visible(alias)
    text, text_params = match_sql(vendor, alias, terms)
    return (
        f"EXISTS (SELECT 1 FROM studio_stepannotation {alias} WHERE {alias}.step_id = s.id "
        f"AND {visible} AND {text})",
        [*visible_params, *text_params],
    )


# --- filters ------------------------------------------------------------------------------


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


def filter_sql(term: FilterTerm, vendor: str, viewer: Viewer = SEES_ALL) -> tuple[str, list[Any]]:
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
        # the annotations the viewer may see (blind review hides others' in blind queues)
        visible, visible_params = viewer.visible("va")
        sql = (
            "EXISTS (SELECT 1 FROM studio_stepannotation va WHERE va.step_id = s.id "
            f"AND va.verdict = %s AND {visible})"
        )
        params = [term.value, *visible_params]
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


# --- the branches -------------------------------------------------------------------------


def _common(out: Compiled, query: Query, vendor: str, project_ids: list[int], viewer: Viewer):
    """What every branch requires: the projects, the filters, the fielded terms of
    annotations and trajectories, and the exclusions."""
    out.add("t.project_id IN (" + ", ".join(["%s"] * len(project_ids)) + ")", list(project_ids))
    annotation_terms = query.positive_in(ANNOTATION_FIELDS)
    if annotation_terms:
        # several annotation fields: all in the same annotation
        out.add(*annotation_exists(vendor, viewer, "ap", annotation_terms))
    trajectory_terms = query.positive_in(TRAJECTORY_FIELDS)
    if trajectory_terms:
        out.add(*match_sql(vendor, "t", trajectory_terms))
    for term in query.negative_text:
        if term.field is None:
            # excluded when the step's text or an annotation of it the viewer sees holds it
            sql, params = match_sql(vendor, "s", (term,))
            out.add(f"NOT ({sql})", params)
            sql, params = annotation_exists(vendor, viewer, "an", (term,))
            out.add(f"NOT {sql}", params)
        elif term.field in STEP_FIELDS:
            sql, params = match_sql(vendor, "s", (term,))
            out.add(f"NOT ({sql})", params)
        elif term.field in ANNOTATION_FIELDS:
            sql, params = annotation_exists(vendor, viewer, "an", (term,))
            out.add(f"NOT {sql}", params)
        else:
            sql, params = match_sql(vendor, "t", (term,))
            out.add(f"NOT ({sql})", params)
    for condition in query.filters:
        out.add(*filter_sql(condition, vendor, viewer))


def compile_branches(
    query: Query, vendor: str, project_ids: list[int], viewer: Viewer = SEES_ALL
) -> list[Compiled]:
    """The query's index terms and filters (not its regular expressions) over the steps of
    `project_ids`: one branch when the query has no words of no field (the step's own text
    and fields decide), else two: the words in the step's text, or in one annotation of it
    that the viewer sees (the step's own fielded terms hold in both)."""
    words = query.words
    step_terms = words + query.positive_in(STEP_FIELDS)
    branches: list[Compiled] = []
    # the step's own text
    if vendor == "postgresql":
        out = Compiled(BASE_FROM)
        if step_terms:
            tsquery = pg_tsquery(step_terms)
            out.add("s.search_vector @@ to_tsquery('simple', %s)", [tsquery])
            out.rank_sql, out.rank_vector = pg_rank("s.search_vector"), "s.search_vector"
            out.rank_params = [tsquery]
    elif step_terms:
        out = Compiled(f"{FTS_TABLE} f JOIN studio_step s ON s.id = f.rowid" + JOINS)
        out.add(f"{FTS_TABLE} MATCH %s", [fts_match(step_terms)])
        out.rank_sql, out.rank_desc = f"bm25({FTS_TABLE})", False
    else:
        out = Compiled(BASE_FROM)
    _common(out, query, vendor, project_ids, viewer)
    if vendor == "postgresql" and any(t.is_phrase or t.field for t in step_terms):
        # the text match is the first condition (above)
        words_only = "s.search_vector @@ to_tsquery('simple', %s)"
        out.exact_where = [words_only, *out.where[1:]]
        out.exact_params = [pg_words_tsquery(step_terms), *out.params[1:]]
    branches.append(out)
    if not words:
        return branches
    # one annotation of the step holds the words
    visible, visible_params = viewer.visible("a")
    if vendor == "postgresql":
        out = Compiled("studio_stepannotation a JOIN studio_step s ON s.id = a.step_id" + JOINS)
        tsquery = pg_tsquery(words)
        out.add("a.search_vector @@ to_tsquery('simple', %s)", [tsquery])
        out.rank_sql, out.rank_vector = pg_rank("a.search_vector"), "a.search_vector"
        out.rank_params = [tsquery]
    else:
        out = Compiled(
            f"{ANNOTATION_FTS} af JOIN studio_stepannotation a ON a.id = af.rowid "
            "JOIN studio_step s ON s.id = a.step_id" + JOINS
        )
        out.add(f"{ANNOTATION_FTS} MATCH %s", [fts_match(words)])
        out.rank_sql, out.rank_desc = f"bm25({ANNOTATION_FTS})", False
    out.add(visible, visible_params)
    own = query.positive_in(STEP_FIELDS)
    if own:
        out.add(*match_sql(vendor, "s", own))
    _common(out, query, vendor, project_ids, viewer)
    branches.append(out)
    return branches


def compile_where(
    query: Query, vendor: str, project_ids: list[int], viewer: Viewer = SEES_ALL
) -> Compiled:
    """The first branch alone: the steps whose own text matches (for callers that need one
    FROM; `compile_branches` is the whole query)."""
    return compile_branches(query, vendor, project_ids, viewer)[0]


def trajectory_where(query: Query, vendor: str, project_ids: list[int]) -> Compiled | None:
    """Trajectories whose title, task or world name hold every word of no field and every
    trajectory field's term (None when the query has neither, or terms only a step can
    hold: a step's fields, annotations' fields, or filters other than the domain)."""
    terms = query.words + query.positive_in(TRAJECTORY_FIELDS)
    if not terms or query.positive_in(STEP_FIELDS + ANNOTATION_FIELDS):
        return None
    if any(f.field != "domain" for f in query.filters) or query.regexes:
        return None
    if vendor == "postgresql":
        out = Compiled("studio_trajectory t")
        tsquery = pg_tsquery(terms)
        out.add("t.search_vector @@ to_tsquery('simple', %s)", [tsquery])
        out.rank_sql = "ts_rank(t.search_vector, to_tsquery('simple', %s))"
        out.rank_params = [tsquery]
    else:
        out = Compiled(f"{TRAJECTORY_FTS} tf JOIN studio_trajectory t ON t.id = tf.rowid")
        out.add(f"{TRAJECTORY_FTS} MATCH %s", [fts_match(terms)])
        out.rank_sql, out.rank_desc = f"bm25({TRAJECTORY_FTS})", False
    out.add("t.project_id IN (" + ", ".join(["%s"] * len(project_ids)) + ")", list(project_ids))
    for term in query.negative_text:
        if term.field in (None, *TRAJECTORY_FIELDS):
            sql, params = match_sql(vendor, "t", (term,))
            out.add(f"NOT ({sql})", params)
    for condition in query.filters:  # the domain only (above)
        sql = "t.domain = %s" if not condition.negated else "t.domain <> %s"
        out.add(sql, [condition.value])
    return out


# --- pages and counts over the branches ---------------------------------------------------


def _branch_select(branch: Compiled, sort: str, limit: int) -> tuple[str, list[Any]]:
    """`SELECT id, r` of one branch, its best `limit` rows in `sort` order (r: its rank
    when sorting by relevance, else 0)."""
    ranked = sort == "relevance" and branch.rank_sql is not None
    if ranked:
        assert branch.rank_sql is not None
        cols, col_params = f"s.id AS id, {branch.rank_sql} AS r", list(branch.rank_params)
        order = f"r {'DESC' if branch.rank_desc else 'ASC'}, id DESC"
    else:
        cols, col_params = "s.id AS id, 0 AS r", []
        order = "id ASC" if sort == "oldest" else "id DESC"
    sql = f"SELECT {cols} FROM {branch.from_sql} WHERE {branch.where_sql} ORDER BY {order} LIMIT %s"
    return sql, [*col_params, *branch.params, limit]


def _order(branch: Compiled, sort: str) -> tuple[str, list[Any]]:
    if sort == "oldest":
        return "s.id ASC", []
    if sort == "relevance" and branch.rank_sql:
        return f"{branch.order_rank}, s.id DESC", list(branch.rank_params)
    return "s.id DESC", []


def page_sql(branches: list[Compiled], sort: str, limit: int, offset: int) -> tuple[str, list[Any]]:
    """SQL selecting the ids of `limit` matching steps from `offset`, in `sort` order
    (relevance: best first, newest first where the query has no words; newest; oldest). A
    step matched by two branches counts once, at its better rank. Each branch is cut at
    `offset + limit` first, so a common word never sorts every step it matches twice."""
    if len(branches) == 1:
        branch = branches[0]
        order, order_params = _order(branch, sort)
        return (
            f"SELECT s.id FROM {branch.from_sql} WHERE {branch.where_sql} ORDER BY {order} "
            "LIMIT %s OFFSET %s",
            [*branch.params, *order_params, limit, offset],
        )
    parts, params = [], []
    for i, branch in enumerate(branches):
        sql, p = _branch_select(branch, sort, limit + offset)
        parts.append(f"SELECT id, r FROM ({sql}) AS b{i}")
        params.extend(p)
    ranked = sort == "relevance" and all(b.rank_sql for b in branches)
    if ranked:
        best = "MAX(r) DESC" if branches[0].rank_desc else "MIN(r) ASC"
        order = f"{best}, id DESC"
    else:
        order = "id ASC" if sort == "oldest" else "id DESC"
    return (
        f"SELECT id FROM ({' UNION ALL '.join(parts)}) AS u GROUP BY id ORDER BY {order} "
        "LIMIT %s OFFSET %s",
        [*params, limit, offset],
    )


# `candidates_sql`'s row saying a branch with phrases or field terms had more steps holding
# all its words than it tested (never a step id: ids are positive)
UNTESTED = -1


def candidates_sql(
    branches: list[Compiled], sort: str, limit: int, tested: int = 0
) -> tuple[str, list[Any]]:
    """PostgreSQL: SQL selecting `(id, r)` of the newest `limit` matching steps (the oldest
    when `sort` is oldest), each once, newest first; r is the step's rank when sorting by
    relevance, computed for these rows only (0 otherwise). Ranking every match of a common
    word reads every one of their tsvectors (seconds at a million steps); a page, the count
    up to `limit` and the ranking of the newest `limit` come from this one query.

    A branch with phrases or field terms (`exact_where`) tests at most the newest `tested`
    steps holding all its words (each test reads a tsvector: two common words that seldom
    meet would test hundreds of thousands), newest first, and stops at its `limit`th hit.
    When it found fewer and more steps hold its words than it tested, one more row says so:
    `(UNTESTED, 0)`, after the hits (a second query counting them again cost as much as
    the first)."""
    ranked = sort == "relevance" and all(b.rank_vector for b in branches)
    direction = "ASC" if sort == "oldest" else "DESC"
    parts, params = [], []
    for i, branch in enumerate(branches):
        if branch.exact_where is not None and tested:
            # the newest `tested` + 1 steps with every word, numbered in that order; the
            # phrase or field test on the first `tested`, as far as the `limit`th hit
            where = " AND ".join(f"({w})" for w in branch.exact_where)
            inner = (
                f"SELECT s.id AS id, s.search_vector AS v FROM {branch.from_sql} WHERE {where} "
                f"ORDER BY s.id {direction} LIMIT %s"
            )
            numbered = f"SELECT n{i}.id, n{i}.v, row_number() OVER () AS n FROM ({inner}) AS n{i}"
            text, text_params = branch.where[0], branch.params[:1]
            test = text.replace("s.search_vector", f"c{i}.v")
            rank = pg_rank(f"c{i}.v") if ranked else "0"
            parts.append(
                f"SELECT * FROM (SELECT CASE WHEN c{i}.n > %s THEN {UNTESTED} ELSE c{i}.id END "
                f"AS id, CASE WHEN c{i}.n > %s THEN 0 ELSE {rank} END AS r "
                f"FROM ({numbered}) AS c{i} WHERE c{i}.n > %s OR ({test}) LIMIT %s) AS e{i}"
            )
            rank_params = branch.rank_params if ranked else []
            params.extend(
                [tested, tested, *rank_params, *branch.exact_params, tested + 1, tested]
                + [*text_params, limit]
            )
            continue
        vector = f", {branch.rank_vector} AS v" if ranked else ""
        inner = (
            f"SELECT s.id AS id{vector} FROM {branch.from_sql} WHERE {branch.where_sql} "
            f"ORDER BY s.id {direction} LIMIT %s"
        )
        if ranked:
            # ranked outside the LIMIT: only the rows it keeps are ranked
            parts.append(f"SELECT c{i}.id, {pg_rank(f'c{i}.v')} AS r FROM ({inner}) AS c{i}")
            params.extend([*branch.rank_params, *branch.params, limit])
        else:
            parts.append(f"SELECT c{i}.id, 0 AS r FROM ({inner}) AS c{i}")
            params.extend([*branch.params, limit])
    # UNTESTED last, past the `limit` hits
    return (
        f"SELECT id, MAX(r) FROM ({' UNION ALL '.join(parts)}) AS u GROUP BY id "
        f"ORDER BY id = {UNTESTED}, id {direction} LIMIT %s",
        [*params, limit + 1],
    )


def count_sql(branches: list[Compiled], limit: int) -> tuple[str, list[Any]]:
    """SQL counting the matching steps, each once, up to `limit` (a count past it reads
    "more than")."""
    parts, params = [], []
    for i, branch in enumerate(branches):
        parts.append(
            f"SELECT id FROM (SELECT s.id AS id FROM {branch.from_sql} WHERE {branch.where_sql} "
            f"LIMIT %s) AS c{i}"
        )
        params.extend([*branch.params, limit])
    return f"SELECT COUNT(*) FROM ({' UNION '.join(parts)}) AS found", params


def trajectory_ids_sql(branches: list[Compiled]) -> tuple[str, list[Any]]:
    """SQL selecting the trajectories of the matching steps (each once or more)."""
    parts, params = [], []
    for branch in branches:
        parts.append(f"SELECT b.trajectory_id FROM {branch.from_sql} WHERE {branch.where_sql}")
        params.extend(branch.params)
    return " UNION ".join(parts), params
