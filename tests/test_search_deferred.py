"""Imports are indexed for search right after they commit, everything else as it is written
(`studio.search.indexer`, migration 0026), on the suite's database (PostgreSQL in CI, SQLite
without DATABASE_URL): steps written inside `deferred_indexing()` are not found until
`index_pending` indexes them; ordinary writes are found at once; updates and deletes of steps
not indexed yet keep the index consistent (FTS5's integrity-check on SQLite); two indexers at
once index every step once; the task sends itself again when its time is up; the sweeper
sends one when steps wait and none runs; the search pages say how many steps are not
searchable yet."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from django.urls import reverse

from studio.models import Step
from studio.search import indexer
from studio.search.indexer import (
    deferred_indexing,
    index_pending,
    oldest_unindexed,
    unindexed_count,
)
from studio.search.service import search_steps
from studio.services.imports import do_import_file
from tests.support.imports import native_file
from tests.support.ui import make_trajectory

indexed_db = pytest.mark.skipif(
    "connection.vendor not in ('postgresql', 'sqlite')", reason="no search index"
)


def found(project, query: str) -> set[int]:
    return {h.step_id for h in search_steps([project.pk], query, per_page=100).hits}


def fts_is_consistent() -> None:
    """SQLite: FTS5's own check that the index agrees with studio_step (raises if not)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO studio_step_fts(studio_step_fts) VALUES ('integrity-check')"
            )


def import_file(project, tmp_path: Path, content: bytes | None = None, **kwargs):
    path = tmp_path / "orchard.json"
    path.write_bytes(content or native_file())
    return do_import_file(project=project, path=path, **kwargs)


@pytest.fixture
def no_messages(monkeypatch):
    """The indexer's messages, recorded instead of sent."""
    sent: list[object] = []
    monkeypatch.setattr(indexer, "send_indexing", lambda app=None: sent.append(app) or True)
    return sent


def test_an_import_is_found_once_indexed(project, tmp_path, no_messages):
    done = import_file(project, tmp_path)
    assert done.steps_created == 6
    imported = set(Step.objects.values_list("pk", flat=True))
    assert found(project, "crates") == set()
    assert unindexed_count([project.pk]) == 6
    assert unindexed_count([project.other.pk]) == 0
    assert unindexed_count([project.pk], limit=4) == 5  # "more than 4"
    assert oldest_unindexed() == min(imported)
    result = index_pending()
    assert result.steps == 6 and not result.more
    assert found(project, "crates") == imported
    assert found(project, "pear") == set()  # the trajectory's task is not a step's text
    assert unindexed_count([project.pk]) == 0 and oldest_unindexed() is None
    assert index_pending().steps == 0  # nothing left: idempotent
    fts_is_consistent()


def test_ordinary_writes_are_indexed_as_they_are_written(project):
    trajectory = make_trajectory(project, steps=[("grep giraffe zoo.txt", "giraffe: 2")])
    step = Step.objects.get(branch__trajectory=trajectory)
    assert found(project, "giraffe") == {step.pk}
    assert unindexed_count([project.pk]) == 0
    step.action = "grep zebra zoo.txt"
    step.observation = ""
    step.save()
    assert found(project, "zebra") == {step.pk} and found(project, "giraffe") == set()
    step.meta = {"seen": True}
    step.save()  # the text unchanged: still indexed
    assert found(project, "zebra") == {step.pk}
    Step.objects.filter(pk=step.pk).delete()
    assert found(project, "zebra") == set()
    fts_is_consistent()


def test_deferral_ends_with_its_block(project, tmp_path, no_messages):
    with transaction.atomic():
        import_file(project, tmp_path)
        # the same transaction goes on: what it writes next is indexed at once
        later = make_trajectory(project, steps=[("echo okapi", "okapi")])
    assert found(project, "okapi") == {Step.objects.get(branch__trajectory=later).pk}
    assert unindexed_count([project.pk]) == 6
    # a block that fails leaves nothing deferred behind
    with pytest.raises(RuntimeError), deferred_indexing():
        raise RuntimeError("boom")
    again = make_trajectory(project, title="After", steps=[("echo lemur", "lemur")])
    assert found(project, "lemur") == {Step.objects.get(branch__trajectory=again).pk}


@indexed_db
def test_updates_and_deletes_of_unindexed_steps_keep_the_index_consistent(
    project, tmp_path, no_messages
):
    import_file(project, tmp_path)
    steps = list(Step.objects.order_by("pk"))
    # changed before the indexer came: what it indexes is the text as it is then
    steps[0].action = "sort walnut crates"
    steps[0].save()
    Step.objects.filter(pk=steps[1].pk).update(observation="no such walnut")
    steps[2].meta = {"touched": True}
    steps[2].save()  # the text unchanged
    Step.objects.filter(pk__in=[steps[3].pk, steps[4].pk]).delete()
    fts_is_consistent()
    index_pending()
    fts_is_consistent()
    assert found(project, "walnut") == {steps[0].pk, steps[1].pk}
    # the action of steps[1] still names crates
    assert found(project, "crates") == {steps[0].pk, steps[1].pk, steps[2].pk, steps[5].pk}
    assert unindexed_count([project.pk]) == 0
    # and once indexed, the same changes as any step's
    steps[5].action = "count hazelnut"
    steps[5].save()
    Step.objects.filter(pk=steps[0].pk).delete()
    assert found(project, "hazelnut") == {steps[5].pk}
    assert found(project, "walnut") == {steps[1].pk}
    fts_is_consistent()


