"""The trajectory page of an episode shows its rewards as recorded: in the header the task
id, seed, status, end cause in words, final reward, total and the episode rubric's breakdown
with the judge's errors (Trajectory.metadata["episode"]); on each step its reward, rubric
breakdown, reported state, submitted answer, end cause and seed (Step.meta). A step without
a reward shows none, and text from the metadata is escaped."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from studio.models import Branch, Step, Trajectory
from studio.presenters.episode_rewards import cause_words, figure
from tests.support.jobs import make_trajectory

ANSWER = "<b>refunded</b> & emailed"
JUDGE_ERROR = "judge model 'grader' gave no score: <timeout>"


class _Texts(HTMLParser):
    """The text inside each element that has an id (nested ones included), whitespace folded."""

    VOID = {"br", "hr", "img", "input", "meta", "link", "source", "wbr", "col", "area"}
    BLOCKS = {"div", "p", "li", "tr", "td", "th", "table", "summary", "details"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str | None] = []
        self.texts: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCKS:
            self.handle_data(" ")  # a cell or block ends a word, as a browser shows it
        if tag in self.VOID:
            return
        element_id = dict(attrs).get("id")
        self.open.append(element_id)
        if element_id:
            self.texts.setdefault(element_id, "")

    def handle_endtag(self, tag):
        if tag in self.BLOCKS:
            self.handle_data(" ")
        if tag not in self.VOID and self.open:
            self.open.pop()

    def handle_data(self, data):
        for element_id in self.open:
            if element_id:
                self.texts[element_id] += data


def texts_by_id(html: str) -> dict[str, str]:
    parser = _Texts()
    parser.feed(html)
    return {key: " ".join(value.split()) for key, value in parser.texts.items()}


def _episode(project, *, episode: dict, metas: list[dict]) -> Trajectory:
    trajectory = Trajectory.objects.create(
        project=project,
        domain="terminal",
        title="Refund order 1042",
        task_instruction="Refund order 1042",
        source_format="episode",
        source_key=f"episode-{episode.get('seed')}",
        step_count=len(metas),
        metadata={"episode": episode},
    )
    root = Branch.objects.create(trajectory=trajectory, name="episode")
    Step.objects.bulk_create(
        Step(branch=root, index=i, action=f"action {i}", observation=f"observation {i}", meta=meta)
        for i, meta in enumerate(metas)
    )
    return trajectory


SUBMITTED = {
    "token": "trainer",
    "client": "http",
    "max_steps": 20,
    "seed": 4242,
    "task_id": "refund-order",
    "status": "done",
    "end": {
        "cause": "submit",
        "step": 2,
        "reward": 0.75,
        "total": 1.25,
        "breakdown": {"answer-exact": 1.0, "judge-helpful": None},
        "errors": {"judge-helpful": JUDGE_ERROR},
    },
    "return": 1.25,
}
STEP_METAS = [
    {
        "seed": 111,
        "reward": 0.5,
        "rubric": {"refund-shown": 1.0, "no-error": 0.0},
        "state": {"order_refunded": False, "emails_sent": 0, "note": None},
        "end_cause": None,
    },
    {"seed": 222, "reward": None, "rubric": {}, "end_cause": None},
    {
        "seed": 333,
        "reward": 0.75,
        "rubric": {},
        "end_cause": "submit",
        "submit": True,
        "final_answer": ANSWER,
        "rubric_errors": {"judge-helpful": JUDGE_ERROR},
    },
]


@pytest.mark.django_db
def test_an_ended_episode_shows_its_end_reward_total_and_rubric_as_recorded(
    researcher_client, project
):
    trajectory = _episode(project, episode=SUBMITTED, metas=STEP_METAS)
    response = researcher_client.get(reverse("trajectory", args=[trajectory.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    shown = texts_by_id(html)

    assert shown["episode-task-id"] == "Task id refund-order"
    assert shown["episode-seed"] == "Seed 4242"
    assert shown["episode-status"] == "episode done"
    assert shown["episode-end"] == "ended: the agent submitted at step 2"
    assert shown["episode-reward"] == "Final reward 0.75"
    assert shown["episode-total"] == "Total (return) 1.25"
    # the episode rubric: each check's score, a judge that gave none says so (not 0)
    assert shown["episode-breakdown"] == (
        "Check at the end Score answer-exact 1.0 judge-helpful no score"
    )
    assert shown["episode-errors"] == f"judge-helpful: {JUDGE_ERROR}"
    assert "&lt;timeout&gt;" in html and "<timeout>" not in html

    first = shown["step-0-rewards"]
    assert first.startswith("reward 0.5 seed 111")
    assert "Check Score no-error 0.0 refund-shown 1.0" in first  # by name
    # the state as reported: JSON values, an unreported (null) key said to be so
    assert "State Value emails_sent 0 note not reported order_refunded false" in first
    assert "ended" not in first and "Submitted" not in first

    # a step whose reward is null shows no reward (and no zero), only its seed
    assert shown["step-1-rewards"] == "seed 222"

    last = shown["step-2-rewards"]
    assert last.startswith("reward 0.75 ended: the agent submitted seed 333")
    assert f"Submitted: {ANSWER}" in last
    assert f"judge-helpful: {JUDGE_ERROR}" in last
    # the final answer is text: its markup escaped, never rendered
    assert "&lt;b&gt;refunded&lt;/b&gt; &amp; emailed" in html
    assert "<b>refunded</b>" not in html


@pytest.mark.django_db
def test_the_end_cause_is_said_in_words_and_a_running_episode_shows_no_end(
    researcher_client, project
):
    at_limit = _episode(
        project,
        episode={
            "seed": 7,
            "task_id": "",
            "max_steps": 20,
            "status": "done",
            "end": {"cause": "max_steps", "step": 19, "reward": None, "total": 0.0},
            "return": 0.0,
        },
        metas=[{"seed": 1, "reward": None, "rubric": {}, "end_cause": "max_steps"}],
    )
    shown = texts_by_id(
        researcher_client.get(reverse("trajectory", args=[at_limit.pk])).content.decode()
    )
    assert shown["episode-end"] == "ended: max steps (20) at step 19"
    assert "episode-task-id" not in shown  # no task id recorded: none shown
    assert "episode-reward" not in shown  # a null final reward: no figure
    assert shown["episode-total"] == "Total (return) 0.0"
    assert shown["step-0-rewards"] == "ended: max steps (20) seed 1"

    running = _episode(
        project,
        episode={"seed": 9, "task_id": "t", "max_steps": 5, "status": "running", "return": None},
        metas=[{"seed": 3, "reward": None, "rubric": {}, "end_cause": None}],
    )
    shown = texts_by_id(
        researcher_client.get(reverse("trajectory", args=[running.pk])).content.decode()
    )
    assert shown["episode-status"] == "episode running"
    assert "episode-end" not in shown and "episode-total" not in shown
    assert "episode-breakdown" not in shown

    assert cause_words("terminal") == "ended: terminal condition"
    assert cause_words("cancelled") == "ended in the studio"
    assert cause_words(None) is None
    assert figure(None) is None and figure(0.0) == "0.0" and figure(1 / 3) == "0.3333"


@pytest.mark.django_db
def test_a_trajectory_that_is_no_episode_shows_no_rewards(researcher_client, project):
    imported = make_trajectory(project)
    Step.objects.filter(branch__trajectory=imported).update(meta={"reward": 1.0, "seed": 5})
    html = researcher_client.get(reverse("trajectory", args=[imported.pk])).content.decode()
    assert 'id="episode-summary"' not in html
    assert not re.search(r'id="step-\d+-rewards"', html)


@pytest.mark.django_db
def test_a_window_of_steps_loaded_later_shows_their_rewards(researcher_client, project, settings):
    settings.STUDIO_STEPS_PER_WINDOW = 2
    trajectory = _episode(project, episode=SUBMITTED, metas=STEP_METAS)
    url = reverse("trajectory_steps", args=[trajectory.pk])
    shown = texts_by_id(researcher_client.get(url, {"start": 2, "dir": "down"}).content.decode())
    assert shown["step-2-rewards"].startswith("reward 0.75 ended: the agent submitted seed 333")
