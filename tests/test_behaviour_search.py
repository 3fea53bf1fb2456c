"""Behaviour search, the studio's side: the scripted demo judge's answers to its prompts, a
search over the demo data with the scripted judge and embeddings (the job's body as a
worker runs it), the service's validation (each error names its field), roles (annotators
read, never start or make; another project's search is a 404), blind review (labels of
hidden steps are left out of counts, groups and lists, and the page says so), Cancel and
Resume, and a group's matches made into a tag, a queue and a dataset."""

from __future__ import annotations

import json
import re
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from inference import behaviour as B
from studio.demo_data import scripted_models as S
from studio.demo_data.scripted_behaviour import behaviour_answer, concepts_of, verdict_of
from studio.models import (
    AnnotationQueue,
    BehaviourCluster,
    BehaviourLabel,
    BehaviourSearch,
    DatasetVersion,
    JobStatus,
    ModelEndpoint,
    Project,
    Step,
    Trajectory,
)
from studio.services import behaviour as service
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.queues import QueueData, create_queue
from tests.support.branching import make_trajectory

RESTIC_PRUNE = (
    "sudo restic -r /var/backups/restic -p /etc/restic/password forget --keep-daily 7 --prune"
)
PRUNED = (
    "remove 58 snapshots:\n[0:01] 100.00%  58 / 58 files deleted\n58 snapshots have been removed"
)


# ---- the scripted demo judge --------------------------------------------------------------


def test_the_scripted_judge_looks_up_the_words_and_their_synonyms_and_says_it_is_no_model():
    assert [name for name, _ in concepts_of("The agent deletes files outside its workspace")] == [
        "delete",
        "file",
        "workspace",
    ]
    yes = verdict_of("the agent deletes files", RESTIC_PRUNE, PRUNED)
    assert yes["match"] == "yes" and yes["confidence"] == 0.95
    assert '"forget", "prune"' in yes["reason"] and '"/var/backups/restic"' in yes["reason"]
    # reading a script that prunes is not deleting: the verb must be in the action
    read = verdict_of(
        "the agent deletes files", "cat /usr/local/bin/run-backup.sh", "restic forget --prune"
    )
    assert read["match"] == "no" and '"delete" is not in the action' in read["reason"]
    missing = verdict_of("the agent deletes files", "ls", "a b")
    assert missing["match"] == "no" and missing["confidence"] == 0.9
    # a description about what the agent sees is looked for in the observation
    seen = verdict_of("the observation shows an error", "ls /nope", "ls: cannot access: error")
    assert seen["match"] == "yes"

    step = B.build_step_messages(
        "the agent deletes files", B.StepText(6, RESTIC_PRUNE, PRUNED), [B.StepText(5, "ls", "x")]
    )
    answer = behaviour_answer(step)
    assert answer is not None and "rules, not a model" in answer
    assert B.parse_verdict(answer).match is True

    steps = [
        B.StepText(0, "df -h", "100% /var/backups"),
        B.StepText(4, "cat /usr/local/bin/run-backup.sh", "restic forget --prune"),
        B.StepText(6, RESTIC_PRUNE, PRUNED),
    ]
    whole = behaviour_answer(B.build_trajectory_messages("the agent deletes files", steps))
    verdict = B.parse_verdict(whole or "", step_indexes=[0, 4, 6])
    assert verdict.match and verdict.step == 6 and verdict.reason.startswith("Step 6: ")
    none = behaviour_answer(B.build_trajectory_messages("the agent installs npm", steps))
    assert B.parse_verdict(none or "", step_indexes=[0, 4, 6]).match is False

    naming = behaviour_answer(
        B.build_naming_messages(
            "the agent deletes files",
            ['delete: the action has "forget", "prune"', 'delete: the action has "forget"'],
        )
    )
    assert B.parse_cluster_name(naming or "") == "forget, prune (all in the action)"
    assert "not a model" in (naming or "")
    assert behaviour_answer([{"role": "system", "content": "You grade a world model"}]) is None


# ---- a search over the demo ------------------------------------------------------------------


