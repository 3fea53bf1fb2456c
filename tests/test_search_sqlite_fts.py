"""The SQLite FTS5 path of `studio.search` on a bare in-memory sqlite3 connection, so it runs
whatever database the suite uses: migrations 0022's, 0023's, 0026's and 0027's SQLite
statements (tables and triggers) over the columns they read, the SQL `compile_branches` and
`page_sql` / `count_sql` issue for SQLite, and the indexer's (`studio.search.indexer`) for
steps an import wrote unindexed. Every search test runs before 0026, after it and after 0027
(their triggers must index an ordinary write as 0022's did); the deferred ones run on 0027's
triggers (what a database has now). A bare connection is given the function 0027's
triggers call, as Django's connections are (`studio.search.text`)."""

from __future__ import annotations

import importlib
import sqlite3

import pytest

from studio.search.backends import SEES_ALL, Viewer, compile_branches, count_sql, page_sql
from studio.search.indexer import SQLITE_INDEX_BATCH
from studio.search.query import parse
from studio.search.text import register_sqlite_function

migration = importlib.import_module("studio.migrations.0022_step_search")
migration_0023 = importlib.import_module(
    "studio.migrations.0023_search_annotations_trajectories_saved"
)
migration_0026 = importlib.import_module("studio.migrations.0026_deferred_search_index")
migration_0027 = importlib.import_module("studio.migrations.0027_search_without_ansi")

SCHEMA = [
    "CREATE TABLE studio_trajectory (id INTEGER PRIMARY KEY, project_id INTEGER, domain TEXT, "
    "source_format TEXT, title TEXT DEFAULT '', task_instruction TEXT DEFAULT '', "
    "metadata TEXT DEFAULT '{}')",
    "CREATE TABLE studio_branch (id INTEGER PRIMARY KEY, trajectory_id INTEGER, job_id INTEGER)",
    "CREATE TABLE studio_step (id INTEGER PRIMARY KEY, branch_id INTEGER, action TEXT, "
    "observation TEXT, observation_source TEXT DEFAULT 'recorded', "
    "provenance TEXT DEFAULT 'recorded', meta TEXT DEFAULT '{}')",
    "CREATE TABLE studio_stepannotation (id INTEGER PRIMARY KEY, step_id INTEGER, "
    "queue_id INTEGER, author_id INTEGER DEFAULT 1, verdict TEXT DEFAULT '', "
    "comment TEXT DEFAULT '', tags TEXT DEFAULT '[]', corrected_observation TEXT DEFAULT '')",
    "CREATE TABLE studio_annotationqueue (id INTEGER PRIMARY KEY, blind BOOL)",
    "CREATE TABLE studio_simulationjob (id INTEGER PRIMARY KEY, backend TEXT, model TEXT)",
]


@pytest.fixture(params=["0023", "0026", "0027"])
def db(request):
    conn = sqlite3.connect(":memory:")
    register_sqlite_function(conn)
    for sql in SCHEMA:
        conn.execute(sql)
    conn.executemany(
        "INSERT INTO studio_trajectory (id, project_id, domain, source_format, title, metadata) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (1, 10, "terminal", "native", "Shell work", "{}"),
            (2, 10, "web", "native", "Shop", '{"world": {"name": "Northwind"}}'),
            (3, 20, "web", "native", "Shell elsewhere", "{}"),
        ],
    )
    conn.executemany("INSERT INTO studio_branch VALUES (?, ?, NULL)", [(1, 1), (2, 2), (3, 3)])
    # a step written before the migration is indexed by it
    conn.execute(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (1, 1, 'grep needle', 'no match')"
    )
    for sql in [*migration.SQLITE_CREATE, *migration_0023.SQLITE_CREATE]:
        conn.execute(sql)
    if request.param in ("0026", "0027"):
        for sql in migration_0026.SQLITE_CREATE:
            conn.execute(sql)
    if request.param == "0027":
        for sql in migration_0027.SQLITE_FORWARD:
            conn.execute(sql)
    conn.executemany(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (?, ?, ?, ?)",
        [
            (2, 1, "ls", "needle.txt haystack"),
            (3, 2, "cat a.json", '{"error": "file not found"}'),
            (4, 3, "needle other project", "needle"),
        ],
    )
    yield conn
    conn.close()


