"""`search_steps` on the database the suite runs on (PostgreSQL in CI; the same tests pass on
SQLite's FTS5 path with DATABASE_URL=sqlite:///...): ranking, phrases, prefixes, exclusion,
field filters, regular expressions, the index kept current, project isolation, snippets."""

from __future__ import annotations

import re

import pytest

from studio.models import Branch, BranchOrigin, SimulationJob, Step, StepAnnotation
from studio.search.query import RegexTimeout, parse
from studio.search.service import matching_step_ids, search_steps, trajectory_ids_by_regex
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


# backtracks for ever on a long run of "a" (not on a short one)
SLOW = "re:/((a|aa)+)+c/"


def test_a_regex_that_backtracks_for_ever_is_stopped_and_says_so(project, settings):
    settings.STUDIO_SEARCH_REGEX_MS = 300
    make_trajectory(project, title="Short", steps=[("echo aaab", "aac")])
    make_trajectory(project, title="Long", steps=[("cat a.txt", "a" * 3000)])
    with pytest.raises(RegexTimeout) as stopped:
        search_steps([project.pk], SLOW, sort="oldest")
    message = str(stopped.value)
    # the short one, tested first; how long it ran is the process's time (`RegexTimeout`)
    assert re.search(
        r"/\(\(a\|aa\)\+\)\+c/ was stopped after \d+\.\d s, having been tried on 1 of 2 steps",
        message,
    ), message
    for ask in (matching_step_ids, trajectory_ids_by_regex):
        with pytest.raises(RegexTimeout):
            ask([project.pk], parse(SLOW), *((10,) if ask is matching_step_ids else ()))
    # the rest of the query narrows the candidates to those it can test in time
    hits = search_steps([project.pk], f"echo {SLOW}").hits
    assert [(h.trajectory_title, h.index) for h in hits] == [("Short", 0)]


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


def test_titles_and_tasks_match_trajectories(project):
    traj = make_trajectory(project, title="Booking flights", task_instruction="Find a seat")
    results = search_steps([project.pk], "flights")
    assert results.hits == [] and results.trajectory_matches == [traj.pk]


# ---- annotations, trajectories, viewers (migration 0023) --------------------------------


def test_words_in_an_annotation_find_its_step(library):
    step = Step.objects.get(branch__trajectory__title="Shell", index=2)
    StepAnnotation.objects.create(
        step=step,
        author=library.users["annotator"],
        comment="The JSON error is invented",
        tags=["hallucination", "needs-source"],
        corrected_observation='{"error": "permission denied"}',
    )
    # the step's own text holds "file", its annotation "invented": each way alone, not mixed
    assert found(library, "invented") == [("Shell", 2)]
    assert found(library, "file invented") == []
    assert found(library, "comment:invented") == [("Shell", 2)]
    assert found(library, "tag:hallucination") == [("Shell", 2)]
    assert found(library, "tag:needs*") == [("Shell", 2)]
    assert found(library, '"permission denied"') == [("Shell", 2)]
    assert found(library, 'correction:"permission denied"') == [("Shell", 2)]
    assert found(library, "comment:permission") == []
    # several annotation fields hold in one annotation; a step field holds in the step
    assert found(library, "comment:json tag:hallucination action:cat") == [("Shell", 2)]
    assert found(library, "comment:json action:grep") == []
    # an exclusion leaves out a step whose annotation holds it
    assert sorted(found(library, "file")) == [("Shell", 2), ("Web", 0)]
    assert found(library, "file -invented") == [("Web", 0)]
    assert found(library, "file -tag:hallucination") == [("Web", 0)]
    hit = search_steps([library.pk], "hallucination").hits[0]
    assert hit.snippet.field == "tag" and hit.snippet.heading == "tag by annotator"
    assert "<mark>hallucination</mark>" in hit.snippet.html()


def test_a_step_matched_twice_counts_once_at_its_better_rank(library):
    step = Step.objects.get(branch__trajectory__title="Shell", index=1)
    StepAnnotation.objects.create(step=step, author=library.users["admin"], comment="needle")
    results = search_steps([library.pk], "needle", sort="newest")
    assert [(h.trajectory_title, h.index) for h in results.hits] == [("Shell", 1), ("Shell", 0)]
    assert results.total == 2 and not results.has_next
    page2 = search_steps([library.pk], "needle", per_page=1, page=2, sort="oldest")
    assert [(h.trajectory_title, h.index) for h in page2.hits] == [("Shell", 1)]


def test_the_annotation_index_follows_edits_and_deletes(library):
    step = Step.objects.get(branch__trajectory__title="Web", index=1)
    note = StepAnnotation.objects.create(step=step, author=library.users["admin"], comment="walrus")
    assert found(library, "walrus") == [("Web", 1)]
    note.comment = "narwhal"
    note.save()
    assert found(library, "walrus") == [] and found(library, "narwhal") == [("Web", 1)]
    StepAnnotation.objects.filter(pk=note.pk).update(tags=["beluga"])
    assert found(library, "tag:beluga") == [("Web", 1)]
    note.delete()
    assert found(library, "narwhal") == [] and found(library, "beluga") == []


