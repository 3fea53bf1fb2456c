"""Script payloads in every trajectory field, opened in a real browser: nothing runs, no
dialog opens, and the payload shows as text. Every domain gets an observation of every
renderer kind (JSON, search cards, ANSI terminal, diff, Android elements, HTML page,
accessibility tree, WebVoyager elements, plain text)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from studio.models import DOMAINS, Branch, Step, Tag, Trajectory
from tests.support.browser import DialogWatch, shot

pytestmark = pytest.mark.browser

SCRIPT = "<script>window.__xss='script';alert('xss-script')</script>"
IMG = "<img src=x onerror=\"window.__xss='img';alert('xss-img')\">"
SVG = "<svg onload=\"window.__xss='svg';alert('xss-svg')\"></svg>"
ATTR = "\" autofocus onfocus=\"window.__xss='attr';alert('xss-attr')\" x=\""
JS_URL = "javascript:window.__xss='href';alert('xss-href')"
PAYLOAD = f"{SCRIPT}{IMG}{SVG}{ATTR}"
TITLE = f"Title {SCRIPT}{IMG}"


def observations() -> list[tuple[str, str]]:
    """(label, observation) pairs, one per renderer kind, each carrying the payloads."""
    esc = "\x1b"
    return [
        ("json", json.dumps({"result": PAYLOAD, PAYLOAD: [IMG, {"k": SCRIPT}]})),
        (
            "search-json",
            json.dumps(
                {
                    "results": [
                        {"title": SCRIPT, "url": JS_URL, "snippet": IMG},
                        {"title": IMG, "url": "https://example.com/?q=<script>", "snippet": SVG},
                    ]
                }
            ),
        ),
        (
            "search-text",
            f'[1] {SCRIPT}\n    https://example.com/a"onmouseover=alert(1)\n    {IMG}\n',
        ),
        ("terminal", f"{esc}[31m{SCRIPT}{esc}[0m plain {IMG}\n{esc}[1;32m{SVG}{esc}[0m"),
        (
            "diff",
            f"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-{SCRIPT}\n"
            f"+{IMG}\n {SVG}",
        ),
        (
            "android",
            json.dumps(
                {
                    "ui_elements": [
                        {
                            "text": SCRIPT,
                            "content_description": IMG,
                            "class_name": f"android.widget.{SVG}",
                            "resource_name": ATTR,
                            "hint_text": PAYLOAD,
                            "is_clickable": True,
                        },
                        {"text": "OK", "class_name": "android.widget.Button"},
                    ]
                }
            ),
        ),
        (
            "html",
            "<!DOCTYPE html><html><body><h1>page</h1>"
            "<script>parent.__xss='frame';alert('xss-frame')</script>"
            "<img src=x onerror=\"parent.__xss='frame-img';alert('xss-frame-img')\">"
            f'<a href="{JS_URL}">link</a></body></html>',
        ),
        (
            "ax-tree",
            f'[1] RootWebArea "{SCRIPT}" [focused]\n  [2] link "{IMG}" [url="{JS_URL}"]\n'
            f'  [3] button "{SVG}"\n  [4] StaticText "{ATTR}"',
        ),
        ("web-elements", f'[0]: <a> "{SCRIPT}";\n[1]: <button> "{IMG}";\n[2]: <{SVG}> "x";'),
        ("text", PAYLOAD),
    ]


def make_payload_trajectory(project, domain: str) -> Trajectory:
    trajectory = Trajectory.objects.create(
        project=project,
        domain=domain,
        title=f"{TITLE} {domain}",
        task_instruction=f"Task {PAYLOAD}",
        system_prompt=f"System {PAYLOAD}",
        tools=[
            {
                "name": f"tool{SCRIPT}",
                "description": IMG,
                "inputSchema": {"type": "object", "properties": {SVG: {"type": "string"}}},
            }
        ],
        metadata={PAYLOAD: SCRIPT, "url": JS_URL},
        source_format=f"fmt{IMG}"[:40],
        source_file=f"file{SCRIPT}.json",
        source_key=f"xss-{domain}",
    )
    tag, _ = Tag.objects.get_or_create(project=project, name=f"tag{IMG}"[:100])
    trajectory.tags.add(tag)
    branch = Branch.objects.create(trajectory=trajectory, name=f"recorded{SCRIPT}"[:200])
    actions = [
        json.dumps({"name": f"call{SCRIPT}", "arguments": {"q": IMG, SVG: ATTR}}),
        f"echo '{PAYLOAD}'",
        PAYLOAD,
    ]
    steps = [
        Step(
            branch=branch,
            index=i,
            action=actions[i % len(actions)],
            observation=obs,
            state=f"state {PAYLOAD}",
            thinking=f"thinking {PAYLOAD}",
            meta={"tool_name": f"tool{IMG}", "label": label, PAYLOAD: JS_URL},
        )
        for i, (label, obs) in enumerate(observations())
    ]
    Step.objects.bulk_create(steps)
    trajectory.step_count = len(steps)
    trajectory.save(update_fields=["step_count"])
    return trajectory


def assert_nothing_ran(page, dialogs: DialogWatch) -> None:
    page.wait_for_load_state("networkidle")
    assert dialogs.messages == []
    assert page.evaluate("window.__xss") is None
    # No payload became markup in the studio's own document (frames are separate documents).
    injected = page.evaluate(
        """() => ({
            imgs: document.querySelectorAll('img[src="x"]').length,
            svgs: document.querySelectorAll('svg[onload]').length,
            handlers: document.querySelectorAll('[onerror],[onfocus],[onload],[onmouseover]').length,
            // data islands (json_script: type application/json) may hold the text, escaped
            scripts: [...document.scripts]
                .filter(s => !s.type || /javascript|module/i.test(s.type))
                .filter(s => s.textContent.includes('__xss')).length,
            dataIslands: [...document.scripts].filter(s => s.textContent.includes('</script'))
                .length,
            jsLinks: [...document.querySelectorAll('a[href]')]
                .filter(a => a.getAttribute('href').trim().toLowerCase().startsWith('javascript:'))
                .length,
        })"""
    )
    assert injected == {
        "imgs": 0,
        "svgs": 0,
        "handlers": 0,
        "scripts": 0,
        "dataIslands": 0,
        "jsLinks": 0,
    }
    for frame in page.locator("iframe").all():
        sandbox = frame.get_attribute("sandbox")
        assert sandbox is not None and "allow-scripts" not in sandbox


def test_script_payloads_in_every_field_never_run(
    transactional_db, project, page, login, live_server
):
    trajectories = {d: make_payload_trajectory(project, d) for d in DOMAINS}
    dialogs = DialogWatch(page)
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    expect(page.locator("td.t-title a").first).to_be_visible()
    assert_nothing_ran(page, dialogs)
    # The titles read as the literal text that was stored.
    titles = page.locator("td.t-title a").all_inner_texts()
    assert sorted(titles) == sorted(t.title for t in trajectories.values())
    page.goto(f"{live_server.url}/projects/{project.pk}/?q=script")
    assert_nothing_ran(page, dialogs)

    for domain, trajectory in trajectories.items():
        page.goto(f"{live_server.url}/trajectories/{trajectory.pk}/")
        page.locator(f"#step-{trajectory.step_count - 1}").wait_for()
        # Open every fold so hidden content is rendered and focusable too.
        page.eval_on_selector_all("details", "els => els.forEach(d => d.open = true)")
        for button in page.locator(".fold-toggle").all():
            button.click()
        expect(page.locator("h1")).to_have_text(trajectory.title)
        body = page.locator("main").inner_text()
        for text in (SCRIPT, f"tool{IMG}", "window.__xss='svg'"):
            assert text in body, f"{domain}: {text!r} not shown as text"
        assert_nothing_ran(page, dialogs)
        shot(page, f"xss-{domain}")
