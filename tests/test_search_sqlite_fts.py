"""The SQLite FTS5 path of `studio.search` on a bare in-memory sqlite3 connection, so it runs
whatever database the suite uses: migration 0022's SQLite statements (table and triggers)
over the columns they read, and the SQL `compile_where` issues for SQLite."""

from __future__ import annotations

import importlib
import sqlite3

import pytest

from studio.search.backends import compile_where
from studio.search.query import parse

migration = importlib.import_module("studio.migrations.0022_step_search")

SCHEMA = [
    "CREATE TABLE studio_trajectory (id INTEGER PRIMARY KEY, project_id INTEGER, domain TEXT, "
    "source_format TEXT)",
    "CREATE TABLE studio_branch (id INTEGER PRIMARY KEY, trajectory_id INTEGER, job_id INTEGER)",
    "CREATE TABLE studio_step (id INTEGER PRIMARY KEY, branch_id INTEGER, action TEXT, "
    "observation TEXT, observation_source TEXT DEFAULT 'recorded', "
    "provenance TEXT DEFAULT 'recorded', meta TEXT DEFAULT '{}')",
    "CREATE TABLE studio_stepannotation (id INTEGER PRIMARY KEY, step_id INTEGER, "
    "queue_id INTEGER, verdict TEXT)",
    "CREATE TABLE studio_annotationqueue (id INTEGER PRIMARY KEY, blind BOOL)",
    "CREATE TABLE studio_simulationjob (id INTEGER PRIMARY KEY, backend TEXT, model TEXT)",
]


@pytest.fixture
def db():
    conn = sqlite3.connect(":memory:")
    for sql in SCHEMA:
        conn.execute(sql)
    conn.executemany(
        "INSERT INTO studio_trajectory VALUES (?, ?, ?, ?)",
        [(1, 10, "terminal", "native"), (2, 10, "web", "native"), (3, 20, "web", "native")],
    )
    conn.executemany("INSERT INTO studio_branch VALUES (?, ?, NULL)", [(1, 1), (2, 2), (3, 3)])
    # a step written before the migration is indexed by it
    conn.execute(
        "INSERT INTO studio_step (id, branch_id, action, observation) VALUES (1, 1, 'grep needle', 'no match')"
    )
    for sql in migration.SQLITE_CREATE:
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


def run(conn, text, projects=(10,)):
    compiled = compile_where(parse(text), "sqlite", list(projects))
    order = f"{compiled.rank_sql}, s.id" if compiled.rank_sql else "s.id"
    sql = f"SELECT s.id FROM {compiled.from_sql} WHERE {compiled.where_sql} ORDER BY {order}"
    return [r[0] for r in conn.execute(sql.replace("%s", "?"), compiled.params)]


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


def test_filters_verdict_and_model(db):
    db.execute("INSERT INTO studio_annotationqueue VALUES (1, 1)")
    db.executemany(
        "INSERT INTO studio_stepannotation (step_id, queue_id, verdict) VALUES (?, ?, ?)",
        [(1, None, "reject"), (2, 1, "reject")],  # the second is in a blind queue
    )
    assert run(db, "verdict:reject") == [1]
    db.execute("INSERT INTO studio_simulationjob VALUES (5, 'openai', 'Qwen3')")
    db.execute(
        "UPDATE studio_step SET observation_source = 'simulated', meta = '{\"job\": 5}' WHERE id = 3"
    )
    assert run(db, "model:qwen3") == [3]
    assert run(db, "source:simulated") == [3]
    assert sorted(run(db, "source:recorded")) == [1, 2]


def test_drop_removes_table_and_triggers(db):
    for sql in migration.SQLITE_DROP:
        db.execute(sql)
    left = db.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE 'studio_step_fts%'"
    ).fetchall()
    assert left == []
    db.execute("INSERT INTO studio_step (id, branch_id, action) VALUES (20, 1, 'still writable')")
