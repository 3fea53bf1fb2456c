"""Browser tests of the whole path a person takes: log in, find the project, upload a file
through the form (a real worker imports it), open the trajectory and page through it; and
the demo data of all seven domains rendered by their renderers."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from studio.models import DOMAINS, Project, Trajectory
from tests.support.browser import DialogWatch, current_step, shot, step_indices, write_native_file

pytestmark = pytest.mark.browser

STEPS = 60


@pytest.mark.worker
def test_upload_import_then_page_through_the_trajectory(
    transactional_db, project, page, login, live_server, tmp_path, default_worker
):
    title = "Browser upload: sixty log counts"
    upload = write_native_file(tmp_path / "sixty-steps.json", title=title, steps=STEPS)
    dialogs = DialogWatch(page)
    login(page, "researcher")
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    page.get_by_role("link", name="Test project", exact=True).click()
    page.wait_for_url(re.compile(rf"/projects/{project.pk}/$"))
    expect(page.locator("h1")).to_have_text("Test project")
    page.get_by_role("link", name="Import trajectories").click()
    page.set_input_files("input[name=file]", str(upload))
    page.get_by_role("button", name="Upload and import").click()
    finished = page.locator(".import-job[data-status=succeeded], .import-job[data-status=failed]")
    finished.wait_for(timeout=90_000)
    assert finished.get_attribute("data-status") == "succeeded", finished.inner_text()
    result = " ".join(page.locator(".import-result").inner_text().split())
    assert f"Imported 1 trajectory with {STEPS} steps" in result
    shot(page, "upload-finished")

    page.get_by_role("link", name="Open the library").click()
    page.get_by_role("link", name=title).click()
    page.wait_for_url(re.compile(r"/trajectories/\d+/$"))
    trajectory_url = page.url
    page.locator("#step-0").wait_for()
    first_window = step_indices(page)
    assert first_window == list(range(len(first_window)))
    assert 0 < len(first_window) < STEPS, "the page should not render every step at once"

    # Scrolling to the end of the timeline loads the following steps, window by window.
    while page.locator("#steps .steps-next").count():
        last = max(step_indices(page))
        page.locator("#steps .steps-next").scroll_into_view_if_needed()
        page.locator(f"#step-{last + 1}").wait_for(state="attached")
    assert step_indices(page) == list(range(STEPS))
    expect(page.locator(f"#step-{STEPS - 1}")).to_contain_text(f"marker-of-step-{STEPS - 1}")

    # Jump to a step that is not loaded on a fresh page.
    page.goto(trajectory_url)
    page.locator("#step-0").wait_for()
    assert 47 not in step_indices(page)
    page.fill("#jump-input", "47")
    page.press("#jump-input", "Enter")
    page.locator("#step-47.current").wait_for()
    expect(page.locator("#step-47")).to_be_in_viewport()
    expect(page.locator("#step-47")).to_contain_text("marker-of-step-47")
    assert "step=47" in page.url
    shot(page, "jumped-to-47")

    # j and k move the highlighted step.
    page.keyboard.press("j")
    page.locator("#step-48.current").wait_for()
    page.keyboard.press("k")
    page.keyboard.press("k")
    page.locator("#step-46.current").wait_for()
    assert current_step(page) == 46
    expect(page.locator("#step-46")).to_be_in_viewport()

    # A link to a step opens the page at that step.
    page.goto(f"{trajectory_url}?step=33")
    page.locator("#step-33.current").wait_for()
    expect(page.locator("#step-33")).to_be_in_viewport()
    page.keyboard.press("j")
    page.locator("#step-34.current").wait_for()
    assert dialogs.messages == []


# A selector per domain that only its renderer produces from the demo observations.
DOMAIN_PROBES = {
    "mcp": [".action-call .tool-name", ".render-json"],
    "search": [".render-search .search-card .sc-title"],
    "terminal": [".render-terminal pre.term span[class*='ansi-']"],
    "swe": [".render-diff", ".render-terminal span[class*='ansi-']"],
    "android": [".render-android .ui-list .ui-el"],
    "web": [".render-html iframe.html-frame", ".render-ax_tree .ax-tree"],
    "os": [".render-terminal pre.term"],
}


def test_demo_data_opens_with_all_seven_domains(
    transactional_db, page, login_with_form, live_server
):
    call_command("load_demo", stdout=StringIO())
    demo = Project.objects.get(name="Demo")
    dialogs = DialogWatch(page)
    login_with_form(page, "researcher", "demo-password")  # the demo's own login, by the form
    page.get_by_role("link", name="Demo", exact=True).click()
    page.wait_for_url(re.compile(rf"/projects/{demo.pk}/$"))
    total = Trajectory.objects.filter(project=demo).count()
    expect(page.locator("td.t-title a")).to_have_count(total)
    shot(page, "demo-library")

    assert sorted(DOMAIN_PROBES) == sorted(DOMAINS)
    for domain, selectors in DOMAIN_PROBES.items():
        trajectory = Trajectory.objects.filter(project=demo, domain=domain).order_by("pk").first()
        assert trajectory is not None, f"no demo trajectory for {domain}"
        page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
        page.locator("#step-0").wait_for()
        expect(page.locator("h1")).to_have_text(trajectory.title)
        assert step_indices(page) == list(range(trajectory.step_count))
        for selector in selectors:
            page.locator(selector).first.wait_for(state="attached")
        shot(page, f"demo-{domain}")
        if domain == "web":
            frames = page.locator("iframe.html-frame")
            assert frames.count() >= 1
            for i in range(frames.count()):
                # sandbox present and empty: no scripts, no same-origin access
                assert frames.nth(i).get_attribute("sandbox") == ""
    assert dialogs.messages == []