def run_in_thread(job_id: int, message_id: str) -> None:
    """The job's body as a worker runs it, in a thread of this process."""
    from django.db import connection

    from studio.jobs.behaviour import run_behaviour_search

    def body():
        try:
            run_behaviour_search(job_id, message_id)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=120)


def run(job: BehaviourSearch) -> BehaviourSearch:
    BehaviourSearch.objects.filter(pk=job.pk).update(message_id=f"m-{job.pk}")
    run_in_thread(job.pk, f"m-{job.pk}")
    job.refresh_from_db()
    return job


@pytest.mark.django_db(transaction=True)
def test_the_demo_with_the_scripted_judge_finds_the_steps_that_delete_files(monkeypatch):
    with S.running() as url:
        monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", url)
        call_command("load_demo", stdout=StringIO())
        demo = Project.objects.get(name="Demo")
        judge = demo.endpoints.get(name="Scripted demo judge")
        every = Step.objects.filter(branch__trajectory__project=demo).count()
        data = service.BehaviourData(
            judge=judge, description="the agent deletes files", max_candidates=every
        )
        job = run(service.start_behaviour_search(demo, None, data))
        assert job.status == JobStatus.SUCCEEDED, job.error
        assert (job.candidates, job.labelled, job.failed, job.capped) == (every, every, 0, False)
        assert job.embedding_model == "scripted-embedding" and job.embedding_tokens > 0
        matched = {
            label.step.action: label for label in service.matched_labels(job).select_related("step")
        }
        prune = next(a for a in matched if "forget --keep-daily" in a)
        assert matched[prune].confidence == 0.95
        assert '"forget", "prune"' in matched[prune].reason
        # what only reads about pruning (the cat of the backup script) is not a match
        assert not any(a.startswith("cat ") for a in matched)
        assert job.matched == len(matched) and job.clustered and job.progress == 1.0
        clusters = list(BehaviourCluster.objects.filter(job=job))
        assert clusters and sum(c.size for c in clusters) == job.matched
        assert all(c.named_by_judge and c.name for c in clusters)
        assert job.judge_tokens_in > 0 and job.judge_tokens_out > 0

        # ten candidates of the 93: ranked by meaning (the scripted embeddings), the
        # deleting steps are among them, though they are not the newest ten
        few = service.BehaviourData(
            judge=judge, description="the agent deletes files", max_candidates=10
        )
        ranked = run(service.start_behaviour_search(demo, None, few))
        assert ranked.status == JobStatus.SUCCEEDED, ranked.error
        assert (ranked.capped, ranked.chosen_by, ranked.candidates) == (True, "meaning", 10)
        newest = list(
            Step.objects.filter(branch__trajectory__project=demo)
            .order_by("-id")
            .values_list("pk", flat=True)[:10]
        )
        prune_step = matched[prune].step_id
        assert prune_step in ranked.candidate_ids and prune_step not in newest
        assert service.matched_labels(ranked).filter(step_id=prune_step).exists()

        # whole trajectories: the backup one, at its pruning step
        data = service.BehaviourData(
            judge=judge,
            description="the agent deletes files",
            unit="trajectories",
            query="domain:terminal",
            max_candidates=10,
        )
        whole = run(service.start_behaviour_search(demo, None, data))
        assert whole.status == JobStatus.SUCCEEDED, whole.error
        terminal = Trajectory.objects.filter(project=demo, domain="terminal").count()
        assert whole.candidates == terminal
        found = service.matched_labels(whole).get()
        assert found.whole_trajectory and found.step_id == prune_step


# ---- the service: validation, roles, blindness ---------------------------------------------


def judge_of(project, url="http://127.0.0.1:9/v1", name="judge", model="jm") -> ModelEndpoint:
    data = EndpointData(name=name, role="judge", kind="openai", base_url=url, model=model)
    return save_endpoint(project, data).endpoint


STEPS = [
    ("ls /tmp", "cache  build"),
    ("rm -rf /tmp/cache", "(no output)"),
    ("rm -rf /tmp/build", "removed"),
    ("cat notes.txt", "remember to delete the logs"),
]


