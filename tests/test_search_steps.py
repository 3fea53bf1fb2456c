"""`search_steps` on the database the suite runs on (PostgreSQL in CI; the same tests pass on
SQLite's FTS5 path with DATABASE_URL=sqlite:///...): ranking, phrases, prefixes, exclusion,
field filters, regular expressions, the index kept current, project isolation, snippets."""

from __future__ import annotations

import pytest

from studio.models import Branch, BranchOrigin, SimulationJob, Step, StepAnnotation
from studio.search.service import search_steps
from tests.support.ui import make_trajectory


def found(project, query, **kw) -> list[tuple[str, int]]:
    results = search_steps([project.pk], query, **kw)
    return [(h.trajectory_title, h.index) for h in results.hits]


@pytest.fixture
def library(project):
    make_trajectory(
        project,
        title="Shell",
        steps=[
            ("grep -r needle .", "no match"),
            ("ls", "needle.txt haystack"),
            ("cat config.json", '{"error": "file not found"}'),
        ],
    )
    make_trajectory(
        project,
        title="Web",
        domain="web",
        steps=[("click #login", "file was not found here"), ("type needles", "ok")],
    )
    return project


def test_words_are_anded_and_case_insensitive(library):
    assert sorted(found(library, "NEEDLE")) == [("Shell", 0), ("Shell", 1)]
    assert found(library, "needle haystack") == [("Shell", 1)]
    assert found(library, "needle nowhere") == []


def test_phrase_prefix_and_exclusion(library):
    assert found(library, '"file not found"') == [("Shell", 2)]
    assert sorted(found(library, "file found")) == [("Shell", 2), ("Web", 0)]
    assert sorted(found(library, "needle*")) == [("Shell", 0), ("Shell", 1), ("Web", 1)]
    assert found(library, "needle* -haystack -grep") == [("Web", 1)]
    # punctuated words are phrases of their parts
    assert found(library, "needle.txt") == [("Shell", 1)]


def test_field_filters(library):
    assert found(library, "action:needle") == [("Shell", 0)]
    assert found(library, "observation:needle") == [("Shell", 1)]
    assert found(library, "domain:web found") == [("Web", 0)]
    assert found(library, "-domain:web found") == [("Shell", 2)]


def test_ranking_puts_the_closer_match_first(project):
    make_trajectory(
        project,
        title="Rank",
        steps=[
            ("alpha", "beta " + "filler " * 200),
            ("alpha alpha alpha", "beta beta"),
        ],
    )
    assert found(project, "alpha beta") == [("Rank", 1), ("Rank", 0)]
    assert found(project, "alpha beta", sort="oldest") == [("Rank", 0), ("Rank", 1)]


def test_index_follows_insert_update_and_delete(library):
    traj = library.trajectories.get(title="Web")
    branch = traj.branches.get()
    step = Step.objects.create(branch=branch, index=2, action="open zebra", observation="")
    assert found(library, "zebra") == [("Web", 2)]
    Step.objects.filter(pk=step.pk).update(action="open giraffe")
    assert found(library, "zebra") == []
    assert found(library, "giraffe") == [("Web", 2)]
    step.refresh_from_db()
    step.observation = "a zebra appears"
    step.save()
    assert found(library, "observation:zebra") == [("Web", 2)]
    step.delete()
    assert found(library, "giraffe") == [] and found(library, "zebra") == []
    Step.objects.bulk_create(
        [Step(branch=branch, index=5 + i, action=f"bulk okapi {i}") for i in range(3)]
    )
    assert len(found(library, "okapi")) == 3


def test_other_projects_are_never_searched(library):
    make_trajectory(library.other, title="Secret", steps=[("needle in other", "needle")])
    assert all(t != "Secret" for t, _ in found(library, "needle"))
    assert found(library.other, "needle") == [("Secret", 0)]
    assert search_steps([], "needle").hits == []


