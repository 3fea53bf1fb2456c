"""A rollout campaign as a researcher runs one, in headless Chromium with a real worker: from
the library's Campaigns button, the form (a world's two tasks, two episodes each, one
perturbation arm), started against a fake agent model and a fake world model on 127.0.0.1;
the form lists only the chosen world's tasks; the page is seen running, then reaches done
without a reload (htmx polls it), its figures drawn with their legends clear of the axis
titles; a refused action's error is in view where the person is; the dataset form's name
follows the turns; then the failed episodes become an annotation queue."""

from __future__ import annotations

import json
import re
import threading

import pytest
from playwright.sync_api import expect

from inference.worlds import parse_world
from studio.models import (
    AnnotationQueue,
    Campaign,
    CampaignEpisode,
    JobStatus,
    JudgeJob,
    Perturbation,
    QueueItem,
    SlotStatus,
    Step,
)
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import save_world
from tests.support.browser import shot
from tests.support.fake_openai import fake_openai_server

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _tool(name: str, description: str, arg: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
                "additionalProperties": False,
            },
        },
    }


ANSWER_CHECK = {
    "step": [],
    "episode": [{"name": "answer", "kind": "exact", "target": "final_answer", "weight": 1}],
}
LEDGER = {
    "name": "Ledger desk",
    "domain": "mcp",
    "description": "A bookkeeping service with one ledger of two rows (40 and 2).",
    "initial_state": "The ledger service is up.",
    "tools": [
        _tool("read_ledger", "The ledger's rows", "account"),
        _tool("submit_answer", "Submit the final answer", "answer"),
    ],
    "tasks": [
        {
            "id": "sum",
            "instruction": "Add up the amounts in the ledger and submit the total.",
            "expected": "42",
            "max_steps": 4,
            "rubric": ANSWER_CHECK,
        },
        {
            "id": "count",
            "instruction": "Count the rows of the ledger and submit how many there are.",
            "expected": "2",
            "max_steps": 4,
            "rubric": ANSWER_CHECK,
        },
    ],
    "termination": {"terminal": [], "submit": {"tool": "submit_answer", "argument": "answer"}},
}


def judge_answer(body) -> str:
    """The judge scores a read of a "count" episode 2, every other 4."""
    user = body["messages"][1]["content"]
    score = 2 if "Count the rows" in user else 4
    dims = ("format", "factuality", "consistency", "realism", "quality")
    dims = dims if "## Reference observation" in user else ("consistency", "realism")
    block = {"scores": dict.fromkeys(dims, score), "strengths": [], "weaknesses": []}
    return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"


