"""Step search: terminal escape sequences (colours, titles, any escape) are taken out of a step's text
before the index splits it into words (`studio.search.text`), so "\\x1b[34mdpkg" is indexed
as "dpkg", not "34mdpkg".

PostgreSQL: `studio_step_search_vector` (0026) is made again with the sequences taken out;
the steps holding an escape character are indexed again (the others' vectors are the same).

SQLite: the triggers (0026) index `studio_without_ansi(...)` of each text, a function every
connection is given (`studio.search.text.register_sqlite_function`, on Django's
connection_created); the steps holding an escape character are taken out of FTS5 with the
text it was given then (FTS5 must be told exactly that) and indexed again.

The reverse makes 0026's function and triggers again and indexes those steps as before."""

from django.db import migrations

INDEXED_CHARS = 20_000  # studio.search.backends.INDEXED_CHARS
FTS_TABLE = "studio_step_fts"
UNINDEXED = "studio_step_unindexed"
DEFERRAL = "studio_search_deferral"
FUNCTION = "studio_without_ansi"  # studio.search.text.SQLITE_FUNCTION
# studio.search.text.PG_ANSI, frozen here (inference.simulation.meaning.TERMINAL_ESCAPE in
# PostgreSQL's words: CSI, OSC, two-byte escapes, a lone ESC)
PG_ANSI = r"\x1b\[[0-9;:?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x1b"


def _pg_text(column: str, plain: bool) -> str:
    bounded = f"left({column}, {INDEXED_CHARS})"
    if plain:
        bounded = f"regexp_replace({bounded}, '{PG_ANSI}', '', 'g')"
    return f"regexp_replace({bounded}, '[^[:alnum:]]+', ' ', 'g')"


def _pg_function(plain: bool) -> str:
    vector = (
        f"setweight(to_tsvector('simple'::regconfig, {_pg_text('action', plain)}), 'A') || "
        f"setweight(to_tsvector('simple'::regconfig, {_pg_text('observation', plain)}), 'B')"
    )
    return (
        "CREATE OR REPLACE FUNCTION studio_step_search_vector(action text, observation text) "
        f"RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {vector} $$"
    )


# the steps an escape character's removal changes (an unindexed one, NULL, stays for the
# indexer)
PG_REINDEX = (
    "UPDATE studio_step SET search_vector = studio_step_search_vector(action, observation) "
    "WHERE search_vector IS NOT NULL AND (strpos(action, chr(27)) > 0 "
    "OR strpos(observation, chr(27)) > 0)"
)
PG_FORWARD = [_pg_function(True), PG_REINDEX]
PG_BACKWARD = [_pg_function(False), PG_REINDEX]


def _bounded(row: str, plain: bool) -> str:
    texts = [f"substr({row}.{c}, 1, {INDEXED_CHARS})" for c in ("action", "observation")]
    if plain:
        texts = [f"{FUNCTION}({t})" for t in texts]
    return ", ".join(texts)


_DEFERRING = f"EXISTS (SELECT 1 FROM {DEFERRAL})"
_UNINDEXED = f"EXISTS (SELECT 1 FROM {UNINDEXED} WHERE step_id = old.id)"
_ESCAPED = (
    f"(instr(s.action, char(27)) > 0 OR instr(s.observation, char(27)) > 0) "
    f"AND s.id NOT IN (SELECT step_id FROM {UNINDEXED})"
)


def _sqlite(plain: bool) -> list[str]:
    """0026's triggers, indexing the text as it was (plain False) or without escapes; the
    escaped steps indexed the other way are indexed again."""
    was = not plain
    return [
        # out of FTS5 with the text it was given, in again with the new one
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) "
        f"SELECT 'delete', s.id, {_bounded('s', was)} FROM studio_step s WHERE {_ESCAPED}",
        f"INSERT INTO {FTS_TABLE}(rowid, action, observation) "
        f"SELECT s.id, {_bounded('s', plain)} FROM studio_step s WHERE {_ESCAPED}",
        "DROP TRIGGER IF EXISTS studio_step_fts_insert",
        "DROP TRIGGER IF EXISTS studio_step_fts_delete",
        "DROP TRIGGER IF EXISTS studio_step_fts_update",
        f"CREATE TRIGGER studio_step_fts_insert AFTER INSERT ON studio_step WHEN NOT "
        f"{_DEFERRING} BEGIN INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES "
        f"(new.id, {_bounded('new', plain)}); END",
        f"CREATE TRIGGER studio_step_fts_delete AFTER DELETE ON studio_step BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) "
        f"SELECT 'delete', old.id, {_bounded('old', plain)} WHERE NOT {_UNINDEXED}; "
        f"DELETE FROM {UNINDEXED} WHERE step_id = old.id; END",
        f"CREATE TRIGGER studio_step_fts_update AFTER UPDATE OF action, observation ON "
        "studio_step WHEN (old.action IS NOT new.action OR old.observation IS NOT "
        f"new.observation) AND NOT {_UNINDEXED} BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', "
        f"old.id, {_bounded('old', plain)}); "
        f"INSERT INTO {FTS_TABLE}(rowid, action, observation) SELECT new.id, "
        f"{_bounded('new', plain)} WHERE NOT {_DEFERRING}; "
        f"INSERT INTO {UNINDEXED}(step_id) SELECT new.id WHERE {_DEFERRING}; END",
    ]


SQLITE_FORWARD = _sqlite(True)
SQLITE_BACKWARD = _sqlite(False)


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("studio", "0026_deferred_search_index")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": PG_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        )
    ]
