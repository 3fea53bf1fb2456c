"""The SQLite FTS5 path of `studio.search` on a bare in-memory sqlite3 connection, so it runs
whatever database the suite uses: migrations 0022's and 0023's SQLite statements (tables and
triggers) over the columns they read, and the SQL `compile_branches` and `page_sql` /
`count_sql` issue for SQLite."""

from __future__ import annotations

import importlib
import sqlite3

import pytest

from studio.search.backends import SEES_ALL, Viewer, compile_branches, count_sql, page_sql
from studio.search.query import parse

migration = importlib.import_module("studio.migrations.0022_step_search")
migration_0023 = importlib.import_module(
    "studio.migrations.0023_search_annotations_trajectories_saved"
)

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


@pytest.fixture
def db():
    conn = sqlite3.connect(":memory:")
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
    for sql in [*migration_0023.SQLITE_DROP, *migration.SQLITE_DROP]:
        db.execute(sql)
    left = db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'studio_%fts%'").fetchall()
    assert left == []
    db.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (20, 1, 'still writable')")