@indexed_db
def test_an_indexed_step_changed_while_deferring_waits_for_the_indexer(project, no_messages):
    trajectory = make_trajectory(project, steps=[("echo badger", "badger")])
    step = Step.objects.get(branch__trajectory=trajectory)
    with deferred_indexing():
        step.action = "echo marmot"
        step.observation = "marmot"
        step.save()
    assert found(project, "badger") == set() and found(project, "marmot") == set()
    assert unindexed_count([project.pk]) == 1
    fts_is_consistent()
    index_pending()
    assert found(project, "marmot") == {step.pk}
    fts_is_consistent()


@indexed_db
def test_the_import_sends_the_indexer_on_commit(
    project, tmp_path, no_messages, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        import_file(project, tmp_path)
    assert len(no_messages) == 1
    with django_capture_on_commit_callbacks(execute=True):
        make_trajectory(project, steps=[("echo vole", "vole")])
    assert len(no_messages) == 1  # an ordinary write sends nothing


def test_load_demo_style_imports_can_index_as_they_write(project, tmp_path, no_messages):
    import_file(project, tmp_path, defer_search_index=False)
    assert unindexed_count([project.pk]) == 0
    assert len(found(project, "crates")) == 6


@indexed_db
def test_the_task_hands_the_rest_to_a_new_message(project, tmp_path, no_messages):
    import_file(project, tmp_path)
    done = indexer.run_indexing(budget_s=0, batch=4)
    assert (done.steps, done.more) == (4, True)
    assert len(no_messages) == 1  # the rest goes to a new message
    done = indexer.run_indexing(budget_s=0, batch=4)
    assert (done.steps, done.more) == (2, False)
    assert len(no_messages) == 1
    assert unindexed_count([project.pk]) == 0


@indexed_db
def test_the_sweeper_sends_the_indexer_when_steps_wait_and_none_runs(
    project, tmp_path, no_messages, monkeypatch
):
    held: set[str] | None = set()
    monkeypatch.setattr("studio.jobs.broker.message_ids_held", lambda queues, app=None, **kw: held)
    monkeypatch.setitem(indexer._last_seen, "oldest", None)
    assert not indexer.sweep_unindexed()  # nothing waits
    import_file(project, tmp_path)
    assert not indexer.sweep_unindexed()  # new since the last sweep: its message may come
    held = {"search-index-abc"}
    assert not indexer.sweep_unindexed()  # no progress, but a message waits in the queue
    held = {"another-job"}
    assert indexer.sweep_unindexed()  # no progress and no message: sent
    held = None  # a broker that cannot be asked: a duplicate costs nothing
    assert indexer.sweep_unindexed()
    index_pending(batch=2, budget_s=0)
    held = set()
    assert not indexer.sweep_unindexed()  # progress since the last sweep
    index_pending()
    assert not indexer.sweep_unindexed()
    assert len(no_messages) == 2


@indexed_db
@pytest.mark.django_db(transaction=True)
def test_two_indexers_at_once_index_every_step_once(project, tmp_path, monkeypatch):
    monkeypatch.setattr(indexer, "SEND_ON_COMMIT", False)
    import_file(project, tmp_path, native_file(n_trajectories=20, steps=30))
    assert unindexed_count([project.pk], limit=1000) == 600
    results, errors = [], []
    start = threading.Barrier(2)

    def work():
        try:
            start.wait()
            results.append(index_pending(batch=25))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r.steps for r in results) == 600
    assert unindexed_count([project.pk], limit=1000) == 0
    assert search_steps([project.pk], "crates").total == 600
    fts_is_consistent()


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_function_is_the_expression_0022_generated(db):
    """0026's function and the trigger give every step the vector 0022's generated column
    gave it."""
    m22 = importlib.import_module("studio.migrations.0022_step_search")
    expression = m22.PG_CREATE[0].split("GENERATED ALWAYS AS (", 1)[1].rsplit(") STORED", 1)[0]
    texts = [
        ("cat /srv/app/x.py", "Traceback: KeyError 'id'\n  File \"x.py\", line 3"),
        ("", "<html><a href='https://e.org/a-b'>link</a></html>"),
        ("x" * 25_000 + " tail", "café Ünïcode 42"),
    ]
    with connection.cursor() as cursor:
        for action, observation in texts:
            generated = expression.replace("action", "%(a)s::text").replace(
                "observation", "%(o)s::text"
            )
            cursor.execute(
                f"SELECT studio_step_search_vector(%(a)s, %(o)s) = ({generated})",
                {"a": action, "o": observation},
            )
            assert cursor.fetchone()[0] is True


