"""Step search: an import's steps are indexed right after it commits (by a worker,
`studio.search.indexer`), every other write as before, in its own transaction. Keeping a
tsvector and its GIN index (or FTS5) current in the write path made an import 5.4x slower on
PostgreSQL and 1.8x on SQLite (scripts/bench_search.py); written unindexed, an import is
within a few percent of one without any search index.

PostgreSQL: 0022's generated column becomes a plain one (its values kept), filled by a
BEFORE INSERT / UPDATE trigger with the same expression (the function
`studio_step_search_vector`), or left NULL while the transaction has set
`studio.defer_search_index` to 'on' (`SET LOCAL`, `studio.search.indexer.deferred_indexing`);
a partial index finds the steps left NULL.

SQLite: while `studio_search_deferral` holds a row (inserted and deleted inside the import's
own transaction: no other connection ever sees it), a new step's id goes to
`studio_step_unindexed` instead of FTS5. FTS5 must never be told to delete a row it does not
hold (an external-content index is then corrupt), so deleting or updating a step not yet
indexed only takes it out of `studio_step_unindexed` (the indexer reads its text when it
comes).

0022's statements are left as they were (history); this one drops and makes what it
changes, and its reverse makes 0022's column, index and triggers again."""

from django.db import migrations

INDEXED_CHARS = 20_000  # studio.search.backends.INDEXED_CHARS
FTS_TABLE = "studio_step_fts"
UNINDEXED = "studio_step_unindexed"  # studio.search.indexer.UNINDEXED_TABLE
DEFERRAL = "studio_search_deferral"  # studio.search.indexer.DEFERRAL_TABLE
SETTING = "studio.defer_search_index"  # studio.search.indexer.DEFER_SETTING

# The DDL, frozen here (tests/test_search_sqlite_fts.py runs the SQLite statements on a bare
# connection; tests/test_search_deferred.py checks the function against 0022's expression).


def _pg_text(column: str) -> str:
    return f"regexp_replace(left({column}, {INDEXED_CHARS}), '[^[:alnum:]]+', ' ', 'g')"


# 0022's generated expression, word for word, over the function's two arguments
PG_VECTOR = (
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('action')}), 'A') || "
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('observation')}), 'B')"
)

PG_CREATE = [
    "CREATE FUNCTION studio_step_search_vector(action text, observation text) RETURNS tsvector "
    f"LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {PG_VECTOR} $$",
    # no rewrite: the values stay, the column is no longer computed by the table
    "ALTER TABLE studio_step ALTER COLUMN search_vector DROP EXPRESSION",
    "CREATE FUNCTION studio_step_search_vector_set() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN "
    f"IF current_setting('{SETTING}', true) = 'on' THEN NEW.search_vector := NULL; "
    "ELSE NEW.search_vector := studio_step_search_vector(NEW.action, NEW.observation); "
    "END IF; RETURN NEW; END $$",
    "CREATE TRIGGER studio_step_search_vector_insert BEFORE INSERT ON studio_step "
    "FOR EACH ROW EXECUTE FUNCTION studio_step_search_vector_set()",
    # a save that leaves the text as it was (Django's save() names every column) keeps the
    # vector, NULL included (the indexer then fills it)
    "CREATE TRIGGER studio_step_search_vector_update BEFORE UPDATE OF action, observation "
    "ON studio_step FOR EACH ROW WHEN (OLD.action IS DISTINCT FROM NEW.action "
    "OR OLD.observation IS DISTINCT FROM NEW.observation) "
    "EXECUTE FUNCTION studio_step_search_vector_set()",
    "CREATE INDEX studio_step_search_pending ON studio_step (id) WHERE search_vector IS NULL",
]
PG_DROP = [
    "DROP TRIGGER IF EXISTS studio_step_search_vector_update ON studio_step",
    "DROP TRIGGER IF EXISTS studio_step_search_vector_insert ON studio_step",
    "DROP FUNCTION IF EXISTS studio_step_search_vector_set()",
    "DROP INDEX IF EXISTS studio_step_search_pending",
    # 0022's generated column and GIN index again (every step's vector computed, the
    # unindexed ones included)
    "DROP INDEX IF EXISTS studio_step_search_gin",
    "ALTER TABLE studio_step DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE studio_step ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('action')}), 'A') || "
    f"setweight(to_tsvector('simple'::regconfig, {_pg_text('observation')}), 'B')) STORED",
    "CREATE INDEX studio_step_search_gin ON studio_step USING GIN (search_vector)",
    "DROP FUNCTION IF EXISTS studio_step_search_vector(text, text)",
]


