"""The search page (`studio.views.search`): step hits grouped by trajectory with links that
open the step with its match marked, paging and sorting, query errors naming the column,
saved searches, a search's hits made into a tag, queue or dataset, and who may do what."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse

from studio.models import (
    AnnotationQueue,
    Dataset,
    SavedSearch,
    Step,
    StepAnnotation,
    Tag,
)
from tests.support.ui import make_trajectory


@pytest.fixture
def library(project):
    make_trajectory(
        project,
        title="Backups",
        steps=[
            ("df -h /var/backups", "Filesystem Size Used\n/dev/sdb1 50G 50G 100% /var/backups"),
            ("sudo rm -rf /var/backups/old", ""),
            ("restic backup /srv", "Fatal: no space left on device"),
        ],
    )
    make_trajectory(
        project,
        title="Web <b>shop</b>",
        domain="web",
        steps=[("click #buy", "Error: no space left in the basket"), ("submit", "ok")],
    )
    make_trajectory(project.other, title="Secret", steps=[("rm secret", "no space left")])
    return project


def page(client, project, **params):
    return client.get(reverse("search", args=[project.pk]), params)


def test_hits_are_grouped_by_trajectory_and_link_to_their_step(client, library):
    client.force_login(library.users["researcher"])
    response = page(client, library, q='"no space left"', sort="oldest")
    assert response.status_code == 200
    body = response.content.decode()
    results = response.context["results"]
    assert [g.group.title for g in results.groups] == ["Backups", "Web <b>shop</b>"]
    assert "Web &lt;b&gt;shop&lt;/b&gt;" in body and "Secret" not in body
    assert "Hits 1–2 of 2" in body and "Oldest first" in body
    hit = results.groups[0].hits[0]
    url = urlparse(hit.url)
    step = Step.objects.get(branch__trajectory__title="Backups", index=2)
    assert url.path == reverse("trajectory", args=[step.branch.trajectory_id])
    assert url.fragment == "step-2"
    assert parse_qs(url.query) == {
        "branch": [str(step.branch_id)],
        "step": ["2"],  # the page comes with the step's window
        "find": ["no space left"],
        "at": ["2"],
    }
    assert "<mark>no space left</mark>" in body


def test_relevance_without_words_says_it_is_newest_first(client, library):
    client.force_login(library.users["annotator"])
    body = page(client, library, q="domain:terminal").content.decode()
    assert "Newest first (the query has no words to rank by)" in body
    assert "Hits 1–3 of 3" in body


def test_a_bad_query_is_a_400_naming_the_column(client, library):
    client.force_login(library.users["researcher"])
    response = page(client, library, q='disk "unclosed')
    assert response.status_code == 400
    assert "unclosed quote (column 6)" in response.content.decode()
    response = page(client, library, q="colour:red")
    assert response.status_code == 400 and "unknown field" in response.content.decode()
    assert page(client, library, q="x", sort="loudest").status_code == 400
    assert page(client, library, q="x", page="0").status_code == 400


def test_a_regex_past_its_time_is_a_400_saying_why(client, library, settings):
    settings.STUDIO_SEARCH_REGEX_MS = 200
    make_trajectory(library, title="Long", steps=[("cat a.txt", "a" * 3000)])
    client.force_login(library.users["researcher"])
    slow = "re:/((a|aa)+)+c/"
    for response in (
        page(client, library, q=slow),
        client.get(reverse("library", args=[library.pk]), {"q": slow}),
    ):
        body = response.content.decode()
        assert response.status_code == 400
        assert "The regular expression /((a|aa)+)+c/ was stopped after " in body
    response = client.post(
        reverse("search_hits_tag", args=[library.pk]), {"q": slow, "tag": "t"}, follow=True
    )
    assert "Nothing made: the regular expression" in response.content.decode()
    assert not Tag.objects.filter(name="t").exists()


def test_paging(client, library, monkeypatch):
    monkeypatch.setattr("studio.views.search.PER_PAGE", 2)
    client.force_login(library.users["researcher"])
    first = page(client, library, q="domain:terminal")
    assert [h.hit.index for g in first.context["results"].groups for h in g.hits] == [2, 1]
    assert "page=2" in first.content.decode()
    second = page(client, library, q="domain:terminal", page=2)
    assert [h.hit.index for g in second.context["results"].groups for h in g.hits] == [0]
    assert 'id="page-next"' not in second.content.decode()


def test_htmx_asks_for_the_results_alone(client, library):
    client.force_login(library.users["researcher"])
    response = client.get(
        reverse("search", args=[library.pk]), {"q": "restic"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="results"') and "Saved searches" not in body


def test_other_projects_are_a_404(client, library):
    client.force_login(library.outsider)
    assert page(client, library, q="space").status_code == 404
    url = reverse("search_hits_tag", args=[library.pk])
    assert client.post(url, {"q": "space", "tag": "t"}).status_code == 404


def test_saved_searches_mine_shared_and_replaced(client, library):
    researcher, annotator = library.users["researcher"], library.users["annotator"]
    client.force_login(researcher)
    save = reverse("saved_search_create", args=[library.pk])
    response = client.post(save, {"name": "Full disks", "q": '"no space"', "sort": "newest"})
    assert response.status_code == 302
    assert parse_qs(urlparse(response["Location"]).query)["q"] == ['"no space"']
    client.post(save, {"name": "Private", "q": "rm"})
    client.post(save, {"name": "Full disks", "q": '"space left"', "shared": "on"})
    saved = SavedSearch.objects.get(name="Full disks")
    assert saved.query == '"space left"' and saved.shared and saved.sort == "relevance"
    assert SavedSearch.objects.count() == 2
    # a bad query or name is refused, naming it
    response = client.post(save, {"name": "<b>x</b>", "q": "ok"}, follow=True)
    assert "Not saved: Name:" in response.content.decode()
    response = client.post(save, {"name": "Bad", "q": "re:/(/"}, follow=True)
    assert "bad regular expression" in response.content.decode()
    assert SavedSearch.objects.count() == 2
    # the annotator sees the shared one only, and may not delete it
    client.force_login(annotator)
    body = page(client, library).content.decode()
    assert "Full disks" in body and "Private" not in body
    delete = reverse("saved_search_delete", args=[saved.pk])
    client.post(delete, follow=True)
    assert SavedSearch.objects.filter(pk=saved.pk).exists()
    private = SavedSearch.objects.get(name="Private")
    assert client.post(reverse("saved_search_delete", args=[private.pk])).status_code == 404
    # its owner deletes it; an admin may too
    client.force_login(library.users["admin"])
    client.post(delete)
    assert not SavedSearch.objects.filter(pk=saved.pk).exists()


def test_every_hit_becomes_a_tag_a_queue_or_a_dataset(client, library):
    client.force_login(library.users["researcher"])
    q = '"no space left"'
    response = client.post(
        reverse("search_hits_tag", args=[library.pk]), {"q": q, "tag": "full-disk"}, follow=True
    )
    assert "Tagged 2 trajectories holding the 2 hits" in response.content.decode()
    tag = Tag.objects.get(project=library, name="full-disk")
    assert sorted(tag.trajectories.values_list("title", flat=True)) == [
        "Backups",
        "Web <b>shop</b>",
    ]
    response = client.post(
        reverse("search_hits_queue", args=[library.pk]), {"q": "rm OR space", "name": "Q"}
    )
    assert not AnnotationQueue.objects.exists()  # "OR" is a word: no hit, nothing made
    response = client.post(
        reverse("search_hits_queue", args=[library.pk]),
        {"q": "domain:terminal", "name": "Terminal steps", "blind": "on"},
        follow=True,
    )
    queue = AnnotationQueue.objects.get(name="Terminal steps")
    assert queue.blind
    # the rm step has no observation: nothing to annotate, left out and said so
    assert list(queue.items.values_list("step__index", flat=True)) == [0, 2]
    assert "1 step without an observation left out" in queue.description
    assert response.redirect_chain[-1][0] == reverse("queue_detail", args=[queue.pk])
    response = client.post(
        reverse("search_hits_dataset", args=[library.pk]),
        {"q": q, "name": "Full disks"},
        follow=True,
    )
    version = Dataset.objects.get(name="Full disks").versions.get()
    assert version.item_count == 2
    assert version.source.startswith('the 2 hits of the search “"no space left"”')


def test_hit_actions_refuse_rejected_steps_unless_confirmed(client, library):
    step = Step.objects.get(branch__trajectory__title="Backups", index=2)
    StepAnnotation.objects.create(step=step, author=library.users["admin"], verdict="reject")
    client.force_login(library.users["researcher"])
    url = reverse("search_hits_dataset", args=[library.pk])
    response = client.post(url, {"q": "restic", "name": "D"}, follow=True)
    assert "confirm to add them anyway" in response.content.decode()
    assert not Dataset.objects.exists()
    client.post(url, {"q": "restic", "name": "D", "confirm_rejected": "on"})
    assert Dataset.objects.get(name="D").versions.get().item_count == 1


def test_too_many_hits_are_refused_not_cut(client, library, monkeypatch):
    monkeypatch.setattr("studio.services.step_selection.MAX_STEPS", 2)
    client.force_login(library.users["researcher"])
    response = client.post(
        reverse("search_hits_queue", args=[library.pk]),
        {"q": "domain:terminal", "name": "Too many"},
        follow=True,
    )
    assert "more than 2 hits: narrow it" in response.content.decode()
    assert not AnnotationQueue.objects.exists()


def test_annotators_search_but_make_nothing(client, library):
    client.force_login(library.users["annotator"])
    body = page(client, library, q="space").content.decode()
    assert "Hits 1–2 of 2" in body and 'id="hit-actions"' not in body
    for name, data in (
        ("search_hits_tag", {"q": "space", "tag": "t"}),
        ("search_hits_queue", {"q": "space", "name": "n"}),
        ("search_hits_dataset", {"q": "space", "name": "n"}),
    ):
        assert client.post(reverse(name, args=[library.pk]), data).status_code == 403
    assert not Tag.objects.filter(name="t").exists()
    # they save searches of their own
    client.post(reverse("saved_search_create", args=[library.pk]), {"name": "Mine", "q": "x"})
    assert SavedSearch.objects.get(name="Mine").owner == library.users["annotator"]


def test_the_library_links_to_the_step_hits(client, library):
    client.force_login(library.users["annotator"])
    body = client.get(reverse("library", args=[library.pk]), {"q": "restic"}).content.decode()
    assert f'href="{reverse("search", args=[library.pk])}?q=restic"' in body


# ---- closest in meaning (an embedding model on 127.0.0.1) ----------------------------------


@pytest.fixture
def embeddings_server():
    from studio.demo_data import scripted_models

    with scripted_models.running() as url:
        yield url


def _add_embedding_model(project, url):
    from studio.demo_data.scripted_models import EMBEDDING_MODEL
    from studio.services.endpoints import EndpointData, save_endpoint

    return save_endpoint(
        project,
        EndpointData(
            name="Embeddings", role="embedding", kind="openai", base_url=url, model=EMBEDDING_MODEL
        ),
    ).endpoint


def test_closest_in_meaning_reorders_the_hits_by_their_embeddings(
    client, library, embeddings_server
):
    from inference.embeddings import cosine
    from studio.demo_data.scripted_models import embed_text

    make_trajectory(
        library,
        title="Cleanup",
        steps=[
            ("rm -rf /tmp/cache", "removed the cache files"),
            ("ls", "files: report.pdf notes.txt"),
            ("find / -delete", "deleted files outside the workspace"),
        ],
    )
    client.force_login(library.users["annotator"])
    body = page(client, library, q="files").content.decode()
    assert 'value="meaning"' not in body  # no embedding model: not offered
    _add_embedding_model(library, embeddings_server)
    body = page(client, library, q="files").content.decode()
    assert 'value="meaning"' in body
    response = page(client, library, q="files deleted", sort="meaning")
    assert response.status_code == 200
    # the index found them; the embeddings ordered them (here: one hit)
    results = response.context["results"]
    assert [h.hit.index for g in results.groups for h in g.hits] == [2]
    response = page(client, library, q="files", sort="meaning")
    results = response.context["results"]
    order = [(h.hit.index, h.similarity) for g in results.groups for h in g.hits]
    texts = {
        s.index: f"{s.action}\n{s.observation}"
        for s in Step.objects.filter(branch__trajectory__title="Cleanup")
    }
    expected = sorted(texts, key=lambda i: -cosine(embed_text("files"), embed_text(texts[i])))
    assert [i for i, _ in order] == expected
    assert all(
        abs(sim - cosine(embed_text("files"), embed_text(texts[i]))) < 1e-9 for i, sim in order
    )
    body = response.content.decode()
    assert "Ranked by meaning among the best 3 matches" in body
    assert "scripted-embedding" in body and "similarity" in body


def test_an_embedding_model_that_does_not_answer_falls_back_and_says_so(client, library):
    _add_embedding_model(library, "http://127.0.0.1:9/v1")
    client.force_login(library.users["researcher"])
    response = page(client, library, q="space", sort="meaning")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Not ranked by meaning: the embeddings model" in body
    assert "Best match first instead." in body
    assert "Hits 1–2 of 2" in body
    # no words to compare with: said, and the hits still shown
    response = page(client, library, q="domain:terminal", sort="meaning")
    assert "closest in meaning needs words" in response.content.decode()


def test_researchers_start_a_behaviour_search_from_the_hits(client, library):
    client.force_login(library.users["researcher"])
    body = page(client, library, q='"no space left"').content.decode()
    link = reverse("behaviour_new", args=[library.pk]) + "?query=%22no%20space%20left%22"
    assert f'href="{link}"' in body
    form = client.get(link).context["form"]
    assert form.initial["query"] == '"no space left"'