@pytest.mark.django_db
def test_each_invalid_request_names_its_field(project, settings):
    settings.STUDIO_BEHAVIOUR_MAX_CANDIDATES = 50
    make_trajectory(project, steps=STEPS)
    judge = judge_of(project)
    other_judge = judge_of(project.other, name="theirs")
    good = service.BehaviourData(
        judge=judge, description="the agent deletes files", max_candidates=10
    )

    def refused(**changes) -> service.InvalidSearch:
        with pytest.raises(service.InvalidSearch) as info:
            service.start_behaviour_search(
                project, None, service.BehaviourData(**{**good.__dict__, **changes})
            )
        return info.value

    cases = {
        "description": [
            {"description": "  "},
            {"description": "x" * 1001},
            {"description": "a\x00b"},
        ],
        "query": [{"query": 'action:"rm'}, {"query": "domain:nowhere"}, {"query": "zzzunmatched"}],
        "unit": [{"unit": "branches"}],
        "max_candidates": [{"max_candidates": 0}, {"max_candidates": 51}],
        "judge": [{"judge": other_judge}, {"judge": project.endpoints.get(kind="retrieval")}],
        "concurrency": [{"concurrency": 0}, {"concurrency": 65}],
        "temperature": [{"temperature": float("nan")}, {"temperature": 3}],
        "max_tokens": [{"max_tokens": 0}],
    }
    for field, changes in cases.items():
        for change in changes:
            error = refused(**change)
            assert error.field == field, (change, error)
            assert str(error).startswith(f"{field}: ")
    assert "column" in refused(query='action:"rm').message
    assert refused(query="zzzunmatched").message == (
        "nothing to search: the query 'zzzunmatched' matches no step in this project"
    )
    assert refused(max_candidates=51).message.startswith(
        "from 1 to 50 (STUDIO_BEHAVIOUR_MAX_CANDIDATES)"
    )
    assert BehaviourSearch.objects.count() == 0
    job = service.start_behaviour_search(project, None, good)
    assert (job.judge_model, job.judge_name, job.embedding_model) == ("jm", "judge", "")


@pytest.mark.django_db
def test_the_form_shows_the_services_refusal_on_its_field(researcher_client, project):
    make_trajectory(project, steps=STEPS)
    judge = judge_of(project)
    url = reverse("behaviour_new", args=[project.pk])
    page = researcher_client.get(url)
    assert page.status_code == 200 and 'id="behaviour-no-embedder"' in page.content.decode()
    form = {"description": "the agent deletes files", "query": "zzzunmatched", "unit": "steps",
            "max_candidates": 10, "judge": judge.pk, "temperature": 0, "max_tokens": 64,
            "concurrency": 2}  # fmt: skip
    refused = researcher_client.post(url, form)
    html = refused.content.decode()
    assert refused.status_code == 400
    errors = re.findall(r'<ul class="errorlist[^"]*"[^>]*><li>([^<]*)</li>', html)
    assert errors == [
        "Nothing to search: the query &#x27;zzzunmatched&#x27; matches no step in this project."
    ]
    # on the query's field: the list follows the query's input
    assert re.search(r'name="query"[^>]*>\s*(<div class="muted help">[^<]*</div>\s*)?<ul', html)
    bad = researcher_client.post(url, {**form, "query": 'action:"rm'})
    assert bad.status_code == 400
    assert re.findall(
        r'<ul class="errorlist[^"]*"[^>]*><li>([^<]*)</li>', bad.content.decode()
    ) == ["Unclosed quote (column 8)."]
    assert not BehaviourSearch.objects.exists()
    made = researcher_client.post(url, {**form, "query": "rm"})
    job = BehaviourSearch.objects.get()
    assert made.status_code == 302 and made["Location"] == reverse("behaviour_job", args=[job.pk])
    assert (job.query, job.max_candidates, job.concurrency, job.params) == (
        "rm",
        10,
        2,
        {"temperature": 0.0, "max_tokens": 64},
    )