def run(conn, text, projects=(10,), viewer=SEES_ALL, sort="oldest", limit=100, offset=0):
    branches = compile_branches(parse(text), "sqlite", list(projects), viewer)
    sql, params = page_sql(branches, sort, limit, offset)
    return [r[0] for r in conn.execute(sql.replace("%s", "?"), params)]


def count(conn, text, limit=1000, viewer=SEES_ALL):
    sql, params = count_sql(compile_branches(parse(text), "sqlite", [10], viewer), limit)
    return conn.execute(sql.replace("%s", "?"), params).fetchone()[0]


def test_terms_phrases_prefixes_exclusions_and_fields(db):
    assert sorted(run(db, "needle")) == [1, 2]
    assert run(db, '"file not found"') == [3]
    assert run(db, "needle -haystack") == [1]
    assert run(db, "hay*") == [2]
    assert run(db, "action:needle") == [1]
    assert run(db, "observation:needle") == [2]
    assert run(db, "needle.txt") == [2]
    assert run(db, "domain:web found") == [3]
    assert sorted(run(db, "-domain:web needle")) == [1, 2]


def test_other_projects_stay_out(db):
    assert sorted(run(db, "needle")) == [1, 2]
    assert run(db, "needle", projects=(20,)) == [4]


def test_triggers_keep_the_index_current(db):
    db.execute("UPDATE studio_step SET action = 'open giraffe' WHERE id = 1")
    assert run(db, "grep") == [] and run(db, "giraffe") == [1]
    db.execute("DELETE FROM studio_step WHERE id = 2")
    assert run(db, "haystack") == []
    db.execute(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (9, 2, 'zebra', '')"
    )
    assert run(db, "zebra") == [9]
    # the index agrees with its content table (FTS5's own check)
    db.execute(
        f"INSERT INTO {migration.FTS_TABLE}({migration.FTS_TABLE}) VALUES ('integrity-check')"
    )


# a viewer kept blind to others' annotations of step 2 (as `viewer_for` builds one)
BLIND = Viewer(user_id=7, hidden_sql="SELECT 2")


def test_filters_verdict_and_model(db):
    db.execute("INSERT INTO studio_annotationqueue VALUES (1, 1)")
    db.executemany(
        "INSERT INTO studio_stepannotation (step_id, queue_id, verdict) VALUES (?, ?, ?)",
        [(1, None, "reject"), (2, 1, "reject")],  # the second is in a blind queue
    )
    assert run(db, "verdict:reject") == [1, 2]
    assert run(db, "verdict:reject", viewer=BLIND) == [1]
    db.execute("INSERT INTO studio_simulationjob VALUES (5, 'openai', 'Qwen3')")
    db.execute(
        "UPDATE studio_step SET observation_source = 'simulated', meta = '{\"job\": 5}' WHERE id = 3"
    )
    assert run(db, "model:qwen3") == [3]
    assert run(db, "source:simulated") == [3]
    assert sorted(run(db, "source:recorded")) == [1, 2]


def test_annotations_each_way_once_and_as_viewers_see_them(db):
    db.executemany(
        "INSERT INTO studio_stepannotation (id, step_id, author_id, comment, tags, "
        "corrected_observation) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (1, 3, 1, "invented error", '["hallucination"]', "permission denied"),
            (2, 2, 1, "needle again", "[]", ""),  # step 2's own text holds needle too
            (3, 2, 7, "mine", "[]", ""),  # by the blind viewer
        ],
    )
    assert run(db, "invented") == [3]
    assert run(db, "file invented") == []  # not mixed across the step and its annotation
    assert run(db, "tag:hallucination") == [3]
    assert run(db, 'correction:"permission denied"') == [3]
    assert run(db, "comment:invented tag:hallu*") == [3]
    assert run(db, "needle", sort="newest") == [2, 1]  # step 2 once
    assert count(db, "needle") == 2
    assert run(db, "needle", sort="relevance", limit=1, offset=1) in ([1], [2])
    assert run(db, "file -invented") == []
    assert run(db, "comment:needle", viewer=BLIND) == []
    assert run(db, "comment:mine", viewer=BLIND) == [2]
    db.execute("UPDATE studio_stepannotation SET comment = 'rewritten' WHERE id = 1")
    assert run(db, "invented") == [] and run(db, "comment:rewritten") == [3]
    db.execute("DELETE FROM studio_stepannotation WHERE id = 1")
    assert run(db, "rewritten") == []


