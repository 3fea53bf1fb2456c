"""A world's page in headless Chromium against a live server: episodes that end while the
page is open appear on its charts, counts, latest-episodes table and token filter without a
reload (a ticked episode stays ticked), a click on a point opens that episode, and a box
selection on a chart becomes an annotation queue of those episodes."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from inference.worlds import parse_world
from studio.models import AnnotationQueue
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.browser import DialogWatch, shot
from tests.test_world_episodes import LOSS, RELAY, WIN, play

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def points(page, chart: str) -> int:
    return int(page.get_attribute(f"#chart-{chart}", "data-points") or -1)


def test_episodes_arrive_live_a_click_opens_one_and_a_selection_makes_a_queue(
    page, live_server, login, project
):
    world = save_world(project, parse_world(RELAY)).world
    trainer, _ = create_token(project, "grpo run 7")
    evaluator, _ = create_token(project, "nightly eval")
    first = play(trainer, world, breakdown=WIN, total=2.0)
    play(trainer, world, breakdown=LOSS, total=0.0)
    watch = DialogWatch(page)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/worlds/")
    page.click(f"#world-page-{world.pk}")
    page.wait_for_url(re.compile(rf"/worlds/{world.pk}/$"))
    page.wait_for_selector("#chart-steps[data-points='2']", state="attached")
    assert page.inner_text("#count-episodes") == "2"
    assert page.locator("#world-table tbody tr").count() == 2
    page.evaluate("window.__sameDocument = true")
    page.check(f"#world-table .episode-pick[value='{first.pk}']")
    expect(page.locator("#selection-n")).to_have_text("1")
    assert "1 episode selected" in page.inner_text("#selection-count")

    # episodes end while the page is open: the charts, counts and table follow, no reload
    later = play(trainer, world, breakdown=WIN, total=2.0)
    play(evaluator, world, client="websocket", breakdown=WIN, total=2.0)
    running = play(evaluator, world, client="websocket", status="running", steps=1)
    fresh, _ = create_token(project, "fresh run")  # made while the page is open
    page.wait_for_selector("#chart-steps[data-points='4']", state="attached", timeout=20_000)
    assert page.evaluate("window.__sameDocument === true")
    expect(page.locator("#count-episodes")).to_have_text("5")
    assert page.inner_text("#count-running") == "1"
    assert page.inner_text("#count-done") == "4"
    assert "3 of 4 scored" in page.inner_text("#world-counts")
    assert points(page, "reward") == 4
    expect(page.locator("#world-table tbody tr")).to_have_count(5)
    assert page.get_attribute("#world-table tbody tr", "id") == f"episode-row-{running.pk}"
    assert page.is_visible(f"#episode-row-{later.pk}")
    assert page.is_checked(f"#world-table .episode-pick[value='{first.pk}']")  # still ticked
    assert not page.is_checked(f"#world-table .episode-pick[value='{later.pk}']")
    assert page.inner_text("#selection-n") == "1"
    tokens = page.eval_on_selector_all("#world-token-filter option", "os => os.map(o => o.text)")
    assert {"grpo run 7", "nightly eval", "fresh run"} <= set(tokens)
    shot(page, "world-episodes-live")
    page.uncheck(f"#world-table .episode-pick[value='{first.pk}']")
    expect(page.locator("#selection-n")).to_have_text("0")

    # grouped by token by default: a training run is one token; by client on asking
    legend = page.locator("#chart-reward .legend").first.text_content() or ""
    assert "grpo run 7" in legend and "nightly eval" in legend
    page.check("input[name=group][value=client]")
    page.click("#world-filters-apply")
    page.wait_for_selector("#chart-steps[data-points='4']", state="attached")
    legend = page.locator("#chart-reward .legend").first.text_content() or ""
    assert "WebSocket" in legend and "grpo run 7" not in legend

    # a click on a point opens its episode
    page.locator("#chart-steps").scroll_into_view_if_needed()
    point = page.locator("#chart-steps .scatterlayer .point").first
    box = point.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2 - 3, box["y"] + box["height"] / 2)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#chart-steps .hoverlayer .hovertext", state="attached")
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"/trajectories/\d+/$"))
    opened = int(re.search(r"/trajectories/(\d+)/$", page.url).group(1))
    assert opened in set(world_episode_ids(project, world))
    page.go_back()
    page.wait_for_selector("#chart-steps[data-points='4']", state="attached")

    # a box over the whole steps chart selects its four episodes; they become a queue
    page.locator("#chart-steps").scroll_into_view_if_needed()
    area = page.locator("#chart-steps .nsewdrag").first.bounding_box()
    assert area is not None
    page.mouse.move(area["x"] + 2, area["y"] + 2)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] / 2, area["y"] + area["height"] / 2, steps=5)
    page.mouse.move(area["x"] + area["width"] - 2, area["y"] + area["height"] - 2, steps=5)
    page.mouse.up()
    expect(page.locator("#selection-n")).to_have_text("4")
    assert page.is_enabled("#selection-queue")
    shot(page, "world-episodes-selected")
    page.fill("#selection-queue-name", "Picked on the chart")
    page.click("#selection-queue")
    page.wait_for_url(re.compile(r"/queues/\d+/$"))
    queue = AnnotationQueue.objects.get(project=project, name="Picked on the chart")
    trajectories = set(queue.items.values_list("step__branch__trajectory_id", flat=True))
    assert len(trajectories) == 4 and first.pk in trajectories
    assert "made of the steps of 4 episodes" in page.inner_text(".messages")
    assert not watch.messages
    assert not errors, errors


def world_episode_ids(project, world) -> list[int]:
    from studio.services.world_episodes import episodes_of

    return list(episodes_of(world).values_list("pk", flat=True))


def test_a_running_episodes_page_shows_its_steps_as_they_arrive(
    page, live_server, login, project, settings
):
    from studio.models import ObservationSource, Step, Trajectory
    from tests.support.browser import step_indices

    settings.STUDIO_STEPS_PER_WINDOW = 3  # steps arrive into a window and past it
    world = save_world(project, parse_world(RELAY)).world
    trainer, _ = create_token(project, "grpo run 7")
    episode = play(trainer, world, status="running", steps=2)
    root = episode.root_branch
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{episode.pk}/")
    page.wait_for_selector("#episode-live", state="attached")
    assert step_indices(page) == [0, 1]
    page.evaluate("window.__sameDocument = true")

    def take_step(i: int) -> None:
        Step.objects.create(
            branch=root,
            index=i,
            action=f'{{"name": "look", "arguments": {{"i": {i}}}}}',
            observation=f"arrived step {i}",
            observation_source=ObservationSource.SIMULATED,
        )
        Trajectory.objects.filter(pk=episode.pk).update(step_count=i + 1)

    for i in (2, 3, 4):
        take_step(i)
    page.wait_for_selector("#step-4", state="attached", timeout=20_000)
    assert step_indices(page) == [0, 1, 2, 3, 4]  # each once, in order
    assert "arrived step 4" in page.inner_text("#step-4")
    expect(page.locator("#branch-step-count")).to_have_text("5 steps on this branch")
    windows = page.eval_on_selector_all(
        "#steps .step-window", "els => els.map(e => [e.dataset.start, e.dataset.end])"
    )
    assert windows == [["0", "2"], ["3", "4"]]  # the page's own windows, extended
    shot(page, "episode-live-steps")

    # the episode ends: its header says so, its End button goes, polling stops
    take_step(5)
    episode.refresh_from_db()
    meta = dict(episode.metadata)
    meta["episode"] = {
        **meta["episode"],
        "status": "done",
        "return": 2.0,
        "end": {"cause": "submit", "step": 5, "reward": 2.0, "total": 2.0, "breakdown": WIN},
    }
    Trajectory.objects.filter(pk=episode.pk).update(metadata=meta)
    expect(page.locator("#episode-status")).to_have_text("episode done", timeout=20_000)
    assert step_indices(page) == [0, 1, 2, 3, 4, 5]
    assert page.locator("#end-episode").count() == 0
    assert "2.0" in page.inner_text("#episode-reward")
    assert page.evaluate("window.__sameDocument === true")
    page.reload()
    assert step_indices(page) == [0, 1, 2]  # as a fresh page: its first window, ended, no poller
    assert page.locator("#episode-live").count() == 0
    assert not errors, errors