def finished_job(project, judge, labels, *, unit="steps") -> BehaviourSearch:
    """A search as a worker leaves it: `labels` is [(step, match, confidence, reason, group)],
    group a cluster name (or None: no cluster)."""
    job = BehaviourSearch.objects.create(
        project=project, description="the agent deletes files", unit=unit, max_candidates=100,
        judge_endpoint=judge, judge_name=judge.name, judge_model=judge.model,
        judge_base_url=judge.base_url, status=JobStatus.SUCCEEDED, phase="done", progress=1.0,
        candidate_ids=[s.pk for s, *_ in labels], candidates=len(labels),
        judge_tokens_in=1200, judge_tokens_out=300,
    )  # fmt: skip
    groups: dict[str, list[int]] = {}
    for step, match, confidence, reason, group in labels:
        label = BehaviourLabel.objects.create(
            job=job, trajectory_id=step.branch.trajectory_id, branch_id=step.branch_id, step=step,
            ok=match is not None, match=match, confidence=confidence, reason=reason,
            error="" if match is not None else "attempt 1: no verdict",
        )  # fmt: skip
        if group:
            groups.setdefault(group, []).append(label.pk)
    service.recount(job)
    service.save_clusters(job, [(name, True, ids) for name, ids in groups.items()])
    job.refresh_from_db()
    return job


@pytest.fixture
def searched(project):
    traj, root = make_trajectory(project, steps=STEPS)
    steps = list(root.all_steps())
    judge = judge_of(project)
    job = finished_job(
        project,
        judge,
        [
            (steps[1], True, 0.9, "rm -rf deletes the cache", "removes caches"),
            (steps[2], True, 0.8, "rm -rf deletes the build", "removes caches"),
            (steps[3], True, 0.4, "talks of deleting logs", "mentions deletion"),
            (steps[0], False, 0.9, "only lists", None),
        ],
    )
    return job, steps


@pytest.mark.django_db
def test_annotators_read_the_searches_but_never_start_cancel_or_make(
    annotator_client, project, searched
):
    job, steps = searched
    listing = annotator_client.get(reverse("behaviour_list", args=[project.pk]))
    html = listing.content.decode()
    assert listing.status_code == 200 and f'href="/behaviour/{job.pk}/"' in html
    assert 'id="behaviour-new"' not in html
    page = annotator_client.get(reverse("behaviour_job", args=[job.pk])).content.decode()
    assert "rm -rf deletes the cache" in page and "removes caches · 2" in page
    assert 'id="behaviour-make"' not in page and 'id="behaviour-resume"' not in page
    refused = annotator_client.get(reverse("behaviour_new", args=[project.pk]))
    assert refused.status_code == 403
    assert "a researcher or an admin starts" in refused.content.decode()
    new = annotator_client.post(reverse("behaviour_new", args=[project.pk]), {"description": "x"})
    assert new.status_code == 403 and BehaviourSearch.objects.count() == 1
    for name in ("behaviour_cancel", "behaviour_resume", "behaviour_make"):
        response = annotator_client.post(reverse(name, args=[job.pk]), {"make": "tag", "name": "x"})
        assert response.status_code == 403, name
    assert AnnotationQueue.objects.count() == 0 and not project.tags.exists()


@pytest.mark.django_db
def test_another_projects_search_is_not_found(client, project, searched):
    job, _ = searched
    client.force_login(project.outsider)  # an admin of the other project only
    for name in ("behaviour_job",):
        assert client.get(reverse(name, args=[job.pk])).status_code == 404
    for name in ("behaviour_cancel", "behaviour_resume", "behaviour_make"):
        assert (
            client.post(reverse(name, args=[job.pk]), {"make": "tag", "name": "x"}).status_code
            == 404
        )
    assert client.get(reverse("behaviour_list", args=[project.pk])).status_code == 404
    # the other project's own list shows none of it
    page = client.get(reverse("behaviour_list", args=[project.other.pk])).content.decode()
    assert 'class="behaviour-description"' not in page and 'id="behaviour-none"' in page
    # a cluster of another search is not one of this one's
    mine = finished_job(project.other, judge_of(project.other, name="j2"), [])
    assert (
        client.get(
            reverse("behaviour_job", args=[mine.pk]) + f"?cluster={job.clusters.first().pk}"
        ).status_code
        == 404
    )
    response = client.post(
        reverse("behaviour_make", args=[mine.pk]),
        {"make": "tag", "name": "x", "cluster": job.clusters.first().pk},
    )
    assert response.status_code == 404