def test_trajectory_fields(db):
    db.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (5, 2, 'click buy')")
    assert run(db, "world:northwind") == [3, 5]
    assert run(db, "title:shell needle") == [1, 2]
    assert run(db, "title:shell", projects=(20,)) == [4]
    db.execute("UPDATE studio_trajectory SET title = 'Renamed' WHERE id = 1")
    assert run(db, "title:shell") == []


def test_drop_removes_table_and_triggers(db):
    triggers = db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    if any("studio_without_ansi" in sql for (sql,) in triggers):
        for sql in migration_0027.SQLITE_BACKWARD:
            db.execute(sql)
    if db.execute(
        f"SELECT 1 FROM sqlite_master WHERE name = '{migration_0026.DEFERRAL}'"
    ).fetchone():
        for sql in migration_0026.SQLITE_DROP:
            db.execute(sql)
    for sql in [*migration_0023.SQLITE_DROP, *migration.SQLITE_DROP]:
        db.execute(sql)
    left = db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'studio_%fts%'").fetchall()
    assert left == []
    db.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (20, 1, 'still writable')")


# ---- 0026: steps an import writes unindexed -----------------------------------------------

DEFERRAL = migration_0026.DEFERRAL
UNINDEXED = migration_0026.UNINDEXED


def integrity_check(conn) -> None:
    """FTS5's own check that the index agrees with studio_step (raises if it does not)."""
    conn.execute(
        f"INSERT INTO {migration.FTS_TABLE}({migration.FTS_TABLE}) VALUES ('integrity-check')"
    )


def index_pending(conn, batch: int = 2) -> int:
    """The indexer's batches (`studio.search.indexer.SQLITE_INDEX_BATCH`) until none is left."""
    done = 0
    while True:
        for sql in SQLITE_INDEX_BATCH:
            cursor = conn.execute(sql.replace("%s", "?"), [batch])
        if not cursor.rowcount:
            return done
        done += cursor.rowcount


def unindexed(conn) -> list[int]:
    return [r[0] for r in conn.execute(f"SELECT step_id FROM {UNINDEXED} ORDER BY step_id")]


@pytest.fixture
def db26():
    conn = sqlite3.connect(":memory:", isolation_level=None)  # BEGIN / COMMIT by hand
    register_sqlite_function(conn)
    for sql in SCHEMA:
        conn.execute(sql)
    conn.execute("INSERT INTO studio_trajectory (id, project_id, domain, source_format) "
                 "VALUES (1, 10, 'terminal', 'native')")  # fmt: skip
    conn.execute("INSERT INTO studio_branch VALUES (1, 1, NULL)")
    conn.execute(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (1, 1, 'ls', 'a b')"
    )
    for sql in [
        *migration.SQLITE_CREATE,
        *migration_0023.SQLITE_CREATE,
        *migration_0026.SQLITE_CREATE,
        *migration_0027.SQLITE_FORWARD,
    ]:
        conn.execute(sql)
    yield conn
    conn.close()


def deferred_write(conn, rows) -> None:
    """Steps written as an import writes them: the flag row inserted and deleted inside the
    transaction (`studio.search.indexer.deferred_indexing`)."""
    conn.execute("BEGIN")
    flag = conn.execute(f"INSERT INTO {DEFERRAL} DEFAULT VALUES").lastrowid
    conn.executemany(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (?, 1, ?, ?)", rows
    )
    conn.execute(f"DELETE FROM {DEFERRAL} WHERE id = ?", [flag])
    conn.execute("COMMIT")