def _notes(client, project, monkeypatch, workers: list):
    monkeypatch.setattr("studio.services.workers.queue_consumers", lambda queue: workers)
    search = client.get(reverse("search", args=[project.pk]), {"q": "crates"})
    library = client.get(reverse("library", args=[project.pk]), {"q": "crates"})
    return search.content.decode(), library.content.decode()


@indexed_db
def test_the_search_pages_say_what_is_not_searchable_yet(
    client, project, tmp_path, no_messages, monkeypatch
):
    client.force_login(project.users["annotator"])
    import_file(project, tmp_path)
    search, library = _notes(client, project, monkeypatch, ["a worker"])
    for body in (search, library):
        assert 'id="search-unindexed"' in body
        assert (
            "6 steps of this project imported moments ago are not searchable yet; they are "
            "being indexed." in " ".join(body.split())
        )
    assert "No step matches" in search
    search, library = _notes(client, project, monkeypatch, [])
    for body in (search, library):
        text = " ".join(body.split())
        assert "6 imported steps of this project are not searchable yet: a worker indexes" in text
        assert "none runs on the queue" in text and "celery" in text
    # another project's waiting steps are not this one's
    other = client.get(reverse("search", args=[project.other.pk]), {"q": "crates"})
    assert other.status_code == 404
    index_pending()
    search, library = _notes(client, project, monkeypatch, [])
    for body in (search, library):
        assert 'id="search-unindexed"' not in body
    assert "Hits 1–6 of 6" in search
    # no search made: nothing said
    assert (
        'id="search-unindexed"'
        not in client.get(reverse("search", args=[project.pk])).content.decode()
    )


COLOURED = "\x1b[34mdpkg\x1b[0m: \x1b[1;31mfailed\x1b[0m result\x1b]0;term title\x07 done"


@indexed_db
def test_coloured_terminal_text_is_found_as_it_reads(project, tmp_path, no_messages):
    """Terminal escapes glued to words ("\\x1b[34mdpkg") are out of the index (migration
    0027): written at once or by the indexer, found by the words a person reads, with the
    word marked in a snippet free of the escapes."""
    trajectory = make_trajectory(project, steps=[("apt-get install", COLOURED)])
    step = Step.objects.get(branch__trajectory=trajectory)
    with deferred_indexing():
        later = make_trajectory(project, steps=[("\x1b[32mcargo\x1b[0m build", "ok")])
    assert found(project, "cargo") == set()
    index_pending()
    assert found(project, "cargo") == {Step.objects.get(branch__trajectory=later).pk}
    assert found(project, "dpkg") == {step.pk}
    assert found(project, '"failed result"') == {step.pk}
    assert found(project, "34mdpkg") == set() and found(project, "title") == set()
    hit = search_steps([project.pk], "dpkg").hits[0]
    assert hit.snippet is not None
    assert [text for text, marked in hit.snippet.pieces if marked] == ["dpkg"]
    assert "\x1b" not in "".join(text for text, _ in hit.snippet.pieces)
    Step.objects.filter(pk=step.pk).delete()
    assert found(project, "dpkg") == set()


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_0027_indexes_again_the_coloured_steps_indexed_before_it(project):
    m27 = importlib.import_module("studio.migrations.0027_search_without_ansi")
    with connection.cursor() as cursor:
        for sql in m27.PG_BACKWARD:  # as a database was before 0027 (in this test's transaction)
            cursor.execute(sql)
    trajectory = make_trajectory(project, steps=[("apt-get install", COLOURED)])
    step = Step.objects.get(branch__trajectory=trajectory)
    assert found(project, "dpkg") == set() and found(project, "34mdpkg") == {step.pk}
    with connection.cursor() as cursor:
        for sql in m27.PG_FORWARD:
            cursor.execute(sql)
    assert found(project, "dpkg") == {step.pk} and found(project, "34mdpkg") == set()


ESCAPED = [
    COLOURED,
    "a\x1b[38;2;255:0:0mred\x1b[0m b",  # a 24-bit colour (colons)
    "\x1b]8;;https://e.org\x1b\\link\x1b]8;;\x1b\\ text",  # a hyperlink, ended by ESC \
    "keypad\x1b=mode\x1b>off \x1b(B lone\x1b",  # two-byte escapes, a lone ESC
    "\x1b[?25lhidden cursor\x1b[?25h \x1b[2K\x1b[1Gline",
]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_takes_out_the_escapes_python_does(db):
    """The index's PostgreSQL pattern (migration 0027) and the one definition the page's
    renderer and SQLite's function use (`studio.search.text.ANSI`) take out the same."""
    from studio.search.text import ANSI, PG_ANSI

    m27 = importlib.import_module("studio.migrations.0027_search_without_ansi")
    assert m27.PG_ANSI == PG_ANSI
    with connection.cursor() as cursor:
        for text in ESCAPED:
            cursor.execute("SELECT regexp_replace(%s, %s, '', 'g')", [text, PG_ANSI])
            assert cursor.fetchone()[0] == ANSI.sub("", text), repr(text)