def _bounded(row: str) -> str:
    return f"substr({row}.action, 1, {INDEXED_CHARS}), substr({row}.observation, 1, {INDEXED_CHARS})"


_DEFERRING = f"EXISTS (SELECT 1 FROM {DEFERRAL})"
_UNINDEXED = f"EXISTS (SELECT 1 FROM {UNINDEXED} WHERE step_id = old.id)"

SQLITE_CREATE = [
    f"CREATE TABLE {UNINDEXED} (step_id INTEGER PRIMARY KEY)",
    f"CREATE TABLE {DEFERRAL} (id INTEGER PRIMARY KEY)",
    "DROP TRIGGER IF EXISTS studio_step_fts_insert",
    "DROP TRIGGER IF EXISTS studio_step_fts_delete",
    "DROP TRIGGER IF EXISTS studio_step_fts_update",
    f"CREATE TRIGGER studio_step_fts_insert AFTER INSERT ON studio_step WHEN NOT {_DEFERRING} "
    f"BEGIN INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES (new.id, "
    f"{_bounded('new')}); END",
    f"CREATE TRIGGER studio_step_fts_defer AFTER INSERT ON studio_step WHEN {_DEFERRING} "
    f"BEGIN INSERT INTO {UNINDEXED}(step_id) VALUES (new.id); END",
    # FTS5 is told to delete only what it holds
    f"CREATE TRIGGER studio_step_fts_delete AFTER DELETE ON studio_step BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) "
    f"SELECT 'delete', old.id, {_bounded('old')} WHERE NOT {_UNINDEXED}; "
    f"DELETE FROM {UNINDEXED} WHERE step_id = old.id; END",
    # an unindexed step: nothing to do (the indexer reads its text when it comes); an indexed
    # one is indexed again, or left to the indexer while this transaction defers
    f"CREATE TRIGGER studio_step_fts_update AFTER UPDATE OF action, observation ON studio_step "
    "WHEN (old.action IS NOT new.action OR old.observation IS NOT new.observation) "
    f"AND NOT {_UNINDEXED} BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', "
    f"old.id, {_bounded('old')}); "
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) SELECT new.id, {_bounded('new')} "
    f"WHERE NOT {_DEFERRING}; "
    f"INSERT INTO {UNINDEXED}(step_id) SELECT new.id WHERE {_DEFERRING}; END",
]
SQLITE_DROP = [
    # the steps still waiting are indexed first: 0022's triggers assume every step is
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) SELECT s.id, {_bounded('s')} "
    f"FROM {UNINDEXED} u JOIN studio_step s ON s.id = u.step_id",
    "DROP TRIGGER IF EXISTS studio_step_fts_update",
    "DROP TRIGGER IF EXISTS studio_step_fts_delete",
    "DROP TRIGGER IF EXISTS studio_step_fts_defer",
    "DROP TRIGGER IF EXISTS studio_step_fts_insert",
    f"DROP TABLE IF EXISTS {DEFERRAL}",
    f"DROP TABLE IF EXISTS {UNINDEXED}",
    # 0022's triggers again
    f"CREATE TRIGGER studio_step_fts_insert AFTER INSERT ON studio_step BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES (new.id, {_bounded('new')}); "
    "END",
    f"CREATE TRIGGER studio_step_fts_delete AFTER DELETE ON studio_step BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', old.id, "
    f"{_bounded('old')}); END",
    f"CREATE TRIGGER studio_step_fts_update AFTER UPDATE OF action, observation ON studio_step "
    f"BEGIN INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, action, observation) VALUES ('delete', "
    f"old.id, {_bounded('old')}); INSERT INTO {FTS_TABLE}(rowid, action, observation) VALUES "
    f"(new.id, {_bounded('new')}); END",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("studio", "0025_search_performance")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_CREATE, "sqlite": SQLITE_CREATE}),
            _run({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
        )
    ]