def test_deferred_steps_wait_for_the_indexer(db26):
    deferred_write(db26, [(2, "cat otter.txt", "otter"), (3, "ls", "otter den")])
    assert run(db26, "otter") == [] and unindexed(db26) == [2, 3]
    assert db26.execute(f"SELECT COUNT(*) FROM {DEFERRAL}").fetchone()[0] == 0
    # written after the import: indexed at once
    db26.execute("INSERT INTO studio_step (id, branch_id, action, observation) "
                 "VALUES (4, 1, 'echo otter', '')")  # fmt: skip
    assert run(db26, "otter") == [4]
    integrity_check(db26)
    assert index_pending(db26) == 2
    assert run(db26, "otter") == [2, 3, 4] and unindexed(db26) == []
    assert index_pending(db26) == 0
    integrity_check(db26)


def test_unindexed_steps_changed_or_deleted_keep_the_index_consistent(db26):
    deferred_write(db26, [(i, f"step {i} heron", "heron") for i in range(2, 8)])
    db26.execute("UPDATE studio_step SET action = 'grep egret' WHERE id = 2")
    db26.execute("UPDATE studio_step SET observation = 'egret' WHERE id = 3")
    db26.execute("UPDATE studio_step SET meta = '{}' WHERE id = 4")
    db26.execute("DELETE FROM studio_step WHERE id IN (5, 6)")
    db26.execute("DELETE FROM studio_step WHERE id = 1")  # an indexed one
    integrity_check(db26)
    assert unindexed(db26) == [2, 3, 4, 7]
    index_pending(db26)
    integrity_check(db26)
    assert run(db26, "egret") == [2, 3]
    assert run(db26, "heron") == [2, 3, 4, 7]  # each still holds it somewhere
    # indexed now: changed and deleted as any step
    db26.execute("UPDATE studio_step SET action = 'stork' WHERE id = 7")
    db26.execute("DELETE FROM studio_step WHERE id = 3")
    assert run(db26, "stork") == [7] and run(db26, "egret") == [2]
    integrity_check(db26)


def test_an_indexed_step_changed_while_deferring_goes_back_to_the_indexer(db26):
    db26.execute("BEGIN")
    flag = db26.execute(f"INSERT INTO {DEFERRAL} DEFAULT VALUES").lastrowid
    db26.execute("UPDATE studio_step SET action = 'puffin' WHERE id = 1")
    db26.execute(f"DELETE FROM {DEFERRAL} WHERE id = ?", [flag])
    db26.execute("COMMIT")
    assert run(db26, "ls") == [] and run(db26, "puffin") == [] and unindexed(db26) == [1]
    integrity_check(db26)
    index_pending(db26)
    assert run(db26, "puffin") == [1]
    integrity_check(db26)


def test_a_rolled_back_import_leaves_nothing_deferred(db26):
    db26.execute("BEGIN")
    db26.execute(f"INSERT INTO {DEFERRAL} DEFAULT VALUES")
    db26.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (2, 1, 'kiwi')")
    db26.execute("ROLLBACK")
    assert db26.execute(f"SELECT COUNT(*) FROM {DEFERRAL}").fetchone()[0] == 0
    db26.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (2, 1, 'kiwi')")
    assert run(db26, "kiwi") == [2] and unindexed(db26) == []


@pytest.mark.parametrize("trigger", ["0022", "0026"])
def test_a_step_fts_never_held_is_never_deleted_from_it(db26, trigger):
    """Why 0026's delete trigger asks first: 0022's tells FTS5 to delete a step it never
    held, which leaves the external-content index corrupt (FTS5 says so at once here, or at
    its integrity-check; what it does is undefined)."""
    deferred_write(db26, [(2, "gannet tern", "gannet")])
    if trigger == "0022":
        db26.execute("DROP TRIGGER studio_step_fts_delete")
        db26.execute(migration.SQLITE_CREATE[3])  # 0022's delete trigger

    def delete_and_write_again():
        db26.execute("DELETE FROM studio_step WHERE id = 2")
        db26.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (2, 1, 'other')")
        integrity_check(db26)

    if trigger == "0022":
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            delete_and_write_again()
    else:
        delete_and_write_again()
        assert run(db26, "other") == [2] and run(db26, "gannet") == []