def test_titles_tasks_and_world_names_are_indexed(project):
    traj = make_trajectory(project, title="Booking flights", task_instruction="Find a window seat")
    played = make_trajectory(
        project,
        title="Episode 7",
        metadata={"world": {"name": "Northwind calendar", "version": 2}},
        steps=[("list_events", "three events")],
    )
    results = search_steps([project.pk], "flights")
    assert results.hits == [] and results.trajectory_matches == [traj.pk]
    assert search_steps([project.pk], "window seat").trajectory_matches == [traj.pk]
    assert search_steps([project.pk], "northwind").trajectory_matches == [played.pk]
    assert search_steps([project.pk], "flights -seat").trajectory_matches == []
    # as a field, the trajectory's text narrows the steps
    assert found(project, "world:northwind events") == [("Episode 7", 0)]
    assert found(project, "title:booking events") == []
    assert found(project, "task:window") == [("Booking flights", i) for i in (2, 1, 0)]
    # a query with a step's field finds steps, not trajectories by title
    assert search_steps([project.pk], "action:flights").trajectory_matches == []
    traj.title = "Booking trains"
    traj.save()
    assert search_steps([project.pk], "flights").trajectory_matches == []


def test_blind_review_hides_others_annotations_from_search(project):
    from studio.models import Membership
    from studio.search.service import viewer_for
    from tests.support.blind_review import OTHER_SECRET, build

    state = build(project)
    annotator = Membership.objects.get(project=project, user=project.users["annotator"])
    researcher = Membership.objects.get(project=project, user=project.users["researcher"])
    blind, sees_all = viewer_for(annotator), viewer_for(researcher)
    hidden = {s.pk for s in state.hidden}

    def ids(query, viewer):
        return {h.step_id for h in search_steps([project.pk], query, viewer=viewer).hits}

    for query in (
        OTHER_SECRET,
        "comment:wrong",
        "tag:other*",
        "OTHER-CORRECTION",
        "verdict:needs_fix",
    ):
        assert ids(query, sees_all) == hidden, query
        assert ids(query, blind) == set(), query
    # the step itself is no secret: its own text is found
    assert ids('"simulated A at 2"', blind) == {state.hidden[0].pk}
    # an exclusion by a hidden comment leaves nothing out for them either
    assert hidden <= ids(f"simulated -{OTHER_SECRET}", blind)
    assert not hidden & ids(f"simulated -{OTHER_SECRET}", sees_all)
    # annotations outside blind queues are seen by everyone
    assert ids('"open note"', blind) == {state.visible.pk}
    # their own annotation of a hidden step is theirs to find
    StepAnnotation.objects.create(
        step=state.hidden[0], author=project.users["annotator"], queue=state.queue, comment="mine"
    )
    assert ids("comment:mine", viewer_for(annotator)) == {state.hidden[0].pk}


def test_matching_step_ids_newest_first_with_regexes_and_limits(library):
    from studio.search.service import matching_step_ids

    newest = list(
        Step.objects.filter(branch__trajectory__project=library)
        .order_by("-id")
        .values_list("id", flat=True)
    )
    assert matching_step_ids([library.pk], "", 3) == newest[:3]
    needles = matching_step_ids([library.pk], "needle*", 10)
    assert needles == sorted(needles, reverse=True) and len(needles) == 3
    assert matching_step_ids([library.pk], "needle*", 2) == needles[:2]
    assert len(matching_step_ids([library.pk], r"re:/not\s+found/", 10)) == 2
    assert matching_step_ids([library.other.pk], "needle", 10) == []


def test_snippets_drop_terminal_escapes(project):
    make_trajectory(
        project, title="T", steps=[("ls", "\x1b[1;31mERROR\x1b[0m: disk \x1b]0;t\x07full\tnow")]
    )
    hit = search_steps([project.pk], "disk").hits[0]
    assert hit.snippet.text == "ERROR: disk full\tnow"
    assert "\x1b" not in hit.snippet.html()


def test_a_hit_by_an_annotation_field_shows_the_annotation(library):
    step = Step.objects.get(branch__trajectory__title="Web", index=0)
    StepAnnotation.objects.create(
        step=step, author=library.users["admin"], comment="the page <b>never</b> loads"
    )
    hit = search_steps([library.pk], "comment:loads").hits[0]
    assert hit.snippet.heading == "comment by admin"
    assert hit.snippet.html() == "the page &lt;b&gt;never&lt;/b&gt; <mark>loads</mark>"
    # a filter alone shows the start of the action
    hit = search_steps([library.pk], "domain:web", sort="oldest").hits[0]
    assert hit.snippet.field == "action" and hit.snippet.text == "click #login"