def test_sources_models_perturbations_and_verdicts(library):
    traj = library.trajectories.get(title="Shell")
    root = traj.branches.get()
    job = SimulationJob.objects.create(
        trajectory=traj, branch=root, fork_index=1, backend="openai", model="Qwen3-8B"
    )
    future = Branch.objects.create(
        trajectory=traj,
        parent=root,
        fork_index=1,
        name="future 1",
        origin=BranchOrigin.SIMULATED,
        job=job,
    )
    Step.objects.create(
        branch=future,
        index=1,
        action="ls",
        observation="needle simulated",
        provenance="replayed",
        observation_source="simulated",
    )
    Step.objects.create(
        branch=future,
        index=2,
        action="ls",
        observation="needle perturbed",
        provenance="replayed",
        observation_source="perturbed",
        meta={"perturbation": {"label": "drop-line"}},
    )
    assert found(library, "needle source:simulated") == [("Shell", 1)]
    assert found(library, "needle source:perturbed perturbation:drop-line") == [("Shell", 2)]
    assert found(library, "needle perturbation:other") == []
    assert sorted(found(library, "needle source:recorded")) == [("Shell", 0), ("Shell", 1)]
    hits = search_steps([library.pk], "needle model:qwen3-8b").hits
    assert [(h.branch_name, h.index, h.source, h.model) for h in hits] == [
        ("future 1", 2, "perturbed", hits[0].model),
        ("future 1", 1, "simulated", hits[0].model),
    ]
    assert "Qwen3-8B" in hits[0].model
    step = Step.objects.get(branch=root, index=0)
    StepAnnotation.objects.create(step=step, author=library.users["annotator"], verdict="reject")
    assert found(library, "verdict:reject") == [("Shell", 0)]
    assert found(library, "needle -verdict:reject", sort="oldest") == [
        ("Shell", 1),
        ("Shell", 1),
        ("Shell", 2),
    ]


def test_regex_over_bounded_candidates(library, settings):
    results = search_steps([library.pk], r"re:/not\s+found/")
    assert sorted((h.trajectory_title, h.index) for h in results.hits) == [("Shell", 2), ("Web", 0)]
    assert "all 5 steps in the project" in results.regex_scope
    results = search_steps([library.pk], r"file re:/was not/")
    assert [(h.trajectory_title, h.index) for h in results.hits] == [("Web", 0)]
    assert "all 2 steps matching the rest of the query" in results.regex_scope
    settings.STUDIO_SEARCH_REGEX_CANDIDATES = 2
    results = search_steps([library.pk], r"re:/needle/")
    assert "newest 2 steps in the project only" in results.regex_scope
    assert [(h.trajectory_title, h.index) for h in results.hits] == [("Web", 1)]


def test_snippet_marks_the_match_and_escapes_text(project):
    make_trajectory(project, title="X", steps=[("<b>run</b> the needle", "x" * 500 + " needle")])
    hit = search_steps([project.pk], "needle").hits[0]
    html = hit.snippet.html()
    assert hit.snippet.field == "action"
    assert "&lt;b&gt;run&lt;/b&gt; the <mark>needle</mark>" in html
    hit = search_steps([project.pk], "observation:needle").hits[0]
    assert hit.snippet.field == "observation" and hit.snippet.cut_before
    assert hit.snippet.html().endswith("<mark>needle</mark>")


def test_paging_counting_and_groups(project, monkeypatch):
    make_trajectory(project, title="A", steps=[(f"common {i}", "") for i in range(7)])
    make_trajectory(project, title="B", steps=[(f"common {i}", "") for i in range(3)])
    first = search_steps([project.pk], "common", per_page=4, sort="newest")
    assert first.total == 10 and first.total_label == "10" and first.has_next
    assert [g.title for g in first.groups] == ["B", "A"]
    assert [len(g.hits) for g in first.groups] == [3, 1]
    last = search_steps([project.pk], "common", per_page=4, page=3, sort="newest")
    assert len(last.hits) == 2 and not last.has_next
    monkeypatch.setattr("studio.search.service.COUNT_LIMIT", 5)
    capped = search_steps([project.pk], "common")
    assert capped.total_label == "more than 5"


def test_titles_and_tasks_are_scanned(project):
    traj = make_trajectory(project, title="Booking flights", task_instruction="Find a seat")
    results = search_steps([project.pk], "flights")
    assert results.hits == [] and results.trajectory_matches == [traj.pk]
