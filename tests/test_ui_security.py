"""Script payloads through every renderer and every field the library and trajectory pages
show: nothing may come out as markup. Plus the access rules of these pages."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from studio.models import Step
from studio.rendering import render_action, render_observation
from tests.support.ui import (
    XSS_PAYLOADS,
    assert_markup_safe,
    audit_markup,
    make_child_branch,
    make_trajectory,
)


def observations_of_every_kind(p: str) -> dict[str, tuple[str, str]]:
    """kind -> (domain, observation text) carrying payload p, one per renderer."""
    return {
        "terminal": ("terminal", f"\x1b[31m{p}\x1b[0m\nexit 1 {p}"),
        "text": ("mcp", f"plain {p}\n\nmore"),
        "json": ("mcp", json.dumps({"k": p, p: [p, 1], "inner": json.dumps({"x": p})})),
        "search": (
            "search",
            json.dumps(
                {
                    "organic_results": [
                        {"title": p, "link": "javascript:alert(1)", "snippet": p},
                        {"title": "ok", "link": f"https://example.com/{p}", "snippet": p},
                    ]
                }
            ),
        ),
        "search_text": ("search", f"1. {p}\nhttps://example.com/result\n{p}"),
        "snippet": ("search", f"{p} is a duck"),
        "diff": ("swe", f"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-{p}\n+{p}\n {p}"),
        "android": (
            "android",
            json.dumps(
                [
                    {
                        "class_name": p,
                        "text": p,
                        "content_description": p,
                        "resource_name": p,
                        "hint_text": p,
                    }
                ]
            ),
        ),
        "android_text": ("android", f"UI element 0: UIElement(text='{p}', class_name='{p}')"),
        "web_elements": ("web", f'[1]: <button> "{p}";\t[2]: <script> "{p}";\t[3]: "{p}";'),
        "ax_tree": ("web", f'[1] link "{p}" [url: {p}]\n  [2] StaticText "{p}"\n  [3] button "x"'),
        "html": ("web", f"<html><body><p>hi</p>{p}</body></html>"),
    }


EXPECTED_KIND = {"search_text": "search", "android_text": "android"}


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_every_observation_renderer_escapes(payload):
    from studio.rendering import detect_kind

    for kind, (domain, text) in observations_of_every_kind(payload).items():
        assert detect_kind(domain, text)[0] == EXPECTED_KIND.get(kind, kind), kind
        html = render_observation(domain, text, {})
        audit = assert_markup_safe(html, [payload])
        if kind == "html":
            # only inside the sandboxed frame's srcdoc (escaped in the source) and the
            # escaped source view
            assert len(audit.iframes) == 1 and audit.iframes[0]["sandbox"] == ""
            assert payload in audit.iframes[0]["srcdoc"]
        elif kind == "android_text" and ("'" in payload or '"' in payload):
            pass  # a bare quote ends the repr-style value early; escaping is checked above
        else:
            shown = "".join(audit.text) + "".join(audit.attr_text)
            assert payload in shown or payload.replace('"', "") in shown.replace('"', ""), kind


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_every_action_renderer_escapes(payload):
    actions = [
        ("mcp", json.dumps({"name": payload, "arguments": {payload: payload}})),
        ("mcp", json.dumps({"name": "t", "arguments": json.dumps({"deep": {"x": [payload]}})})),
        ("android", f'Reason: {payload}\nAction: {{"action_type": "click", "index": 1}}'),
        ("search", f"Thought: {payload}\nAction: search[{payload}]"),
        ("terminal", f"echo '{payload}'"),
        ("web", json.dumps([payload])),
        ("swe", f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n+{payload}"),
    ]
    for domain, text in actions:
        html = render_action(domain, text, {})
        audit = assert_markup_safe(html, [payload])
        assert payload in "".join(audit.text) + "".join(audit.attr_text), text


def poisoned_trajectory(project, p: str):
    def step(i):
        domain_obs = list(observations_of_every_kind(p).values())
        return {
            "action": json.dumps({"name": p, "arguments": {"q": p}})
            if i % 2
            else f"Thought: {p}\nAction: {p}",
            "observation": domain_obs[i % len(domain_obs)][1],
            "thinking": p,
            "state": p,
            "meta": {"tool_name": p, p: p},
            "parse_status": "no_tag" if i == 1 else "",
        }

    traj = make_trajectory(
        project,
        title=p,
        domain="web",
        n_steps=12,
        step_factory=step,
        task_instruction=p,
        system_prompt=p,
        tools=[{"type": "function", "function": {"name": p, "description": p, "parameters": {}}}],
        metadata={p: p, "nested": {"list": [p]}},
        tags=[p],
        source_format="native",
        source_file=p,
    )
    make_child_branch(traj, fork_index=3, name=p)
    # a step too long to render inline: its preview and its full rendering
    Step.objects.filter(branch__trajectory=traj, index=5, branch__parent__isnull=True).update(
        observation=f"{p}\n" + "x" * 40_000
    )
    return traj


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_pages_escape_every_field(researcher_client, project, payload):
    traj = poisoned_trajectory(project, payload)
    child = traj.branches.exclude(parent__isnull=True).get()
    urls = [
        reverse("library", args=[project.pk]),
        reverse("library", args=[project.pk])
        + "?"
        + __import__("urllib.parse").parse.urlencode({"q": payload}),
        reverse("trajectory", args=[traj.pk]),
        reverse("trajectory", args=[traj.pk]) + f"?branch={child.pk}",
        reverse("trajectory_steps", args=[traj.pk]) + "?start=0",
        reverse("trajectory_delete", args=[traj.pk]),
    ]
    for url in urls:
        response = researcher_client.get(url)
        assert response.status_code in (200, 400), url
        html = response.content.decode()
        assert_markup_safe(html, [payload])
        assert payload in "".join(audit_markup(html).text) or "?q=" in url, url
    # htmx partial of the library
    response = researcher_client.get(reverse("library", args=[project.pk]), HTTP_HX_REQUEST="true")
    assert_markup_safe(response.content.decode(), [payload])
    # the long step: preview in the page, full rendering on demand
    long_step = Step.objects.get(branch__trajectory=traj, branch__parent__isnull=True, index=5)
    html = researcher_client.get(reverse("trajectory", args=[traj.pk])).content.decode()
    assert reverse("step_observation", args=[long_step.pk]) in html
    full = researcher_client.get(reverse("step_observation", args=[long_step.pk])).content.decode()
    assert_markup_safe(full, [payload])
    assert payload in "".join(audit_markup(full).text)


# ---------------------------------------------------------------- access


def test_login_required_everywhere(client, project):
    traj = make_trajectory(project, n_steps=2)
    step = Step.objects.filter(branch__trajectory=traj).first()
    for url in (
        reverse("library", args=[project.pk]),
        reverse("trajectory", args=[traj.pk]),
        reverse("trajectory_steps", args=[traj.pk]),
        reverse("step_observation", args=[step.pk]),
        reverse("step_raw_output", args=[step.pk]),
        reverse("trajectory_delete", args=[traj.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    assert client.post(reverse("trajectory_delete", args=[traj.pk])).status_code == 302
    assert traj.__class__.objects.filter(pk=traj.pk).exists()


def test_outsider_gets_404(outsider_client, project):
    traj = make_trajectory(project, n_steps=2)
    step = Step.objects.filter(branch__trajectory=traj).first()
    for url in (
        reverse("library", args=[project.pk]),
        reverse("trajectory", args=[traj.pk]),
        reverse("trajectory_steps", args=[traj.pk]) + "?start=0",
        reverse("step_observation", args=[step.pk]),
        reverse("step_raw_output", args=[step.pk]),
        reverse("trajectory_delete", args=[traj.pk]),
    ):
        assert outsider_client.get(url).status_code == 404, url
    assert outsider_client.post(reverse("trajectory_delete", args=[traj.pk])).status_code == 404
    assert traj.__class__.objects.filter(pk=traj.pk).exists()


def test_annotator_can_read_but_not_delete(annotator_client, project):
    traj = make_trajectory(project, n_steps=2)
    assert annotator_client.get(reverse("trajectory", args=[traj.pk])).status_code == 200
    library = annotator_client.get(reverse("library", args=[project.pk])).content.decode()
    assert reverse("trajectory_delete", args=[traj.pk]) not in library
    page = annotator_client.get(reverse("trajectory", args=[traj.pk])).content.decode()
    assert reverse("trajectory_delete", args=[traj.pk]) not in page
    assert annotator_client.get(reverse("trajectory_delete", args=[traj.pk])).status_code == 403
    assert annotator_client.post(reverse("trajectory_delete", args=[traj.pk])).status_code == 403
    assert traj.__class__.objects.filter(pk=traj.pk).exists()


def test_delete_needs_the_csrf_token(project):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(project.users["researcher"])
    traj = make_trajectory(project, n_steps=1)
    assert client.post(reverse("trajectory_delete", args=[traj.pk])).status_code == 403
    assert traj.__class__.objects.filter(pk=traj.pk).exists()
    page = client.get(reverse("library", args=[project.pk])).content.decode()
    # htmx posts carry the token from <body hx-headers>; the form also has the hidden field
    assert "X-CSRFToken" in page and "csrfmiddlewaretoken" in page
