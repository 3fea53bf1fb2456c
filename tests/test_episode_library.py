"""Episodes in the library: filtered by world, client, token, state and reward (what
Trajectory.metadata["episode"] records), the ones without steps hidden and counted, swept
once old, and ended from their trajectory page by a researcher or an admin."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inference.worlds import parse_world
from studio.jobs import sweeper
from studio.models import McpSession, Step, Trajectory
from studio.services import episode_library, episodes, mcp_sessions
from studio.services.tokens import create_token
from studio.services.worlds import save_world

SHELL = {
    "name": "Tiny shell",
    "domain": "terminal",
    "description": "A shell.",
    "initial_state": "$",
}
DESK = {"name": "Weather desk", "domain": "mcp", "description": "Weather.", "initial_state": "{}"}


def _episode(token, world, *, client="http", steps=1, status=None, reward=None, total=None):
    """An episode as the episode API records it, with `steps` steps taken."""
    trajectory, _ = episodes.reset(token, world, client=client)
    root = trajectory.root_branch
    for i in range(steps):
        Step.objects.create(branch=root, index=i, action=f"a{i}", observation=f"o{i}")
    meta = dict(trajectory.metadata)
    episode = dict(meta["episode"])
    if status is not None:
        episode["status"] = status
    episode["return"] = reward
    if total is not None or status == "done":
        episode["end"] = {"cause": "submit", "step": steps - 1, "reward": total, "total": total}
    meta["episode"] = episode
    Trajectory.objects.filter(pk=trajectory.pk).update(metadata=meta, step_count=steps)
    return Trajectory.objects.get(pk=trajectory.pk)


def _rows(response) -> set[int]:
    return {int(pk) for pk in re.findall(r'id="traj-row-(\d+)"', response.content.decode())}


@pytest.fixture
def served(project):
    shell = save_world(project, parse_world(SHELL)).world
    desk = save_world(project, parse_world(DESK)).world
    trainer, _ = create_token(project, "trainer")
    other, _ = create_token(project, "other")
    return shell, desk, trainer, other


@pytest.mark.django_db
def test_the_library_filters_episodes_by_world_client_token_state_and_reward(
    researcher_client, project, served
):
    shell, desk, trainer, other = served
    running = _episode(trainer, shell, client="http", reward=0.25)
    done = _episode(trainer, shell, client="websocket", status="done", reward=0.5, total=1.0)
    mcp = _episode(other, desk, client="mcp", status="cancelled", reward=None)
    url = reverse("library", args=[project.pk])

    def shown(**query) -> set[int]:
        response = researcher_client.get(url, query)
        assert response.status_code == 200, response.content.decode()[:500]
        return _rows(response)

    everything = shown()
    assert {running.pk, done.pk, mcp.pk} <= everything
    assert shown(world=desk.pk) == {mcp.pk}
    assert shown(world=shell.pk) == {running.pk, done.pk}
    assert shown(client="websocket") == {done.pk}
    assert shown(client="mcp") == {mcp.pk}
    assert shown(token=other.pk) == {mcp.pk}
    assert shown(token=trainer.pk) == {running.pk, done.pk}
    assert shown(state="running") == {running.pk}
    assert shown(state="done") == {done.pk}
    assert shown(state="cancelled") == {mcp.pk}
    # the reward of an ended episode is its end's total, else its running return
    assert shown(reward_min="0.9") == {done.pk}
    assert shown(reward_max="0.3") == {running.pk}
    assert shown(reward_min="0.2", reward_max="0.3") == {running.pk}
    assert shown(reward_min="0", state="cancelled") == set()  # no reward is no match
    # a recorded trajectory is no episode: an episode filter leaves it out
    assert shown(client="http", world=shell.pk) == {running.pk}
    page = researcher_client.get(url, {"state": "done"}).content.decode()
    assert f'id="episode-{done.pk}"' in page and "total reward 1" in page and "websocket" in page
    bad = researcher_client.get(url, {"reward_min": "2", "reward_max": "1"})
    assert bad.status_code == 400 and "must be at least the lower bound (2)" in bad.content.decode()


@pytest.mark.django_db
def test_episodes_without_steps_are_hidden_and_counted(researcher_client, project, served):
    shell, _, trainer, _ = served
    played = _episode(trainer, shell, steps=2)
    empty = [_episode(trainer, shell, steps=0) for _ in range(3)]
    url = reverse("library", args=[project.pk])
    page = researcher_client.get(url)
    text = page.content.decode()
    assert _rows(page) & {played.pk, *(e.pk for e in empty)} == {played.pk}
    assert "3 episodes without steps hidden" in text
    shown = researcher_client.get(url, {"empty": "on"})
    assert {played.pk, *(e.pk for e in empty)} <= _rows(shown)
    assert "without steps hidden" not in shown.content.decode()
    # a filter counts only the hidden episodes it would show
    filtered = researcher_client.get(url, {"client": "websocket"}).content.decode()
    assert "without steps hidden" not in filtered


@pytest.mark.django_db
def test_the_sweeper_deletes_old_episodes_that_took_no_step(project, served, settings):
    shell, _, trainer, _ = served
    settings.STUDIO_EMPTY_EPISODE_TTL_S = 3600
    old_empty = _episode(trainer, shell, steps=0)
    old_played = _episode(trainer, shell, steps=1)
    young_empty = _episode(trainer, shell, steps=0)
    long_ago = timezone.now() - timedelta(seconds=3700)
    Trajectory.objects.filter(pk__in=[old_empty.pk, old_played.pk]).update(created_at=long_ago)
    # an MCP session whose episode is swept goes on (its next call starts a new episode)
    session = McpSession.objects.get(session_id=mcp_sessions.open_session(trainer))
    McpSession.objects.filter(pk=session.pk).update(trajectory=old_empty)
    assert episode_library.sweep_empty_episodes(force=True) == 1
    left = set(Trajectory.objects.values_list("pk", flat=True))
    assert old_empty.pk not in left and {old_played.pk, young_empty.pk} <= left
    session.refresh_from_db()
    assert session.trajectory_id is None
    assert episode_library.sweep_empty_episodes() == 0  # gated: not again within the minute


@pytest.mark.django_db
def test_every_sweep_of_the_workers_sweeps_empty_episodes(monkeypatch):
    """The workers' timer (`sweeper.sweep`) runs the episodes' sweep (itself once a minute)."""
    calls = []
    monkeypatch.setattr(sweeper, "sweep_empty_episodes", lambda: calls.append(1))
    monkeypatch.setattr(sweeper.connection, "close", lambda: None)  # the test's connection
    sweeper.sweep()
    assert calls == [1]


@pytest.mark.django_db
def test_an_idle_mcp_session_is_swept_but_its_episode_stays(project, served):
    shell, _, trainer, _ = served
    played = _episode(trainer, shell, steps=1)
    session = McpSession.objects.get(session_id=mcp_sessions.open_session(trainer))
    McpSession.objects.filter(pk=session.pk).update(trajectory=played)
    idle = timezone.now() - timedelta(seconds=mcp_sessions.IDLE_SESSION_S + 10)
    McpSession.objects.filter(pk=session.pk).update(last_seen_at=idle)
    episode_library.sweep_empty_episodes(force=True)
    assert not McpSession.objects.exists()
    assert Trajectory.objects.filter(pk=played.pk).exists()


@pytest.mark.django_db
def test_a_researcher_ends_a_running_episode_an_annotator_cannot(client, project, served):
    shell, _, trainer, _ = served
    episode = _episode(trainer, shell, steps=2, reward=0.5)
    page_url = reverse("trajectory", args=[episode.pk])
    end_url = reverse("trajectory_end_episode", args=[episode.pk])
    client.force_login(project.users["annotator"])
    assert 'id="end-episode"' not in client.get(page_url).content.decode()
    assert client.post(end_url).status_code == 403
    episode.refresh_from_db()
    assert episode.metadata["episode"]["status"] == "running"
    client.force_login(project.users["researcher"])
    page = client.get(page_url).content.decode()
    assert 'id="end-episode"' in page and "episode running" in page
    ended = client.post(end_url, follow=True)
    text = ended.content.decode()
    assert "Ended the episode (cancelled)" in text and 'id="end-episode"' not in text
    episode.refresh_from_db()
    record = episode.metadata["episode"]
    assert record["status"] == "cancelled"
    assert record["end"] == {
        "cause": "cancelled", "step": 1, "reward": None, "total": 0.5, "breakdown": {},
    }  # fmt: skip
    again = client.post(end_url, follow=True).content.decode()
    assert "Not ended: this episode already ended (cancelled)." in again
    assert (
        client.get(reverse("library", args=[project.pk]), {"state": "cancelled"}).status_code == 200
    )


@pytest.mark.django_db
def test_only_an_episode_can_be_ended(researcher_client, project):
    from tests.support.jobs import make_trajectory

    recorded = make_trajectory(project)
    response = researcher_client.post(
        reverse("trajectory_end_episode", args=[recorded.pk]), follow=True
    )
    assert "Not ended: this trajectory is not an episode served to an agent." in (
        response.content.decode()
    )