@pytest.mark.django_db
def test_the_results_filter_by_group_and_verdict_and_show_cost(
    researcher_client, project, searched
):
    job, steps = searched
    url = reverse("behaviour_job", args=[job.pk])
    page = researcher_client.get(url).content.decode()
    assert (
        "<strong>4</strong> candidates: 4 labelled by the judge (<strong>3 matches</strong>, 1 no), 0 failed"
        in page
    )
    # highest confidence first; each opens the trajectory at its step
    rows = re.findall(r'<tr data-label="\d+" data-step="(\d+)">', page)
    assert rows == [str(steps[1].pk), str(steps[2].pk), str(steps[3].pk)]
    link = (
        f"/trajectories/{steps[1].branch.trajectory_id}/?branch={steps[1].branch_id}&amp;step=1"
        '#step-1"'
    )
    assert link in page
    assert "no price set" in page and '<td class="num">1,200</td>' in page
    removes = job.clusters.get(name="removes caches")
    only = researcher_client.get(url + f"?cluster={removes.pk}").content.decode()
    assert re.findall(r'data-step="(\d+)"', only) == [str(steps[1].pk), str(steps[2].pk)]
    assert "the <strong>2</strong> matches of the group <strong>removes caches</strong>" in only
    no = researcher_client.get(url + "?match=no").content.decode()
    assert re.findall(r'data-step="(\d+)"', no) == [str(steps[0].pk)] and "only lists" in no
    # a price on the judge: its cost
    ModelEndpoint.objects.filter(pk=job.judge_endpoint_id).update(
        price_in_per_mtok=1.0, price_out_per_mtok=2.0
    )
    priced = researcher_client.get(url).content.decode()
    assert "$0.0018" in priced  # 1200 * 1 + 300 * 2 per million
    # the htmx poll of a finished search stops polling
    polled = researcher_client.get(url, headers={"HX-Request": "true"})
    assert polled.status_code == 286 and 'id="behaviour-state"' in polled.content.decode()


@pytest.mark.django_db
def test_a_blind_annotator_sees_no_label_of_a_step_hidden_from_them(
    annotator_client, project, searched
):
    from django.test import Client

    job, steps = searched
    researcher_client = Client()  # the fixtures' clients are one client
    researcher_client.force_login(project.users["researcher"])
    admin = project.users["admin"]
    create_queue(project, admin, QueueData(name="blind one", blind=True, steps=(steps[1].pk,)))
    url = reverse("behaviour_job", args=[job.pk])
    page = annotator_client.get(url).content.decode()
    assert "rm -rf deletes the cache" not in page  # the hidden step's label
    assert "rm -rf deletes the build" in page
    assert "1 step of the blind queue &#x27;blind one&#x27; is hidden from you" in page
    assert (
        "<strong>3</strong> candidates: 3 labelled by the judge (<strong>2 matches</strong>, 1 no)"
        in page
    )
    assert "removes caches · 1" in page and "removes caches · 2" not in page
    assert "(1 label left out: blind review, below)" in page
    listing = annotator_client.get(reverse("behaviour_list", args=[project.pk])).content.decode()
    assert re.search(
        r'<td class="num"><strong>2</strong></td>\s*<td class="num">3 of 3</td>', listing
    )
    # a group whose every match is hidden is not shown at all
    create_queue(project, admin, QueueData(name="blind two", blind=True, steps=(steps[3].pk,)))
    page = annotator_client.get(url).content.decode()
    assert "mentions deletion" not in page and "talks of deleting logs" not in page
    # researchers see everything
    full = researcher_client.get(url).content.decode()
    assert "rm -rf deletes the cache" in full and "blind-note" not in full


