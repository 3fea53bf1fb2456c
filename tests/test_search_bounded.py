"""PostgreSQL's bounded step search (scripts/bench_search.py measures why): one query reads the
newest `COUNT_LIMIT` + 1 hits, ranks only those by relevance and pages on past them in newest
order; a phrase or field term is tested on the newest `PHRASE_CANDIDATES` steps holding its
words only, and the total then says so. The bounds are made small here."""

from __future__ import annotations

import pytest
from django.db import connection

from studio.models import Step
from studio.search import service
from studio.search.service import search_steps
from tests.support.ui import make_trajectory

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the bounds are PostgreSQL's (SQLite ranks all)"
)


def step_ids(project, query, **kw) -> list[int]:
    return [h.step_id for h in search_steps([project.pk], query, **kw).hits]


def pages(project, query, sort, per_page=2) -> list[int]:
    out, page = [], 1
    while True:
        results = search_steps([project.pk], query, sort=sort, page=page, per_page=per_page)
        out += [h.step_id for h in results.hits]
        if not results.has_next:
            return out
        page += 1


@pytest.fixture
def library(project):
    # oldest first: "needle" once in steps 0-3, three times in step 4 (the best), twice in 6
    observations = [
        "needle hay",
        "needle hay hay",
        "needle",
        "needle hay",
        "needle needle needle",
        "hay only",
        "needle needle",
    ]
    make_trajectory(project, title="Bound", steps=[("look", o) for o in observations])
    return project


def ids_of(project) -> list[int]:
    return list(
        Step.objects.filter(branch__trajectory__project=project)
        .order_by("id")
        .values_list("id", flat=True)
    )


def test_relevance_ranks_the_newest_hits_and_says_so(library, monkeypatch):
    monkeypatch.setattr(service, "COUNT_LIMIT", 3)
    s = ids_of(library)
    results = search_steps([library.pk], "needle", per_page=10)
    # the newest three hits (steps 6, 4, 3) ranked best first, then the older ones (2, 1, 0)
    # newest first, whatever their rank
    assert [h.step_id for h in results.hits] == [s[4], s[6], s[3], s[2], s[1], s[0]]
    assert results.ranked_among == 3
    assert "newest 3 hits" in results.ranking_label
    assert results.total_label == "more than 3"


def test_every_hit_once_across_pages(library, monkeypatch):
    monkeypatch.setattr(service, "COUNT_LIMIT", 3)
    s = ids_of(library)
    hits = [s[i] for i in (0, 1, 2, 3, 4, 6)]
    for sort in ("relevance", "newest", "oldest"):
        found = pages(library, "needle", sort)
        assert sorted(found) == hits, sort
    assert pages(library, "needle", "newest") == hits[::-1]
    assert pages(library, "needle", "oldest") == hits


def test_all_ranked_when_few(library):
    s = ids_of(library)
    results = search_steps([library.pk], "needle", per_page=10)
    assert results.hits[0].step_id == s[4]
    assert results.ranked_among == 0 and results.ranking_label == ""
    assert results.total_label == "6"


def test_phrase_tested_on_the_newest_candidates_only(project, monkeypatch):
    make_trajectory(
        project,
        title="Phrase",
        steps=[
            ("a", "file error here"),  # the only match, the oldest
            ("b", "error in file"),
            ("c", "error then a file"),
        ],
    )
    assert step_ids(project, '"file error"') != []
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 2)
    results = search_steps([project.pk], '"file error"')
    assert results.hits == []
    assert results.total_is_partial
    assert (
        results.total_label
        == "0 in the newest 2 steps that hold every word (older ones not searched)"
    )
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 3)
    results = search_steps([project.pk], '"file error"')
    assert len(results.hits) == 1 and not results.total_is_partial
    assert results.total_label == "1"


def test_a_bounded_phrase_keeps_its_hits_and_says_which_end_was_tested(project, monkeypatch):
    make_trajectory(
        project,
        title="Ends",
        steps=[
            ("a", "file error one"),  # oldest
            ("b", "error before file"),
            ("c", "file error two"),
            ("d", "file error three"),  # newest
        ],
    )
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 2)
    newest = search_steps([project.pk], '"file error"', sort="newest")
    assert [h.index for h in newest.hits] == [3, 2]
    assert newest.total_is_partial and newest.total == 2
    assert newest.total_label == (
        "2 in the newest 2 steps that hold every word (older ones not searched)"
    )
    oldest = search_steps([project.pk], '"file error"', sort="oldest")
    assert [h.index for h in oldest.hits] == [0]
    assert oldest.total_is_partial and oldest.total == 1
    assert oldest.total_label == (
        "1 in the oldest 2 steps that hold every word (newer ones not searched)"
    )
    by_relevance = search_steps([project.pk], '"file error"')
    assert sorted(h.index for h in by_relevance.hits) == [2, 3]
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 4)
    every = search_steps([project.pk], '"file error"', sort="oldest")
    assert [h.index for h in every.hits] == [0, 2, 3] and not every.total_is_partial


def test_a_phrase_with_more_hits_than_counted_stops_at_the_newest(project, monkeypatch):
    make_trajectory(
        project,
        title="Many",
        steps=[("x", f"disk full at {i}") for i in range(6)] + [("y", "full disk")],
    )
    monkeypatch.setattr(service, "COUNT_LIMIT", 3)
    results = search_steps([project.pk], '"disk full"', sort="newest", per_page=2)
    assert results.total_is_lower_bound and not results.total_is_partial
    assert results.total_label == "more than 3"
    assert [h.index for h in results.hits] == [5, 4]
    # past the counted hits the pages go on in newest order, every hit once
    assert pages(project, '"disk full"', "newest") == [
        s.pk for s in Step.objects.filter(observation__startswith="disk full").order_by("-pk")
    ]


def test_field_terms_are_bounded_like_phrases(project, monkeypatch):
    make_trajectory(
        project,
        title="Fields",
        steps=[("grep x", "out"), ("ls", "grep in the output"), ("cat", "grep again")],
    )
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 1)
    results = search_steps([project.pk], "action:grep")
    assert results.hits == [] and results.total_is_partial
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 3)
    assert [h.index for h in search_steps([project.pk], "action:grep").hits] == [0]


def test_the_page_says_how_the_hits_were_ranked_and_counted(client, library, monkeypatch):
    from django.urls import reverse

    client.force_login(library.users["annotator"])
    url = reverse("search", args=[library.pk])
    monkeypatch.setattr(service, "COUNT_LIMIT", 3)
    body = client.get(url, {"q": "needle"}).content.decode()
    assert "Hits 1–25" not in body and "of more than 3" in body
    assert "Best first among the newest 3 hits, then the older ones newest first" in body
    monkeypatch.setattr(service, "PHRASE_CANDIDATES", 2)
    body = client.get(url, {"q": '"needle hay"'}).content.decode()
    assert "in the newest 2 steps that hold every word (older ones not searched)" in body
