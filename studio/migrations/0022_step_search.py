"""Full-text search of steps (`studio.search`): on PostgreSQL a stored generated tsvector
column with a GIN index, on SQLite an FTS5 external-content table kept current by
triggers. Neither is declared on the model; other databases get nothing."""

from django.db import migrations

INDEXED_CHARS = 20_000  # studio.search.backends.INDEXED_CHARS
FTS_TABLE = "studio_step_fts"

# The DDL, frozen here (studio.search.backends reads what it makes; tests/test_search_sqlite_fts.py
# runs the SQLite statements on a bare connection).


def _pg_text(column: str) -> str:
    return f"regexp_replace(left({column}, {INDEXED_CHARS}), '[^[:alnum:]]+', ' ', 'g')"


PG_CREATE = [
    "ALTER TABLE studio_step ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('action')}), 'A') || "
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('observation')}), 'B')) STORED",
    "CREATE INDEX studio_step_search_gin ON studio_step USING GIN (search_vector)",
]
PG_DROP = [
    "DROP INDEX IF EXISTS studio_step_search_gin",
    "ALTER TABLE studio_step DROP COLUMN IF EXISTS search_vector",
]

_BOUNDED = f"substr(%s.action, 1, {INDEXED_CHARS}), substr(%s.observation, 1, {INDEXED_CHARS})"
SQLITE_CREATE = [
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(action, observation, "
    "content='studio_step', content_rowid='id')",
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) SELECT id, "
    + (_BOUNDED % ("studio_step", "studio_step"))
    + " FROM studio_step",
    f"CREATE TRIGGER studio_step_fts_insert AFTER INSERT ON studio_step BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES (new.id, "
    + (_BOUNDED % ("new", "new"))
    + "); END",
    f"CREATE TRIGGER studio_step_fts_delete AFTER DELETE ON studio_step BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', old.id, "
    + (_BOUNDED % ("old", "old"))
    + "); END",
    f"CREATE TRIGGER studio_step_fts_update AFTER UPDATE OF action, observation ON studio_step "
    f"BEGIN INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', "
    "old.id, "
    + (_BOUNDED % ("old", "old"))
    + f"); INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES (new.id, "
    + (_BOUNDED % ("new", "new"))
    + "); END",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS studio_step_fts_update",
    "DROP TRIGGER IF EXISTS studio_step_fts_delete",
    "DROP TRIGGER IF EXISTS studio_step_fts_insert",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        statements = statements_by_vendor.get(schema_editor.connection.vendor, ())
        for sql in statements:
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("studio", "0021_finetunes")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_CREATE, "sqlite": SQLITE_CREATE}),
            _run({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
        )
    ]