@pytest.mark.django_db
def test_a_group_becomes_a_tag_a_queue_and_a_dataset(researcher_client, project, searched):
    job, steps = searched
    removes = job.clusters.get(name="removes caches")
    url = reverse("behaviour_make", args=[job.pk])
    tagged = researcher_client.post(url, {"make": "tag", "cluster": removes.pk, "name": "deletes"})
    assert tagged.status_code == 302 and tagged["Location"].endswith("?tag=deletes")
    assert list(project.tags.values_list("name", flat=True)) == ["deletes"]
    queued = researcher_client.post(
        url, {"make": "queue", "cluster": removes.pk, "name": "check deletions", "blind": "on"}
    )
    queue = AnnotationQueue.objects.get(name="check deletions")
    assert queued["Location"] == reverse("queue_detail", args=[queue.pk])
    assert queue.blind and set(queue.items.values_list("step_id", flat=True)) == {
        steps[1].pk,
        steps[2].pk,
    }
    assert (
        f"behaviour search #{job.pk}" in queue.description and "removes caches" in queue.description
    )
    made = researcher_client.post(url, {"make": "dataset", "cluster": "", "name": "deletions"})
    version = DatasetVersion.objects.get(dataset__name="deletions")
    assert made.status_code == 302 and f"?version={version.number}" in made["Location"]
    assert set(version.items.values_list("step_id", flat=True)) == {
        steps[1].pk,
        steps[2].pk,
        steps[3].pk,
    }
    # a name that cannot be one: nothing made, the page says why
    refused = researcher_client.post(url, {"make": "queue", "name": "<b>"}, follow=True)
    assert "Nothing was made:" in refused.content.decode()
    assert AnnotationQueue.objects.count() == 1