def test_reverse_indexes_what_waits_and_restores_0022s_triggers(db26):
    deferred_write(db26, [(2, "ibis", "ibis")])
    for sql in [*migration_0027.SQLITE_BACKWARD, *migration_0026.SQLITE_DROP]:
        db26.execute(sql)
    assert run(db26, "ibis") == [2]
    integrity_check(db26)
    triggers = dict(
        db26.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                     "AND tbl_name = 'studio_step'").fetchall()
    )  # fmt: skip
    assert sorted(triggers.values()) == sorted(migration.SQLITE_CREATE[2:])
    left = db26.execute(
        f"SELECT name FROM sqlite_master WHERE name IN ('{DEFERRAL}', '{UNINDEXED}')"
    ).fetchall()
    assert left == []
    db26.execute("UPDATE studio_step SET action = 'spoonbill' WHERE id = 2")
    assert run(db26, "spoonbill") == [2]
    integrity_check(db26)


# ---- 0027: terminal escape sequences out of the index ------------------------------------

COLOURED = "\x1b[34mdpkg\x1b[0m: \x1b[1;31mfailed\x1b[0m result\x1b]0;term title\x07 done"


def vocabulary(conn) -> set[str]:
    """Every word FTS5 holds for studio_step (a word left behind would show here)."""
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.step_vocab USING "
        f"fts5vocab(main, {migration.FTS_TABLE}, 'row')"
    )
    return {row[0] for row in conn.execute("SELECT term FROM temp.step_vocab")}


def test_coloured_text_is_indexed_as_it_reads(db26):
    db26.execute("INSERT INTO studio_step (id, branch_id, action, observation) "
                 "VALUES (2, 1, 'apt install', ?)", [COLOURED])  # fmt: skip
    deferred_write(db26, [(3, "\x1b[32mcargo\x1b[0m build", "ok")])
    index_pending(db26)
    assert run(db26, "dpkg") == [2] and run(db26, '"failed result"') == [2]
    assert run(db26, "title") == []  # a window title is no text of the step
    assert run(db26, "cargo") == [3]
    assert {"34mdpkg", "0m", "31mfailed", "32mcargo"}.isdisjoint(vocabulary(db26))
    # changed and deleted: FTS5 is told the words it was given, none is left behind
    db26.execute("UPDATE studio_step SET observation = 'plain' WHERE id = 2")
    db26.execute("DELETE FROM studio_step WHERE id = 3")
    assert run(db26, "dpkg") == [] and run(db26, "cargo") == []
    assert vocabulary(db26) == {"ls", "a", "b", "apt", "install", "plain"}


def test_0027_indexes_again_the_coloured_steps_of_0026(db26):
    for sql in migration_0027.SQLITE_BACKWARD:  # as a database was before 0027
        db26.execute(sql)
    db26.execute("INSERT INTO studio_step (id, branch_id, action, observation) "
                 "VALUES (2, 1, 'apt install', ?)", [COLOURED])  # fmt: skip
    deferred_write(db26, [(3, "\x1b[32mcargo\x1b[0m", "")])  # waiting: the indexer's
    assert run(db26, "dpkg") == [] and run(db26, "34mdpkg") == [2]
    for sql in migration_0027.SQLITE_FORWARD:
        db26.execute(sql)
    assert run(db26, "dpkg") == [2] and run(db26, "34mdpkg") == []
    assert unindexed(db26) == [3]
    index_pending(db26)
    assert run(db26, "cargo") == [3]
    db26.execute("DELETE FROM studio_step WHERE id IN (2, 3)")
    assert vocabulary(db26) == {"ls", "a", "b"}
