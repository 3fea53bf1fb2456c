"""The campaign pages through Django's test client: the form's errors on the right field with
nothing written, roles (an annotator sees the pages and no buttons and is refused every
POST; another project's member gets 404), making a campaign and its slots, the results as
the page shows them (slots written here, with rewards), the live part htmx polls, and the
queue, dataset and judge actions making the right items."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inference.worlds import parse_world
from studio.models import (
    AnnotationQueue,
    Campaign,
    CampaignEpisode,
    CampaignSource,
    DatasetItem,
    DatasetVersion,
    JobStatus,
    JudgeJob,
    ModelEndpoint,
    ObservationSource,
    Perturbation,
    QueueItem,
    SlotStatus,
    Step,
    StepJudgement,
    Trajectory,
)
from studio.services import campaigns as service
from studio.services import judging
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import save_world, start_trajectory

pytestmark = pytest.mark.django_db

WORLD = {
    "name": "Ledger <desk>",
    "domain": "terminal",
    "description": "A small accounting box.",
    "files": {"/srv/ledger.csv": "id,amount\n1,40\n2,2\n"},
    "tasks": [
        {"id": "sum", "instruction": "Add up the amounts in /srv/ledger.csv.", "expected": "42"},
        {"id": "count", "instruction": "Count the rows of /srv/ledger.csv.", "expected": "2"},
    ],
}
OTHER_WORLD = {
    "name": "Other box",
    "domain": "terminal",
    "files": {"/a": "b"},
    "tasks": [{"id": "look", "instruction": "Look at /a."}],
}
FAKE_URL = "http://127.0.0.1:9/v1"
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.I)


def _endpoint(project, name, role, model):
    data = EndpointData(name=name, role=role, kind="openai", base_url=FAKE_URL, model=model)
    return save_endpoint(project, data).endpoint


@pytest.fixture
def setup(project):
    world = save_world(project, parse_world(WORLD)).world
    other = save_world(project, parse_world(OTHER_WORLD)).world
    agent = _endpoint(project, "agent-ep", "agent", "agent-m")
    wm = _endpoint(project, "wm-ep", "world", "wm-m")
    cut = Perturbation.objects.create(project=project, name="Cut <short>", kind="truncated")
    return {"world": world, "other": other, "agent": agent, "wm": wm, "cut": cut}


def _campaign(project, setup, *, perturbations=(), episodes=2, name="Ledger run") -> Campaign:
    data = service.CampaignData(
        name=name,
        world=setup["world"],
        source=CampaignSource.WORLD,
        tasks=tuple(service.world_tasks(setup["world"])),
        agent=setup["agent"],
        world_model=setup["wm"],
        episodes_per_task=episodes,
        max_steps=5,
        perturbations=tuple(perturbations),
        seed=1234,
    )
    return service.create_campaign(project, project.users["researcher"], data)


def _form(setup, **over):
    data = {
        "name": "From the form",
        "world": setup["world"].pk,
        "source": "world",
        "agent": setup["agent"].pk,
        "world_model": setup["wm"].pk,
        "episodes_per_task": 2,
        "max_steps": 6,
        "concurrency": 2,
        "temperature": 0.5,
        "max_tokens": 256,
        "seed": "",
    }
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


def _errors(response, field):
    form = response.context["form"]
    return " ".join(form.errors.get(field, []))


# ---- the form -------------------------------------------------------------------------------


def test_the_form_lists_the_projects_choices_and_preselects_the_world(
    researcher_client, project, setup
):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.get(url + f"?world={setup['world'].pk}")
    assert response.status_code == 200
    html = response.content.decode()
    form = response.context["form"]
    assert form.initial["world"] == setup["world"].pk
    assert f'<option value="{setup["world"].pk}" selected>' in html
    # the world's tasks, grouped by world; escaped
    assert f'value="{setup["world"].pk}:sum"' in html and "Ledger &lt;desk&gt;" in html
    assert "Cut &lt;short&gt;" in html
    # the retrieval baseline never answers a world's episodes: not offered
    baseline = ModelEndpoint.objects.get(project=project, kind="retrieval")
    assert baseline.name not in [str(c[1]) for c in form.fields["world_model"].choices]
    assert 'max="16"' in html  # the concurrency's maximum, from the settings
    assert 'id="no-agent"' not in html


def test_no_agent_model_says_so_and_links_to_the_models_page(researcher_client, project, setup):
    setup["agent"].delete()
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    html = researcher_client.get(url).content.decode()
    assert 'id="no-agent"' in html
    assert reverse("endpoint_list", kwargs={"project_id": project.pk}) in html
    response = researcher_client.post(url, _form(setup, agent=""))
    assert response.status_code == 400
    assert response.context["form"].errors["agent"] == [
        "This project has no agent model: an admin adds one on the Models page "
        "(role “Agent model”, an OpenAI-compatible server)."
    ]
    assert not Campaign.objects.exists()


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"name": ""}, "name", "required"),
        ({"world": ""}, "world", "Pick the world"),
        ({"source": "typed", "tasks_text": "  \n "}, "tasks_text", "at least one task"),
        ({"episodes_per_task": 0}, "episodes_per_task", "greater than or equal to 1"),
        ({"max_steps": 5000}, "max_steps", "less than or equal to 1000"),
        ({"concurrency": 17}, "concurrency", "less than or equal to 16"),
        ({"temperature": 3}, "temperature", "less than or equal to 2"),
        ({"seed": -1}, "seed", "A seed is a whole number from 0 to 2^63 − 1"),
        ({"seed": 2**63}, "seed", "A seed is a whole number from 0 to 2^63 − 1"),
        ({"source": "trajectories"}, "trajectory_tag", "Pick the tag"),
        ({"source": "file"}, "tasks_file", "Choose a JSONL file"),
    ],
)
def test_bad_input_is_an_error_on_its_field_and_writes_nothing(
    researcher_client, project, setup, over, field, words
):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.post(url, _form(setup, **over))
    assert response.status_code == 400
    assert words in _errors(response, field), response.context["form"].errors
    assert not Campaign.objects.exists() and not CampaignEpisode.objects.exists()


def test_a_task_of_another_world_is_refused_on_the_tasks_field(researcher_client, project, setup):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.post(url, _form(setup, task_ids=[f"{setup['other'].pk}:look"]))
    assert response.status_code == 400
    assert "'look' is a task of the world 'Other box'" in _errors(response, "task_ids")
    assert not Campaign.objects.exists()


def test_a_bad_jsonl_line_is_named_on_the_file_field(researcher_client, project, setup):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    lines = '{"id": "a", "instruction": "Do a."}\n{"id": "b", "instruction": \n'
    upload = SimpleUploadedFile("mine.jsonl", lines.encode(), content_type="application/jsonl")
    response = researcher_client.post(url, {**_form(setup, source="file"), "tasks_file": upload})
    assert response.status_code == 400
    message = _errors(response, "tasks_file")
    assert "mine.jsonl line 2" in message, message
    assert not Campaign.objects.exists()


def test_too_many_episodes_is_an_error_on_the_episodes_field(
    researcher_client, project, setup, settings
):
    settings.STUDIO_CAMPAIGN_MAX_EPISODES = 3
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.post(url, _form(setup, episodes_per_task=2))
    assert response.status_code == 400
    assert "more than 3" in _errors(response, "episodes_per_task")
    assert not Campaign.objects.exists()


def test_the_form_makes_a_campaign_with_its_slots(
    researcher_client, project, setup, django_capture_on_commit_callbacks
):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    body = _form(
        setup, task_ids=[f"{setup['world'].pk}:count"], perturbations=[setup["cut"].pk], seed=77
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = researcher_client.post(url, body)
    campaign = Campaign.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    assert len(callbacks) >= 1  # enqueued once the transaction commits
    assert campaign.name == "From the form" and campaign.seed == 77
    assert [t["id"] for t in campaign.tasks] == ["count"]
    assert campaign.agent_endpoint == setup["agent"] and campaign.world_endpoint == setup["wm"]
    assert campaign.concurrency == 2 and campaign.max_steps == 6
    assert campaign.agent_params == {"temperature": 0.5, "max_tokens": 256}
    slots = list(campaign.episodes.order_by("arm", "repeat"))
    assert [(s.task_id, s.arm_name, s.repeat) for s in slots] == [
        ("count", "none", 0), ("count", "none", 1),
        ("count", "Cut <short>", 0), ("count", "Cut <short>", 1),
    ]  # fmt: skip
    # a repeat has the same seed in every arm
    assert slots[0].seed == slots[2].seed and slots[1].seed == slots[3].seed
    assert slots[0].seed != slots[1].seed


def test_typed_tasks_are_one_per_line(researcher_client, project, setup):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    body = _form(setup, source="typed", tasks_text="List /srv.\n\n  Show the ledger.  \n")
    assert researcher_client.post(url, body).status_code == 302
    campaign = Campaign.objects.get()
    assert [t["instruction"] for t in campaign.tasks] == ["List /srv.", "Show the ledger."]
    assert campaign.episodes.count() == 4
    # a typed task has no rubric of its own: its row says it will not be scored, and why
    html = researcher_client.get(response_url(campaign)).content.decode()
    assert html.count("not scored: no check of its own rubric or of the world") == 2


# ---- roles ----------------------------------------------------------------------------------


def response_url(campaign) -> str:
    return reverse("campaign_page", kwargs={"campaign_id": campaign.pk})


def _posts(campaign, project):
    pk = campaign.pk
    return [
        reverse("campaign_new", kwargs={"project_id": project.pk}),
        *(
            reverse(name, kwargs={"campaign_id": pk})
            for name in (
                "campaign_cancel", "campaign_resume", "campaign_judge",
                "campaign_queue", "campaign_dataset",
            )
        ),
    ]  # fmt: skip


def test_an_annotator_sees_the_pages_without_buttons_and_may_not_post(
    annotator_client, project, setup
):
    campaign = _campaign(project, setup)
    listing = annotator_client.get(reverse("campaign_list", kwargs={"project_id": project.pk}))
    assert listing.status_code == 200
    assert "Ledger run" in listing.content.decode()
    assert 'id="campaign-new"' not in listing.content.decode()
    page = annotator_client.get(reverse("campaign_page", kwargs={"campaign_id": campaign.pk}))
    html = page.content.decode()
    assert page.status_code == 200 and 'id="campaign-episodes"' in html
    for button in ("campaign-cancel", "campaign-resume", "campaign-actions", "campaign-judge"):
        assert f'id="{button}"' not in html
    assert (
        annotator_client.get(reverse("campaign_new", kwargs={"project_id": project.pk})).status_code
        == 403
    )
    for url in _posts(campaign, project):
        assert annotator_client.post(url, {"name": "x", "which": "all"}).status_code == 403, url
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.QUEUED and not campaign.cancel_requested
    assert not AnnotationQueue.objects.exists() and not JudgeJob.objects.exists()


def test_another_projects_member_gets_404(outsider_client, project, setup):
    campaign = _campaign(project, setup)
    assert (
        outsider_client.get(
            reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
        ).status_code
        == 404
    )
    assert (
        outsider_client.get(reverse("campaign_list", kwargs={"project_id": project.pk})).status_code
        == 404
    )
    for url in _posts(campaign, project):
        assert outsider_client.post(url, {"which": "all"}).status_code == 404, url
    campaign.refresh_from_db()
    assert not campaign.cancel_requested


def test_the_library_links_to_the_campaigns(annotator_client, project):
    html = annotator_client.get(reverse("library", kwargs={"project_id": project.pk})).content
    assert reverse("campaign_list", kwargs={"project_id": project.pk}) in html.decode()


# ---- results --------------------------------------------------------------------------------


def _episode(project, setup, slot: CampaignEpisode, *, steps=2, judged=None) -> Trajectory:
    """An episode trajectory for the slot, with `steps` simulated steps on its root branch."""
    version = setup["world"].latest
    trajectory = start_trajectory(version, f"episode of slot {slot.pk}")
    Trajectory.objects.filter(pk=trajectory.pk).update(
        source_format="episode",
        metadata={
            **trajectory.metadata,
            "episode": {"status": "done", "seed": slot.seed, "client": "campaign"},
        },
        step_count=steps,
    )
    root = trajectory.root_branch
    for i in range(steps):
        step = Step.objects.create(
            branch=root,
            index=i,
            action=f"cat /srv/ledger.csv  # slot {slot.pk} step {i}",
            observation=f"id,amount (slot {slot.pk} step {i})",
            observation_source=ObservationSource.SIMULATED,
        )
        if judged is not None:
            StepJudgement.objects.create(
                step=step, judge_model="j", ok=True, total_score=judged, scores={"realism": judged}
            )
    CampaignEpisode.objects.filter(pk=slot.pk).update(trajectory=trajectory)
    return trajectory


def _play(slot, *, status=SlotStatus.DONE, reward=None, success=None, cause="", steps=2, error=""):
    CampaignEpisode.objects.filter(pk=slot.pk).update(
        status=status, reward=reward, success=success, end_cause=cause, steps=steps, error=error
    )


@pytest.fixture
def played(project, setup):
    """A campaign of 2 tasks x 2 episodes x 2 arms, as if run: task sum succeeds in arm none
    (reward 1.0 twice), fails under the perturbation (0.0, max steps; and an agent error);
    task count: one success, one failure (submit), and two episodes not played yet."""
    campaign = _campaign(project, setup, perturbations=[setup["cut"]])
    slot = {(s.task_id, s.arm, s.repeat): s for s in campaign.episodes.all()}
    _play(slot["sum", 0, 0], reward=1.0, success=True, cause="submit", steps=3)
    _play(slot["sum", 0, 1], reward=1.0, success=True, cause="submit", steps=4)
    _play(slot["sum", 1, 0], reward=0.0, success=False, cause="max_steps", steps=5)
    _play(
        slot["sum", 1, 1], status=SlotStatus.FAILED, steps=1,
        error="the agent model agent-ep failed: HTTP 500 <boom>",
    )  # fmt: skip
    _play(slot["count", 0, 0], reward=1.0, success=True, cause="submit", steps=2)
    _play(slot["count", 0, 1], reward=0.25, success=False, cause="submit", steps=2)
    for key in (("sum", 0, 0), ("sum", 0, 1), ("count", 0, 0)):
        _episode(project, setup, slot[key], judged=4.5)
    low = _episode(project, setup, slot["count", 0, 1], judged=2.0)
    failed = _episode(project, setup, slot["sum", 1, 0])  # not judged
    errored = _episode(project, setup, slot["sum", 1, 1], steps=1)
    Campaign.objects.filter(pk=campaign.pk).update(
        status=JobStatus.RUNNING, episodes_done=6, episodes_failed=1,
        agent_tokens_in=1200, agent_tokens_out=300, world_tokens_in=5000, world_tokens_out=800,
    )  # fmt: skip
    campaign.refresh_from_db()
    return {"campaign": campaign, "slot": slot, "low": low, "failed": failed, "errored": errored}


def _figure(html: str, name: str) -> dict:
    found = re.search(
        rf'<script id="campaign-{name}-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, f"no {name} figure"
    return json.loads(found.group(1))


def test_the_results_as_the_page_shows_them(researcher_client, project, setup, played):
    campaign = played["campaign"]
    url = reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.get(url)
    html = response.content.decode()
    assert "not scored: no check" not in html  # the world's tasks are scored by their rubric
    assert response.status_code == 200
    assert 'id="campaign-status">Running<' in html
    assert 'id="campaign-cancel"' in html and 'id="campaign-resume"' not in html
    # one vocabulary: played = ended + failed (error) + cancelled; the rest not played yet
    progress = re.search(r'<p id="campaign-progress">(.*?)</p>', html, re.S)
    assert progress and re.sub(r"<[^>]+>", "", progress.group(1)) == (
        "6 of 8 episodes played: 5 ended, 1 failed (error), 2 not played yet"
    )
    assert 'id="campaign-failed" class="form-errors"' in html
    assert 'id="campaign-replaced"' not in html  # no episode was played again
    # 3 successes of 5 scored (the failed slot has no score, never counted)
    assert 'id="campaign-success">60% (3 of 5 scored)<' in html
    assert 'id="campaign-reward">0.65<' in html  # (1 + 1 + 0 + 1 + 0.25) / 5
    # by arm: none 3 of 4, Cut 0 of 1 scored
    arm_rows = re.findall(r'<tr data-arm="(\d)"><td>(.*?)</td>.*?<td class="rate">(.*?)</td>', html)
    assert ("0", "none", "75% (3 of 4 scored)") in arm_rows
    assert ("1", "Cut &lt;short&gt;", "0% (0 of 1 scored)") in arm_rows
    # a task and arm with no episode ended says so, never 0%
    row = re.search(r'<tr data-task="1" data-arm="1">.*?<td class="rate">(.*?)</td>', html, re.S)
    assert row and row.group(1) == "–"
    # tokens; no price set: never a $0 that is not true
    assert html.count('muted">no price set</td>') == 2 and "$0" not in html
    # the error of the failed slot is shown, escaped
    assert "HTTP 500 &lt;boom&gt;" in html
    # every slot in the episodes table, linked to its episode
    assert html.count('<tr data-slot="') == 8
    assert reverse("trajectory", kwargs={"trajectory_id": played["low"].pk}) in html
    # the figures: success per task grouped by arm, escaped names
    success = _figure(html, "success")
    assert [t["name"] for t in success["data"]] == ["none", "Cut &lt;short&gt;"]
    assert success["data"][0]["x"] == ["sum", "count"]
    assert success["data"][0]["y"] == [100.0, 50.0]
    assert success["data"][1]["y"] == [0.0, None]  # task count has no scored episode there
    reward = _figure(html, "reward")
    assert reward["data"][0]["y"] == [1.0, 0.625]
    distribution = _figure(html, "distribution")
    assert sum(sum(t["y"]) for t in distribution["data"]) == 5
    steps = _figure(html, "steps")
    assert sum(sum(t["y"]) for t in steps["data"]) == 5
    causes = _figure(html, "causes")
    by_arm = {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in causes["data"]}
    assert by_arm["Cut &lt;short&gt;"]["error"] == 1
    assert by_arm["Cut &lt;short&gt;"]["max steps"] == 1
    assert by_arm["none"] == {"error": 0, "max steps": 0, "submitted": 1}


def test_prices_give_a_cost_and_status_labels_are_true(researcher_client, project, setup, played):
    campaign = played["campaign"]
    ModelEndpoint.objects.filter(pk=setup["agent"].pk).update(
        price_in_per_mtok=2.0, price_out_per_mtok=10.0
    )
    Campaign.objects.filter(pk=campaign.pk).update(status=JobStatus.CANCELLED)
    html = researcher_client.get(
        reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    ).content.decode()
    assert "$0.0054" in html  # 1200 * 2 / 1e6 + 300 * 10 / 1e6
    assert html.count('muted">no price set</td>') == 1  # the world model's still unknown
    assert 'id="campaign-status">Cancelled<' in html and 'id="campaign-status">Failed' not in html
    assert 'id="campaign-resume"' in html and 'id="campaign-cancel"' not in html
    listing = researcher_client.get(
        reverse("campaign_list", kwargs={"project_id": project.pk})
    ).content.decode()
    assert "Cancelled" in listing
    played = re.search(r'<td class="played">(.*?)</td>', listing, re.S)
    assert played and re.sub(r"<[^>]+>", "", played.group(1)) == (
        "6 of 8 (5 ended, 1 failed (error))"
    )


def test_the_live_part_polls_until_the_campaign_ends(researcher_client, project, setup, played):
    campaign = played["campaign"]
    url = reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    page = researcher_client.get(url).content.decode()
    assert 'hx-trigger="every 2s"' in page
    live = researcher_client.get(url, headers={"HX-Request": "true"})
    assert live.status_code == 200
    body = live.content.decode()
    assert 'id="campaign-state"' in body and "<html" not in body
    assert 'id="campaign-success-data"' in body  # the figures update with it
    Campaign.objects.filter(pk=campaign.pk).update(status=JobStatus.SUCCEEDED)
    done = researcher_client.get(url, headers={"HX-Request": "true"})
    assert done.status_code == 286  # htmx stops polling
    assert 'id="campaign-status">Done<' in done.content.decode()
    assert 'hx-trigger="every 2s"' not in researcher_client.get(url).content.decode()


def test_pages_only_read(researcher_client, project, setup, played):
    campaign = played["campaign"]
    urls = [
        reverse("campaign_list", kwargs={"project_id": project.pk}),
        reverse("campaign_new", kwargs={"project_id": project.pk}),
        reverse("campaign_page", kwargs={"campaign_id": campaign.pk}),
    ]
    for url in urls:
        for headers in ({}, {"HX-Request": "true"}):
            with CaptureQueriesContext(connection) as queries:
                assert researcher_client.get(url, headers=headers).status_code == 200
            writes = [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])]
            assert writes == [], (url, writes)


# ---- actions --------------------------------------------------------------------------------


def _steps_of(*trajectories) -> list[int]:
    return [
        s.pk
        for t in trajectories
        for s in Step.objects.filter(branch=t.root_branch).order_by("index")
    ]


def test_a_queue_of_the_failed_episodes(researcher_client, project, setup, played):
    campaign = played["campaign"]
    url = reverse("campaign_queue", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(url, {"which": "failed", "name": "Failures"})
    queue = AnnotationQueue.objects.get(name="Failures")
    assert response.status_code == 302
    assert response["Location"] == reverse("queue_detail", kwargs={"queue_id": queue.pk})
    items = list(QueueItem.objects.filter(queue=queue).values_list("step_id", flat=True))
    # the failed slots' episodes (the max-steps one, the error one, the 0.25 one), not the successes
    assert sorted(items) == sorted(_steps_of(played["failed"], played["errored"], played["low"]))
    assert (
        "of campaign 'Ledger run', those not a success or failed with an error ("
        in queue.description
    )


def test_a_queue_of_low_judge_scores(researcher_client, project, setup, played):
    campaign = played["campaign"]
    url = reverse("campaign_queue", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(url, {"which": "low_judge", "below": "3", "name": "Low"})
    assert response.status_code == 302
    queue = AnnotationQueue.objects.get(name="Low")
    items = list(QueueItem.objects.filter(queue=queue).values_list("step_id", flat=True))
    assert sorted(items) == sorted(_steps_of(played["low"]))
    # below every score: an error on the field, nothing made
    response = researcher_client.post(url, {"which": "low_judge", "below": "1.5", "name": "None"})
    assert response.status_code == 400
    assert "No judged episode scores below 1.5" in " ".join(
        response.context["queue_form"].errors["below"]
    )
    assert not AnnotationQueue.objects.filter(name="None").exists()


def test_a_dataset_of_the_successful_episodes_agent_turns(
    researcher_client, project, setup, played
):
    campaign = played["campaign"]
    url = reverse("campaign_dataset", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(
        url, {"which": "success", "turns": "agent", "dataset_name": "Ledger SFT"}, follow=True
    )
    version = DatasetVersion.objects.get(dataset__name="Ledger SFT")
    assert response.redirect_chain[-1][0] == reverse(
        "dataset_detail", kwargs={"dataset_id": version.dataset_id}
    )
    assert "export it as agent-turns" in response.content.decode()
    slot = played["slot"]
    successes = [
        Trajectory.objects.get(pk=CampaignEpisode.objects.get(pk=slot[k].pk).trajectory_id)
        for k in (("sum", 0, 0), ("sum", 0, 1), ("count", 0, 0))
    ]
    items = list(DatasetItem.objects.filter(version=version).values_list("step_id", flat=True))
    assert sorted(items) == sorted(_steps_of(*successes))
    assert "agent turns" in version.source
    # its export defaults to its own turns: agent-turns rows of agent turns
    detail = response.content.decode()
    assert '<option value="agent-turns" selected>' in detail
    assert '<option value="agent" selected>agent turns' in detail
    # world-model turns never go into a dataset of agent turns: an error on the name
    response = researcher_client.post(
        url, {"which": "all", "turns": "wm", "dataset_name": "Ledger SFT"}
    )
    assert response.status_code == 400
    assert "holds agent turns" in " ".join(response.context["dataset_form"].errors["dataset_name"])
    assert DatasetVersion.objects.filter(dataset__name="Ledger SFT").count() == 1
    # a second agent-turns version of every episode goes in
    response = researcher_client.post(
        url, {"which": "all", "turns": "agent", "dataset_name": "Ledger SFT"}, follow=True
    )
    assert "export it as agent-turns" in response.content.decode()
    assert DatasetVersion.objects.filter(dataset__name="Ledger SFT").count() == 2


def test_an_action_with_nothing_to_take_is_an_error_on_its_form(researcher_client, project, setup):
    campaign = _campaign(project, setup)  # nothing played
    url = reverse("campaign_dataset", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(
        url, {"which": "success", "turns": "agent", "dataset_name": "Empty"}
    )
    assert response.status_code == 400
    assert "no successful episode yet" in " ".join(response.context["dataset_form"].errors["which"])
    assert not DatasetVersion.objects.exists()


def test_judging_the_campaign_scores_its_episodes_steps(researcher_client, project, setup, played):
    campaign = played["campaign"]
    url = reverse("campaign_judge", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(url, {}, follow=True)
    assert "no judge model" in response.content.decode()
    assert not JudgeJob.objects.exists()
    judge = _endpoint(project, "judge-ep", "judge", "judge-m")
    response = researcher_client.post(url, {"judge": judge.pk})
    job = JudgeJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("judge_job", kwargs={"job_id": job.pk})
    assert job.target == "campaign" and job.campaign_id == campaign.pk
    assert job.judge_endpoint == judge and "campaign" in job.description
    campaign.refresh_from_db()
    assert campaign.judge_job_id == job.pk
    episodes = [played["low"], played["failed"], played["errored"]] + [
        Trajectory.objects.get(
            pk=CampaignEpisode.objects.get(pk=played["slot"][k].pk).trajectory_id
        )
        for k in (("sum", 0, 0), ("sum", 0, 1), ("count", 0, 0))
    ]
    assert sorted(judging.judged_steps(job).values_list("pk", flat=True)) == sorted(
        _steps_of(*episodes)
    )
    # the judge form's own page takes the campaign too
    new = researcher_client.get(
        reverse("judge_new", kwargs={"project_id": project.pk})
        + f"?target=campaign&campaign={campaign.pk}"
    )
    assert "the episodes of campaign" in new.content.decode()


def test_the_reward_distribution_is_per_reward_or_in_ten_bins():
    from types import SimpleNamespace

    from studio.presenters import campaigns as present

    campaign = SimpleNamespace(arms=[{"name": "<b>cut</b>", "rules": []}])
    few = SimpleNamespace(
        rewards=[
            {"reward": 0.0, "arm_name": "none"},
            {"reward": 1.0, "arm_name": "none"},
            {"reward": 1.0, "arm_name": "<b>cut</b>"},
            {"reward": None, "arm_name": "none"},  # unscored: not in the distribution
        ]
    )
    figure = present.reward_figure(campaign, few)
    assert [(t["name"], t["x"], t["y"]) for t in figure["data"]] == [
        ("none", ["0.0", "1.0"], [1, 1]),
        ("&lt;b&gt;cut&lt;/b&gt;", ["0.0", "1.0"], [0, 1]),
    ]
    many = SimpleNamespace(rewards=[{"reward": x / 10, "arm_name": "none"} for x in range(21)])
    figure = present.reward_figure(campaign, many)
    assert len(figure["data"][0]["x"]) == 10 and sum(figure["data"][0]["y"]) == 21
    assert figure["data"][0]["x"][0] == "[0.0, 0.2)" and figure["data"][0]["x"][-1] == "[1.8, 2.0]"
    assert present.reward_figure(campaign, SimpleNamespace(rewards=[])) == {}


def test_cancel_then_resume(researcher_client, project, setup, django_capture_on_commit_callbacks):
    campaign = _campaign(project, setup)
    page = reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(
        reverse("campaign_cancel", kwargs={"campaign_id": campaign.pk}), follow=True
    )
    assert "the episodes already played are kept" in response.content.decode()
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.CANCELLED  # a queued campaign stops at once
    html = researcher_client.get(page).content.decode()
    assert 'id="campaign-status">Cancelled<' in html and 'id="campaign-resume"' in html
    again = researcher_client.post(
        reverse("campaign_cancel", kwargs={"campaign_id": campaign.pk}), follow=True
    )
    assert "has already ended (Cancelled)" in again.content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = researcher_client.post(
            reverse("campaign_resume", kwargs={"campaign_id": campaign.pk})
        )
    assert response.status_code == 302 and len(callbacks) >= 1
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.QUEUED
    refused = researcher_client.post(
        reverse("campaign_resume", kwargs={"campaign_id": campaign.pk}), follow=True
    )
    assert "a campaign resumes once it stopped" in refused.content.decode()


def test_recorded_trajectories_by_tag_are_the_tasks(researcher_client, project, setup):
    from studio.models import Tag
    from tests.support.branching import make_trajectory

    recorded, _ = make_trajectory(project)
    episode_like, _ = make_trajectory(project, key="k2")
    Trajectory.objects.filter(pk=episode_like.pk).update(source_format="episode")
    tag = Tag.objects.create(project=project, name="starts")
    recorded.tags.add(tag)
    episode_like.tags.add(tag)  # an episode is no recorded start: left out
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.post(
        url, _form(setup, source="trajectories", world="", trajectory_tag=tag.pk)
    )
    assert response.status_code == 302, response.context["form"].errors
    campaign = Campaign.objects.get()
    assert campaign.world is None and campaign.source == "trajectories"
    assert [t["trajectory"] for t in campaign.tasks] == [recorded.pk]
    html = researcher_client.get(response["Location"]).content.decode()
    assert "none: recorded trajectories' starting states" in html


# ---- QA fixes: one vocabulary, the choices the form makes, where errors show ---------------


def _page(client, campaign, **headers) -> str:
    url = reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    return client.get(url, headers=headers).content.decode()


def _text(html: str, element_id: str) -> str:
    """The text of the element (a p, div or td) of that id, its tags dropped, unescaped."""
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</(p|div|td)>', html, re.S)
    assert found, f"no #{element_id}"
    text = re.sub(r"<[^>]+>", "", re.sub(r"<details>.*?</details>", "", found.group(1), flags=re.S))
    return re.sub(r"\s+", " ", unescape(text)).strip()


def test_the_world_model_is_never_a_silent_pick(researcher_client, project, setup):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    baseline = ModelEndpoint.objects.get(project=project, kind="retrieval")
    assert baseline.is_default
    # the default is the retrieval baseline and one other reads a world's prompt: that one
    form = researcher_client.get(url).context["form"]
    assert form.fields["world_model"].initial == setup["wm"].pk
    # a second one: nothing picked, the field required, its help says why
    _endpoint(project, "Dead world", "world", "dead-m")
    response = researcher_client.get(url)
    field = response.context["form"].fields["world_model"]
    html = response.content.decode()
    assert field.initial is None and field.required
    assert "— pick a world model —" in html
    assert (
        f"The project's default world model, {baseline.name}, is the retrieval baseline"
        in field.help_text
    )
    assert "these 2 world models" in field.help_text
    response = researcher_client.post(url, _form(setup, world_model=""))
    assert response.status_code == 400
    assert "Pick the world model that answers the episodes" in _errors(response, "world_model")
    assert not Campaign.objects.exists()
    # a default that reads a world's prompt is the one picked
    ModelEndpoint.objects.filter(pk=baseline.pk).update(is_default=False)
    ModelEndpoint.objects.filter(pk=setup["wm"].pk).update(is_default=True)
    field = researcher_client.get(url).context["form"].fields["world_model"]
    assert field.initial == setup["wm"].pk


def test_the_new_campaign_form_words_and_choices(researcher_client, project, setup):
    from studio.models import Tag

    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    Tag.objects.create(project=project, name="campaign:12")
    Tag.objects.create(project=project, name="starts")
    Tag.objects.create(project=project, name="campaign: notes")  # not a campaign's own tag
    response = researcher_client.get(url)
    html = response.content.decode()
    tags = [str(label) for _, label in response.context["form"].fields["trajectory_tag"].choices]
    assert "starts" in tags and "campaign: notes" in tags and "campaign:12" not in tags
    # perturbations exist: no hint; none: the hint links to the Perturbations page
    assert 'id="no-perturbations"' not in html
    assert "js/campaigns.js" in html  # the world's tasks follow the world picked
    Perturbation.objects.all().delete()
    html = researcher_client.get(url).content.decode()
    assert "This project has no perturbations yet: add them on the" in html
    assert reverse("perturbation_list", kwargs={"project_id": project.pk}) in html
    # a task of another world is still refused on the server
    response = researcher_client.post(url, _form(setup, task_ids=[f"{setup['other'].pk}:look"]))
    assert response.status_code == 400


def test_one_of_each_is_said_in_the_singular(researcher_client, project, setup):
    url = reverse("campaign_new", kwargs={"project_id": project.pk})
    response = researcher_client.post(
        url,
        _form(setup, task_ids=[f"{setup['world'].pk}:sum"], episodes_per_task=1, max_steps=1),
        follow=True,
    )
    html = response.content.decode()
    assert "Started campaign &#x27;From the form&#x27;: 1 episode." in html
    assert _text(html, "campaign-tasks").startswith("1 task · The world's tasks")
    m = re.search(r'<td id="campaign-m">(.*?)</td>', html).group(1)
    assert m.startswith("1 episode per task in each arm (1 arm), at most 1 step each")
    assert m.endswith("1 episode in all")
    assert "1 episodes" not in html and "1 tasks" not in html and "1 arms" not in html
    assert _text(html, "campaign-progress") == "0 of 1 episode played: 0 ended, 1 not played yet"


def test_an_annotator_is_told_why_a_campaign_post_is_refused(annotator_client, project, setup):
    campaign = _campaign(project, setup)
    words = "Annotators can see campaigns and their results but not run them."
    new = annotator_client.get(reverse("campaign_new", kwargs={"project_id": project.pk}))
    assert new.status_code == 403 and words in new.content.decode()
    for url in _posts(campaign, project):
        response = annotator_client.post(url, {"which": "all"})
        assert response.status_code == 403 and words in response.content.decode(), url


def test_a_campaign_whose_every_episode_failed_says_so(researcher_client, project, setup):
    campaign = _campaign(project, setup)
    for slot in campaign.episodes.all():
        _play(slot, status=SlotStatus.FAILED, steps=0, error="the agent model agent-ep: <refused>")
    Campaign.objects.filter(pk=campaign.pk).update(
        status=JobStatus.FAILED,
        error="every episode failed; the first error: the agent model agent-ep: <refused>",
        episodes_done=4,
        episodes_failed=4,
    )
    html = _page(researcher_client, campaign)
    # the error at the top of the page, before the settings
    assert html.index('id="campaign-error"') < html.index('id="campaign-settings"')
    assert _text(html, "campaign-error").startswith(
        "The campaign failed: every episode failed; the first error: the agent model "
        "agent-ep: <refused>"
    )
    assert "agent-ep: &lt;refused&gt;" in html  # escaped
    assert 'id="campaign-status">Failed<' in html
    assert _text(html, "campaign-progress") == "4 of 4 episodes played: 0 ended, 4 failed (error)"
    assert _text(html, "campaign-all-failed").startswith(
        "Every episode failed with an error: see the episodes table"
    )
    assert "No episode has ended yet" not in html
    rows = re.findall(
        r'<tr data-task="\d">.*?<td class="ended">(.*?)</td><td class="failed">(.*?)</td>', html
    )
    assert rows == [("0 of 2", "2"), ("0 of 2", "2")]
    assert html.count("Failed (error)</span>") == 4  # the episodes table's status words
    # the part htmx polls carries the top error out of band
    live = _page(researcher_client, campaign, **{"HX-Request": "true"})
    assert '<div id="campaign-top" hx-swap-oob="true">' in live and "The campaign failed:" in live


def test_cancelled_and_replayed_episodes_are_counted_and_linked(researcher_client, project, setup):
    campaign = _campaign(project, setup)
    slots = list(campaign.episodes.order_by("task_index", "repeat"))
    _play(slots[0], reward=1.0, success=True, cause="submit", steps=2)
    _play(slots[1], status=SlotStatus.CANCELLED, cause="cancelled", steps=1)
    _play(slots[2], status=SlotStatus.CANCELLED, cause="cancelled", steps=1)
    # slot 0 was cancelled once before and played again: its old episode stays in the library
    old = _episode(project, setup, slots[0])
    _episode(project, setup, slots[0])
    for t in Trajectory.objects.filter(source_format="episode"):
        t.metadata["campaign"] = {"id": campaign.pk, "slot": slots[0].pk}
        t.save(update_fields=["metadata"])
    Campaign.objects.filter(pk=campaign.pk).update(status=JobStatus.CANCELLED)
    html = _page(researcher_client, campaign)
    assert _text(html, "campaign-progress") == (
        "3 of 4 episodes played: 1 ended, 2 cancelled (Resume plays them again), 1 not played yet"
    )
    replaced = _text(html, "campaign-replaced")
    assert replaced == (
        "1 earlier episode was cancelled or failed and played again; it stays in the library "
        f"(tag campaign:{campaign.pk})."
    )
    library = reverse("library", kwargs={"project_id": project.pk})
    assert f'href="{library}?tag=campaign%3A{campaign.pk}"' in html
    assert old.pk != CampaignEpisode.objects.get(pk=slots[0].pk).trajectory_id
    # the tables count the cancelled ones in a column of their own
    assert "<th>Cancelled</th>" in html
    cells = re.findall(r'<tr data-task="0"><td>.*?<td class="cancelled">(\d+)</td>', html, re.S)
    assert cells == ["1"]


def test_the_figures_keep_the_legend_off_the_axis_title(researcher_client, project, setup, played):
    html = _page(researcher_client, played["campaign"])
    for name in ("success", "reward", "distribution", "steps", "causes"):
        layout = _figure(html, name)["layout"]
        legend = layout["legend"]
        # above the plot, in the top margin, where no axis title is
        assert legend["yanchor"] == "bottom" and legend["y"] > 1, name
        assert layout["margin"]["t"] >= 40, name
    assert (
        "How the episodes that were scored and not a success ended, and the errors, by arm" in html
    )


def test_a_refused_action_shows_its_error_where_the_person_is(researcher_client, project, setup):
    campaign = _campaign(project, setup)  # nothing played
    page_url = reverse("campaign_page", kwargs={"campaign_id": campaign.pk})
    html = researcher_client.get(page_url).content.decode()
    assert "js/campaigns.js" in html  # scrolls a refused action's error into view
    queue_url = reverse("campaign_queue", kwargs={"campaign_id": campaign.pk})
    dataset_url = reverse("campaign_dataset", kwargs={"campaign_id": campaign.pk})
    response = researcher_client.post(queue_url, {"which": "failed", "name": "Q"})
    html = response.content.decode()
    assert response.status_code == 400
    # at the top of the page (the messages) ...
    message = re.search(r'<ul class="messages"><li class="msg-error">(.*?)</li>', html)
    assert message and message.group(1).startswith(
        "The queue was not made: This campaign has no episode"
    )
    assert html.index('class="messages"') < html.index("<h1>")
    # ... and summed up right above the form's button
    errors = re.search(
        r'id="campaign-queue-errors" role="alert">(.*?)</div>\s*<button type="submit" '
        r'id="campaign-queue">',
        html,
        re.S,
    )
    assert errors, "no error next to the queue button"
    assert errors.group(1).startswith("The queue was not made: This campaign has no episode")
    response = researcher_client.post(
        dataset_url, {"which": "success", "turns": "agent", "dataset_name": "D"}
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert re.search(
        r'id="campaign-dataset-errors" role="alert">The dataset version was not made: This '
        r"campaign has no successful episode yet\. </div>\s*<button",
        html,
    )
    # the judge: back on the campaign's page with the error at its top (the messages)
    response = researcher_client.post(
        reverse("campaign_judge", kwargs={"campaign_id": campaign.pk}), {}, follow=True
    )
    assert response.redirect_chain[-1][0] == page_url
    html = response.content.decode()
    message = re.search(r'<ul class="messages"><li class="msg-error">(.*?)</li>', html)
    assert message and "This project has no judge model" in message.group(1)
    assert html.index('class="messages"') < html.index("<h1>")


def test_the_dataset_name_follows_the_turns(researcher_client, project, setup, played):
    campaign = played["campaign"]
    html = _page(researcher_client, campaign)
    names = json.loads(
        re.search(
            r'<script id="campaign-dataset-names" type="application/json">(.*?)</script>', html
        ).group(1)
    )
    assert names["success:agent"] == "Ledger run: successful episodes (agent turns)"
    assert names["success:wm"] == "Ledger run: successful episodes (world-model turns)"
    assert names["all:wm"] == "Ledger run: every episode (world-model turns)"
    assert 'value="Ledger run: successful episodes (agent turns)"' in html
    assert "js/campaigns.js" in html
    url = reverse("campaign_dataset", kwargs={"campaign_id": campaign.pk})
    # the default name left as it was with world-model turns chosen (no JavaScript): the
    # dataset of world-model turns, not the agent turns' one
    for turns in ("agent", "wm"):
        response = researcher_client.post(
            url, {"which": "success", "turns": turns, "dataset_name": names["success:agent"]}
        )
        assert response.status_code == 302
    agent = DatasetVersion.objects.get(dataset__name=names["success:agent"])
    wm = DatasetVersion.objects.get(dataset__name=names["success:wm"])
    assert agent.source.startswith("agent turns") and wm.source.startswith("world-model turns")
    # each dataset's export starts from its own turns' format
    for version, fmt, turns in ((agent, "agent-turns", "agent"), (wm, "wm-turns", "wm")):
        detail = researcher_client.get(
            reverse("dataset_detail", kwargs={"dataset_id": version.dataset_id})
        ).content.decode()
        assert f'<option value="{fmt}" selected>' in detail
        assert f'<option value="{turns}" selected>' in detail
        assert detail.count(" selected>") == 2


def test_a_dataset_of_other_steps_exports_as_benchmark_rows_by_default():
    from types import SimpleNamespace

    from studio.forms.datasets import export_initial

    assert export_initial(SimpleNamespace(source="queue 'Web' accepted")) == {
        "format": "agentworldbench",
        "turns": "wm",
    }
    assert export_initial(None)["format"] == "agentworldbench"
    assert export_initial(SimpleNamespace(source="agent turns of 3 episodes: x"))["turns"] == (
        "agent"
    )