def make_responder(go: threading.Event):
    """The agent reads the ledger, then submits: the right total for "sum", a wrong count
    for "count" (so that task's episodes fail). It waits for `go` before its first answer,
    so the page is seen running. The world model answers every read with the rows."""

    def responder(body, index):
        if body["model"] == "wm-m":
            return '<predicted_observation>{"rows": [40, 2]}</predicted_observation>'
        if body["model"] == "judge-m":
            return judge_answer(body)
        go.wait(60)
        messages = body["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        if not any(m["role"] == "tool" for m in messages):
            call = {"name": "read_ledger", "arguments": '{"account": "main"}'}
        else:
            answer = "42" if "Add up" in task else "7"
            call = {"name": "submit_answer", "arguments": f'{{"answer": "{answer}"}}'}
        return {
            "content": None,
            "tool_calls": [{"id": f"call-{index}", "type": "function", "function": call}],
        }

    return responder


def test_a_campaign_from_the_form_to_a_queue_of_its_failures(
    page, login, live_server, default_worker, project
):
    world = save_world(project, parse_world(LEDGER)).world
    other = save_world(
        project,
        parse_world(
            {
                **LEDGER,
                "name": "Another desk",
                "tasks": [{"id": "elsewhere", "instruction": "Read another ledger."}],
            }
        ),
    ).world
    Perturbation.objects.create(project=project, name="Cut short", kind="truncated")
    go = threading.Event()
    with fake_openai_server(make_responder(go)) as srv:
        for name, role, model in (
            ("agent-ep", "agent", "agent-m"),
            ("wm-ep", "world", "wm-m"),
            ("judge-ep", "judge", "judge-m"),
        ):
            save_endpoint(
                project,
                EndpointData(name=name, role=role, kind="openai", base_url=srv, model=model),
            )
        login(page, "researcher")
        page.goto(f"{live_server.url}/projects/{project.pk}/")
        page.click("#campaigns-link")
        page.wait_for_url(re.compile(r"/campaigns/$"))
        expect(page.locator("#no-campaigns")).to_be_visible()
        page.click("#campaign-new")
        page.wait_for_url(re.compile(r"/campaigns/new/$"))
        page.fill("input[name=name]", "Ledger & 'run'")
        # the world's tasks: only the chosen world's are offered
        tasks = page.locator("select[name=task_ids]")
        page.select_option("select[name=world]", label="Another desk")
        expect(tasks.locator(f"option[value='{other.pk}:elsewhere']")).not_to_be_hidden()
        expect(tasks.locator(f"option[value='{world.pk}:sum']")).to_be_hidden()
        page.select_option("select[name=world]", label="Ledger desk")
        expect(tasks.locator(f"option[value='{world.pk}:sum']")).not_to_be_hidden()
        expect(tasks.locator(f"option[value='{other.pk}:elsewhere']")).to_be_hidden()
        expect(page.locator("optgroup[label='Another desk']")).to_be_hidden()
        page.check("input[name=source][value=world]")
        page.select_option("select[name=agent]", label="agent-ep · agent-m")
        page.select_option("select[name=world_model]", label="wm-ep · wm-m")
        page.fill("input[name=episodes_per_task]", "2")
        page.fill("input[name=max_steps]", "4")
        page.get_by_label("Cut short").check()
        page.fill("input[name=seed]", "2026")
        page.fill("input[name=concurrency]", "4")
        shot(page, "campaign-new")
        page.click("#campaign-start")
        page.wait_for_url(re.compile(r"/campaigns/\d+/$"))
        campaign = Campaign.objects.get()
        assert campaign.world == world and campaign.seed == 2026
        assert campaign.episodes_total == 8  # 2 tasks x 2 episodes x 2 arms
        expect(page.locator("#campaign-status")).to_have_text(re.compile(r"Queued|Running"))
        expect(page.locator("#campaign-progress")).to_contain_text("0 of 8 episodes played")
        expect(page.locator("#campaign-arms")).to_contain_text("Cut short")
        shot(page, "campaign-running")
        go.set()
        page.locator("#campaign-state[data-campaign-status=succeeded]").wait_for(timeout=120_000)
        expect(page.locator("#campaign-status")).to_have_text("Done")
        expect(page.locator("#campaign-progress")).to_have_text("8 of 8 episodes played: 8 ended")
        assert not page.locator("#campaign-cancel").count()
        campaign.refresh_from_db()
        assert campaign.status == JobStatus.SUCCEEDED
        slots = list(CampaignEpisode.objects.filter(campaign=campaign))
        assert all(s.status == SlotStatus.DONE for s in slots), [(s.status, s.error) for s in slots]
        assert {(s.task_id, s.success) for s in slots} == {("sum", True), ("count", False)}
        # half the scored episodes are successes: "sum" in both arms
        expect(page.locator("#campaign-success")).to_have_text("50% (4 of 8 scored)")
        expect(
            page.locator("#campaign-by-task tr[data-task='0'][data-arm='1'] td.rate")
        ).to_have_text("100% (2 of 2 scored)")
        # the figures are drawn (Plotly, loaded from our static files)
        for name in ("success", "reward", "distribution", "steps", "causes"):
            page.locator(f"#campaign-{name}-figure[data-ready='1']").wait_for()
        expect(page.locator("#campaign-success-figure .barlayer .point")).not_to_have_count(0)
        expect(page.locator("#campaign-episodes tbody tr")).to_have_count(8)
        # each figure's legend (the arms) sits above its plot, clear of the x-axis title
        for name in ("success", "reward", "distribution", "steps", "causes"):
            figure = page.locator(f"#campaign-{name}-figure")
            legend = figure.locator(".legend").bounding_box()
            title = figure.locator(".xtitle").bounding_box()
            plot = figure.locator(".nsewdrag").first.bounding_box()
            assert legend and title and plot, name
            assert legend["y"] + legend["height"] <= plot["y"] + 1, (name, legend, plot)
            assert title["y"] >= plot["y"] + plot["height"], (name, title, plot)
        shot(page, "campaign-done")

        # a refused action: the page comes back scrolled to the error above the button
        page.select_option("#campaign-queue-form select[name=which]", "low_judge")
        page.fill("#campaign-queue-form input[name=name]", "Too early")
        page.click("#campaign-queue")
        errors = page.locator("#campaign-queue-errors")
        expect(errors).to_contain_text("No episode of this campaign has a judge score yet")
        expect(errors).to_be_in_viewport()
        expect(page.locator("#campaign-queue")).to_be_in_viewport()
        shot(page, "campaign-refused")
        assert not AnnotationQueue.objects.exists()

        # the dataset's name follows the turns chosen while it is the default one
        name = page.locator("#campaign-dataset-form input[name=dataset_name]")
        expect(name).to_have_value("Ledger & 'run': successful episodes (agent turns)")
        page.check("#campaign-dataset-form input[name=turns][value=wm]")
        expect(name).to_have_value("Ledger & 'run': successful episodes (world-model turns)")
        page.select_option("#campaign-dataset-form select[name=which]", "all")
        expect(name).to_have_value("Ledger & 'run': every episode (world-model turns)")
        name.fill("My own name")
        page.check("#campaign-dataset-form input[name=turns][value=agent]")
        expect(name).to_have_value("My own name")  # typed by the person: kept

        # the failed episodes ("count", both arms) become a queue of their steps
        page.select_option("#campaign-queue-form select[name=which]", "failed")
        page.fill("#campaign-queue-form input[name=name]", "Ledger failures")
        page.click("#campaign-queue")
        page.wait_for_url(re.compile(r"/queues/\d+/$"))
        queue = AnnotationQueue.objects.get(name="Ledger failures")
        failed = [s.trajectory_id for s in slots if s.task_id == "count"]
        expected = set(
            Step.objects.filter(
                branch__trajectory_id__in=failed, branch__parent__isnull=True
            ).values_list("pk", flat=True)
        )
        assert (
            set(QueueItem.objects.filter(queue=queue).values_list("step_id", flat=True)) == expected
        )
        assert len(expected) == 8  # a read and a submit in each of the 4 episodes
        shot(page, "campaign-queue")

        # the project's campaigns list it, done, with its episodes counted
        page.goto(f"{live_server.url}/projects/{project.pk}/campaigns/")
        row = page.locator(f"#campaign-list tr[data-campaign='{campaign.pk}']")
        expect(row).to_contain_text("Ledger & 'run'")
        expect(row).to_contain_text("Done")
        expect(row.locator("td.played")).to_have_text("8 of 8")
        shot(page, "campaign-list")

        # one click judges the campaign's simulated steps (the world model's observations)
        page.goto(f"{live_server.url}/campaigns/{campaign.pk}/")
        page.click("#campaign-judge")
        page.wait_for_url(re.compile(r"/judge-jobs/\d+/$"))
        page.locator("#judge-status.status-succeeded").wait_for(timeout=60_000)
        job = JudgeJob.objects.get()
        assert job.target == "campaign" and job.campaign_id == campaign.pk
        assert job.steps_judged == 8 and job.steps_failed == 0  # one read in each episode
        campaign.refresh_from_db()
        assert campaign.judge_job_id == job.pk
        # the judge scored the "count" episodes' reads 2: a queue of the low scores has them
        page.goto(f"{live_server.url}/campaigns/{campaign.pk}/")
        expect(page.locator("#campaign-judge-form")).to_contain_text(f"judge job #{job.pk}")
        page.select_option("#campaign-queue-form select[name=which]", "low_judge")
        page.fill("#campaign-queue-form input[name=below]", "3")
        page.fill("#campaign-queue-form input[name=name]", "Ledger low scores")
        page.click("#campaign-queue")
        page.wait_for_url(re.compile(r"/queues/\d+/$"))
        low = AnnotationQueue.objects.get(name="Ledger low scores")
        assert (
            set(QueueItem.objects.filter(queue=low).values_list("step_id", flat=True)) == expected
        )