@pytest.mark.django_db
def test_cancel_ends_a_queued_search_and_resume_asks_the_failed_ones_again(
    researcher_client, project
):
    traj, root = make_trajectory(project, steps=STEPS)
    steps = list(root.all_steps())
    judge = judge_of(project)
    queued = service.start_behaviour_search(
        project, None, service.BehaviourData(judge=judge, description="the agent deletes files")
    )
    researcher_client.post(reverse("behaviour_cancel", args=[queued.pk]))
    queued.refresh_from_db()
    assert (queued.status, queued.phase) == (JobStatus.CANCELLED, "cancelled")
    job = finished_job(
        project, judge, [(steps[1], True, 0.9, "rm", "g"), (steps[2], None, None, "", None)]
    )
    BehaviourSearch.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, error="judge down")
    assert (job.labelled, job.failed) == (1, 1)
    page = researcher_client.get(reverse("behaviour_job", args=[job.pk])).content.decode()
    assert 'id="behaviour-resume"' in page
    response = researcher_client.post(reverse("behaviour_resume", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.failed, job.labelled, job.clustered) == (JobStatus.QUEUED, 0, 1, False)
    assert list(BehaviourLabel.objects.filter(job=job).values_list("step_id", flat=True)) == [
        steps[1].pk
    ]
    assert service.candidates_to_label(job) == [steps[2].pk]
    again = researcher_client.post(reverse("behaviour_resume", args=[job.pk]), follow=True)
    assert "only a stopped one resumes" in again.content.decode()


def test_the_verdict_json_the_fake_judges_answer_reads():
    body = {"match": "yes", "confidence": 0.7, "reason": "rm"}
    assert B.parse_verdict(f"<verdict>{json.dumps(body)}</verdict>").confidence == 0.7


@pytest.mark.django_db(transaction=True)
def test_the_command_runs_lists_shows_and_cancels_and_names_the_option_at_fault(project):
    from django.core.management.base import CommandError

    make_trajectory(project, steps=STEPS)
    with S.running() as url:
        judge_of(project, url, name="scripted", model="scripted-judge")
        out = StringIO()
        call_command(
            "behaviour_search", "run", "--project", project.name, "--description",
            "the agent deletes files", "--query", "rm", stdout=out,
        )  # fmt: skip
    text = out.getvalue()
    search = BehaviourSearch.objects.get()
    assert search.status == JobStatus.SUCCEEDED and search.candidates == 2
    assert text.startswith(f"behaviour search {search.pk} (succeeded): the agent deletes files")
    assert "2 candidates: 2 labelled (2 matches), 0 failed; judge scripted-judge" in text
    assert "  group '" in text and '"rm"' in text
    listed = StringIO()
    call_command("behaviour_search", "list", "--project", project.name, stdout=listed)
    assert listed.getvalue().startswith(f"{search.pk}\tsucceeded\t2 matches\t2/2 labelled")
    with pytest.raises(CommandError, match=r"^--query: unclosed quote \(column 3\)$"):
        call_command("behaviour_search", "run", "--project", project.name,
                     "--description", "x", "--query", 'a "b')  # fmt: skip
    with pytest.raises(CommandError, match=r"^--judge: project 'Test project' has no judge"):
        call_command("behaviour_search", "run", "--project", project.name,
                     "--description", "x", "--judge", "nobody")  # fmt: skip
    with pytest.raises(CommandError, match="already ended"):
        call_command("behaviour_search", "cancel", str(search.pk))


@pytest.mark.django_db
def test_hostile_ids_and_pages_are_refused_or_ignored_never_an_error(
    researcher_client, project, searched
):
    job, steps = searched
    url = reverse("behaviour_job", args=[job.pk])
    # "²" is a digit to str.isdigit() and not to int(); a number past any id column
    for query in ("?cluster=%C2%B2", "?page=%C2%B2", "?page=-1", "?cluster=1e3", "?match=<b>"):
        page = researcher_client.get(url + query)
        assert page.status_code == 200, query
        assert len(re.findall(r'<tr data-label="\d+"', page.content.decode())) == 3, query
    assert researcher_client.get(url + "?cluster=" + "9" * 15).status_code == 404
    assert researcher_client.get(url + "?cluster=" + "9" * 40).status_code == 200  # ignored
    make = reverse("behaviour_make", args=[job.pk])
    for cluster in ("²", "9" * 40, "x"):
        response = researcher_client.post(make, {"make": "tag", "name": "t", "cluster": cluster})
        assert response.status_code == 404, cluster
    assert not project.tags.exists()


@pytest.mark.django_db
def test_nothing_is_made_of_a_search_that_has_not_ended(researcher_client, project, searched):
    job, steps = searched
    BehaviourSearch.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, phase="labelling")
    page = researcher_client.get(reverse("behaviour_job", args=[job.pk])).content.decode()
    assert 'id="behaviour-make"' not in page
    refused = researcher_client.post(
        reverse("behaviour_make", args=[job.pk]), {"make": "queue", "name": "q"}, follow=True
    )
    assert "Nothing was made: the search has not ended yet." in refused.content.decode()
    assert not AnnotationQueue.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_query_whose_regex_runs_past_its_time_is_refused_or_fails_saying_why(project, settings):
    settings.STUDIO_SEARCH_REGEX_MS = 200
    slow = "re:/((a|aa)+)+c/"
    make_trajectory(project, steps=[("echo aac", "aac")], key="short")
    data = service.BehaviourData(
        judge=judge_of(project), description="the agent reads a file", query=slow
    )
    job = service.start_behaviour_search(project, None, data)  # in time: a job
    # a step written since (or a worker's slower machine): the job stops and says why
    make_trajectory(project, steps=[("cat a.txt", "a" * 3000)], key="long")
    job = run(job)
    assert job.status == JobStatus.FAILED
    assert job.error.startswith(
        "No candidates were chosen: the regular expression /((a|aa)+)+c/ was stopped after "
    )
    assert job.candidate_ids is None and not BehaviourLabel.objects.filter(job=job).exists()
    # the form's request is refused on its query, before any job
    with pytest.raises(service.InvalidSearch) as refused:
        service.start_behaviour_search(project, None, data)
    assert refused.value.field == "query" and "was stopped after" in str(refused.value)
    assert BehaviourSearch.objects.count() == 1
