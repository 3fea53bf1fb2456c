"""The library and trajectory pages in headless Chromium: htmx search, lazy step loading,
j/k navigation, jump to step, and no script payload ever running."""

from __future__ import annotations

import json

import pytest

from studio.views.trajectories import STEPS_PER_PAGE
from tests.support.ui import make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_library_search_updates_results_and_url(page, login, live_server, project):
    make_trajectory(
        project, title="Deploy the web app", steps=[("kubectl apply", "deployment created")]
    )
    make_trajectory(project, title="Fix the flaky test", steps=[("pytest -x", "1 failed")])
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    assert page.locator(".lib-table tbody tr").count() == 2
    page.fill("#id_q", "deployment")
    page.wait_for_url(lambda url: "q=deployment" in url)
    page.wait_for_function("() => document.querySelectorAll('.lib-table tbody tr').length === 1")
    assert page.locator(".t-title a").inner_text() == "Deploy the web app"
    page.select_option("#id_sort", "title")
    page.wait_for_url(lambda url: "sort=title" in url)
    page.click(".t-title a")
    page.wait_for_selector("#step-0")
    assert page.locator("h1.traj-title").inner_text() == "Deploy the web app"


def test_steps_load_lazily_and_keyboard_navigation(page, login, live_server, project):
    total = STEPS_PER_PAGE * 2 + 10
    traj = make_trajectory(project, title="Long run", n_steps=total)
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    assert page.locator("#steps .step").count() == STEPS_PER_PAGE
    # scrolling to the end reveals the sentinel, which loads the next windows
    scroll_to_the_end(page)
    assert page.locator("#steps .step").count() == total
    assert page.locator("#steps .steps-next").count() == 0

    page.evaluate("window.scrollTo(0, 0)")
    page.keyboard.press("j")
    assert page.locator("#steps .step.current").get_attribute("id") == "step-0"
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.locator("#steps .step.current").get_attribute("id") == "step-1"


def test_jump_to_a_step_not_loaded_yet(page, login, live_server, project):
    total = STEPS_PER_PAGE * 4
    traj = make_trajectory(project, title="Jump", n_steps=total)
    target = STEPS_PER_PAGE * 3 + 2
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    page.keyboard.press("g")
    assert page.evaluate("document.activeElement.id") == "jump-input"
    page.keyboard.type(str(target))
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#step-{target}.current")
    assert page.locator(f"#step-{target}").is_visible()
    assert page.locator("#step-0").count() == 0  # the window was replaced, not all loaded
    assert f"step={target}" in page.url
    # j continues from there
    page.keyboard.press("j")
    assert page.locator("#steps .step.current").get_attribute("id") == f"step-{target + 1}"
    # and the steps above can be brought back
    page.click("#steps .steps-prev button")
    page.wait_for_selector(f"#step-{STEPS_PER_PAGE * 2}")


def test_script_payloads_never_run(page, login, live_server, project):
    hook = "window.__xss = (window.__xss || 0) + 1"
    payloads = [
        f"<script>{hook}</script>",
        f'<img src=x onerror="{hook}">',
        f'"><svg onload="{hook}">',
    ]
    steps = []
    for p in payloads:
        steps += [
            (
                json.dumps({"name": p, "arguments": {"q": p}}),
                json.dumps({"result": p, "items": [p]}),
            ),
            (
                f"Thought: {p}\nAction: click",
                f"<html><body>{p}<script>parent.{hook}</script></body></html>",
            ),
            ("echo", f"\x1b[31m{p}\x1b[0m\n" * 60),
            ("search", json.dumps([{"title": p, "url": "javascript:" + hook, "snippet": p}])),
        ]
    steps.append(("cat big", payloads[1] + "\n" + "z" * 40_000))
    traj = make_trajectory(
        project,
        title=payloads[0],
        domain="web",
        steps=steps,
        task_instruction=payloads[1],
        system_prompt=payloads[2],
        tools=[{"name": payloads[1]}],
        metadata={"note": payloads[0]},
        tags=["<b>tag</b>"],
    )
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.fill("#id_q", "onerror")
    page.wait_for_url(lambda url: "q=onerror" in url)
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    page.wait_for_selector("#step-0")
    # open every fold, expand the preview, and show HTML sources
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    page.click("text=Load full observation")
    page.wait_for_function("() => !document.querySelector('.render-preview')")
    page.wait_for_load_state("networkidle")  # broken images have failed: handlers had a chance
    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    assert page.locator("h1.traj-title").inner_text() == payloads[0]
    assert page.locator("iframe.html-frame").count() == len(payloads)
    for frame in page.locator("iframe.html-frame").all():
        assert frame.get_attribute("sandbox") == ""


def scroll_to_the_end(page) -> None:
    """Scroll down until the last window is in: each scroll shows the sentinel below the
    steps, which loads the next window; wait for each window, never for a fixed time."""
    while page.locator("#steps .steps-next").count():
        shown = page.locator("#steps .step").count()
        page.locator("#steps .step").last.scroll_into_view_if_needed()
        page.mouse.wheel(0, 5000)
        page.wait_for_function(
            "n => document.querySelectorAll('#steps .step').length > n", arg=shown
        )


def _step_indexes(page) -> list[int]:
    return page.eval_on_selector_all(
        "#steps .step", "els => els.map(e => parseInt(e.dataset.index, 10))"
    )


def test_lazy_windows_in_either_direction_never_repeat_steps(page, login, live_server, project):
    """A window loaded below the shown ones brings no "load earlier" button (it would load
    steps already shown), and one loaded above brings no sentinel for the steps below."""
    total = STEPS_PER_PAGE * 4
    traj = make_trajectory(project, title="Both ways", n_steps=total)
    login(page, "researcher")
    # down: scroll through the whole branch from the top
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/")
    scroll_to_the_end(page)
    assert _step_indexes(page) == list(range(total))
    assert page.locator("#steps .steps-prev").count() == 0

    # up: open the last window, then load the earlier ones one after another
    target = total - 2
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/?step={target}")
    page.wait_for_selector(f"#step-{target}.current")
    for _ in range(3):
        shown = page.locator("#steps .step").count()
        page.click("#steps .steps-prev button")
        page.wait_for_function(
            "n => document.querySelectorAll('#steps .step').length > n", arg=shown
        )
        page.wait_for_load_state("networkidle")  # a (wrong) sentinel below would fire now
    page.wait_for_selector("#step-0")
    assert _step_indexes(page) == list(range(total))
    assert page.locator("#steps .steps-next").count() == 0


def test_a_step_anchor_outside_the_first_window_opens_that_step(page, login, live_server, project):
    """The step numbers are `#step-N` anchors; a link to one that is not in the first window
    loads the window holding it rather than leaving the reader at step 0."""
    total = STEPS_PER_PAGE * 3
    traj = make_trajectory(project, title="Anchors", n_steps=total)
    target = STEPS_PER_PAGE * 2 + 4
    login(page, "researcher")
    page.goto(f"{live_server.url}/trajectories/{traj.pk}/#step-{target}")
    page.wait_for_selector(f"#step-{target}.current")
    assert page.locator(f"#step-{target}").is_visible()
