"""The Content-Security-Policy in a real browser: the demo admin visits every page of the
demo (the demo data, plus one of each thing a page shows: a simulation with its futures, an
import, a world, a queue with annotations, a dataset and its export, an evaluation, a judge
job, perturbations, a token) and Chromium reports no violation; the header is the one the
test server really sends (django-csp), and a script the policy forbids is reported, so the
watch itself is shown to work. An HTML observation still renders, styled, in its sandboxed
iframe, and its own script does not run."""

from __future__ import annotations

import json
import re
from collections import deque
from io import StringIO
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.urls.converters import IntConverter
from django.urls.exceptions import Resolver404
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from inference.simulation.request import ForkFacts
from studio.forms.arena import ArenaForm
from studio.models import DOMAINS, DatasetVersion, JudgeTarget, Project, Trajectory
from studio.services.arena import start_arena
from studio.services.datasets import SelectionData, create_version
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.evaluations import EvaluationData, start_evaluation
from studio.services.judging import JudgeData, start_judging
from studio.services.perturbations import add_presets
from studio.services.queues import QueueData, create_queue
from studio.services.tokens import create_token
from studio.services.worlds import import_world
from studio.tasks import enqueue_arena, enqueue_evaluation, enqueue_judging
from tests.support.browser import shot, write_native_file
from tests.support.fake_openai import fake_openai_server
from tests.support.jobs import start_job, wait_job
from tests.test_agreement import annotate
from tests.test_worlds import WORLD

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Runs in every document before its own scripts: each violation the browser reports as an
# event is kept in the window, to be read before the next navigation.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(
    `${e.effectiveDirective} blocked ${e.blockedURI || "inline"} in ${e.documentURI}` +
    ` (${e.sourceFile || "?"}:${e.lineNumber}) ${e.sample || ""}`
  );
});
"""

# Routes the tour does not open as pages, and why; routes that answer GET with 405 (POST
# only: the forms of the pages) are found by asking. Every other route of the studio must be
# reached: a new page gets its check by being linked from the demo (or listed here).
DOWNLOADS = {
    "branch_export": "a branch as a JSON download",
    "world_export": "a world as a JSON download",
    "dataset_export": "a dataset version as a file (the dataset page's Download button)",
    "export_download": "an export's file",
    "queue_labels": "a queue's labels as JSONL, CSV or Parquet",
    "finetune_adapter": "a fine-tune's adapter folder as a zip",
}
# pages that are also files with another query
ALSO_DOWNLOADS = {"leaderboard": "?format=csv: the leaderboard as CSV"}
NOT_PAGES = {
    **DOWNLOADS,
    "healthz": "JSON for load balancers (opened below, outside the tour)",
    "trajectory_steps": "htmx fragment: the step windows of the trajectory page",
    "step_observation": "htmx fragment: a step's observation in full",
    "step_raw_output": "htmx fragment: a simulated step's raw model output",
    "branch_compare_rows": "htmx fragment: the rows of a comparison, loaded as it scrolls",
    "endpoint_row": "htmx fragment: a model's row on the Models page",
    "gallery_card": "htmx fragment: a card of the gallery",
    "world_preview": "htmx fragment: the world editor's composed prompt",
    "playground_job": "htmx fragment: the playground's pending step, polled while it runs",
    "queue_next": "a redirect to the next item's annotation page",
    "step_earlier": "htmx fragment: a long trajectory's earlier steps on an annotation page",
    "queue_annotators": "htmx fragment: a queue's annotator quality panel",
    "trajectory_live": "htmx fragment: a running episode's new steps, polled by its page",
    "trajectory_find": "JSON: the find bar's hits in a trajectory (static/js/find.js)",
    "branch_compare_find": "JSON: the find bar's hits in a comparison (static/js/find.js)",
    "step_text": "text/plain, a step field whole (Show all: linked from texts over "
    "STUDIO_PAGE_FIELD_CHARS only; nothing in it for the policy to refuse)",
    "trajectory_text": "text/plain, a trajectory's task whole (Show all, as step_text)",
    "finetune_evaluations": "htmx fragment: the fine-tune page's Evaluate section, polled "
    "while its evaluations run (a page of its own only to show a refused form's errors)",
}

SKIP_PATH = re.compile(r"^/(logout/|admin/|static/|env/|mcp/)")


def _patterns() -> list[URLPattern]:
    """Every named route of the studio outside Django's admin (all included at the root)."""
    found: list[URLPattern] = []

    def walk(patterns) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                if not str(p.pattern).startswith("admin/"):
                    walk(p.url_patterns)
            elif isinstance(p, URLPattern) and p.name:
                found.append(p)

    walk(get_resolver().url_patterns)
    return found


def post_only(names: set[str], user) -> set[str]:
    """Those of `names` whose view answers GET with 405 Method Not Allowed (ids need not
    exist: the method is checked first)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    found = set()
    for p in _patterns():
        if p.name in names:
            kwargs = {
                k: 1 if isinstance(c, IntConverter) else "x"
                for k, c in p.pattern.converters.items()
            }
            if client.get(reverse(p.name, kwargs=kwargs)).status_code == 405:
                found.add(p.name)
    return found


def route_of(path: str) -> str | None:
    try:
        return resolve(path).url_name
    except Resolver404:
        return None


def page_kind(url: str) -> tuple[str, tuple[str, ...]]:
    """One visit per kind of page: the path with its ids blanked, and the query's keys."""
    parts = urlsplit(url)
    return re.sub(r"\d+", "N", parts.path), tuple(sorted(parse_qs(parts.query)))


class CspWatch:
    """What the browser reports: `securitypolicyviolation` events of each page and console
    messages about the policy (those also cover frames that run no script of ours)."""

    def __init__(self, page):
        self.page = page
        self.reports: list[str] = []
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("console", self._console)

    def _console(self, message) -> None:
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            self.reports.append(f"console on {self.page.url}: {text}")

    def collect(self) -> list[str]:
        """The page's events so far (kept with the console messages); call before leaving."""
        events = self.page.evaluate("window.__cspViolations || []")
        self.reports.extend(f"event on {self.page.url}: {e}" for e in events)
        self.page.evaluate("window.__cspViolations = []")
        return events


def settle(page) -> None:
    """Wait for what a page does after it loads: htmx requests, and Plotly drawing each
    figure whose data is on the page (a figure blocked by the policy never gets ready)."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(
        """() => [...document.querySelectorAll('.plotly-figure, .branch-tree-plot')]
            .filter((el) => document.getElementById(el.dataset.figureId))
            .every((el) => el.dataset.ready === '1')"""
    )


def judge_and_world(body, index):
    """The fake server as both models: the judge scores every step 4 (and, searching for a
    behaviour, finds it in every step whose action has a space, naming its group), the world
    predicts."""
    system = body["messages"][0]["content"] if body["messages"] else ""
    if system.startswith("You name a group"):
        return "<name>commands with arguments</name>"
    if system.startswith("You review"):
        action = body["messages"][-1]["content"].split("the agent's action", 1)[-1]
        match = "yes" if " " in action.split("\n## ", 1)[0].strip() else "no"
        verdict = {"match": match, "confidence": 0.8, "reason": f"<b>{match}</b> by its spaces"}
        return f"<verdict>{json.dumps(verdict)}</verdict>"
    if system.startswith("You grade a world model"):
        dims = ("format", "factuality", "consistency", "realism", "quality")
        block = {"scores": dict.fromkeys(dims, 4), "strengths": ["plausible"], "weaknesses": []}
        return f"<final_evaluation>\n```json\n{json.dumps(block)}\n```\n</final_evaluation>"
    if system.startswith("You compare two world models"):
        verdict = json.dumps({"winner": "A", "reason": "closer"})
        return f"<final_verdict>\n```json\n{verdict}\n```\n</final_verdict>"
    return "<predicted_observation>predicted output</predicted_observation>"


def demo_with_one_of_everything(tmp_path):
    """The demo, and one of each thing a page of it shows, made by the services the views
    call and run by the real worker."""
    call_command("load_demo", stdout=StringIO())
    demo = Project.objects.get(name="Demo")
    users = {u.username: u for u in get_user_model().objects.all()}
    admin = users["admin"]
    web = Trajectory.objects.filter(project=demo, domain="web").order_by("pk").first()
    assert web is not None
    recorded = {s.index: s for s in web.root_branch.all_steps()}
    # two futures of the web trajectory with the offline baseline: job, compare, tree, play
    simulation = start_job(
        web.root_branch, user=admin, fork_index=2, action=recorded[2].action, n=2
    )
    add_presets(demo, "web", user=admin)
    create_token(demo, "agent", user=admin)
    import_world(demo, WORLD, user=admin)
    with fake_openai_server(judge_and_world) as srv:
        world = save_endpoint(
            demo,
            EndpointData(
                name="served world", role="world", kind="openai", base_url=srv.base_url, model="wm"
            ),
        ).endpoint
        judge = save_endpoint(
            demo,
            EndpointData(
                name="judge", role="judge", kind="openai", base_url=srv.base_url, model="jm"
            ),
        ).endpoint
        run = start_evaluation(
            demo,
            admin,
            EvaluationData(
                name="first run",
                world=world,
                judge=judge,
                domains=["terminal"],
                limit_per_domain=2,
                max_tokens=64,
                judge_max_tokens=256,
            ),
        )
        enqueue_evaluation(run)
        simulation = wait_job(simulation)
        assert simulation.status == "succeeded", simulation.error
        judging = start_judging(
            demo,
            admin,
            JudgeData(judge=judge, target=JudgeTarget.FORK, fork=simulation, max_tokens=256),
        )
        enqueue_judging(judging)
        # a behaviour search of the web trajectories: its list, its page, its groups
        from studio.services.behaviour import BehaviourData, start_behaviour_search
        from studio.tasks import enqueue_behaviour_search

        behaviour = start_behaviour_search(
            demo,
            admin,
            BehaviourData(
                judge=judge,
                description="the agent types <b>text</b>",
                query="domain:web",
                max_candidates=6,
                max_tokens=256,
            ),  # fmt: skip
        )
        enqueue_behaviour_search(behaviour)
        # an arena of the served model and the baseline at the same step: its page, the
        # arena list and the arena leaderboard
        baseline = demo.endpoints.get(role="world", kind="retrieval")
        steps = web.root_branch.all_steps()
        form = ArenaForm(
            {
                "world_models": [world.pk, baseline.pk],
                "n": 1,
                "temperature": 0.5,
                "top_p": 0.9,
                "max_tokens": 64,
                "seed": 41,
                "judge": judge.pk,
                "judge_temperature": 0.0,
                "judge_max_tokens": 256,
            },
            branch=web.root_branch,
            fork_index=2,
            fork=ForkFacts(
                step_count=steps.count(), recorded_action=recorded[2].action, domain="web"
            ),
        )
        assert form.is_valid(), form.errors
        arena = start_arena(admin, form.data_object())
        enqueue_arena(arena)
        for job in (wait_job(run), wait_job(judging), wait_job(arena), wait_job(behaviour)):
            assert job.status == "succeeded", job.error
    # a queue two people annotated differently: its agreement, an item to adjudicate
    queue = create_queue(
        demo, admin, QueueData(name="check futures", origin="simulated", annotators_per_item=2)
    )
    items = list(queue.items.select_related("step").order_by("position"))
    assert items, "the simulation made no step to annotate"
    for item in items:
        annotate(queue, admin, item.step, verdict="accept", ratings={"realism": 5})
        annotate(queue, users["researcher"], item.step, verdict="reject", ratings={"realism": 1})
    from studio.services.campaigns import CampaignData, cancel_campaign, create_campaign

    agent = save_endpoint(
        demo,
        EndpointData(
            name="agent", role="agent", kind="openai", base_url="http://127.0.0.1:9/v1", model="am"
        ),
    ).endpoint
    campaign = create_campaign(
        demo,
        admin,
        CampaignData(
            name="first campaign",
            world=demo.worlds.exclude(versions=None).order_by("pk").first(),
            source="typed",
            tasks=({"id": "look", "instruction": "Look around."},),
            agent=agent,
            world_model=world,
            episodes_per_task=1,
            max_steps=2,
        ),
    )
    cancel_campaign(campaign)  # finished at once: its page does not poll
    web_steps = QueueData(name="web steps", domain="web", limit=20)
    version = create_version(demo, admin, SelectionData(name="web steps", filter=web_steps))
    from studio.services.finetunes import FineTuneData, cancel_finetune, start_finetune

    tune = start_finetune(
        demo, admin, FineTuneData(name="first tune", dataset_version=version, base="tiny")
    )
    cancel_finetune(tune)  # finished at once: its page does not poll
    from studio.models import SavedSearch

    # a shared saved search: the search page's link to it opens a page of hits
    SavedSearch.objects.create(
        project=demo, owner=users["researcher"], name="Errors", query="error*", shared=True
    )
    return demo, web, simulation, write_native_file(tmp_path / "two.json", title="Two", steps=2)


class Tour:
    """A browser tab that keeps, for every page it shows (opened, clicked to or redirected
    to): its route, whether the response carried the policy, and what the browser refused."""

    def __init__(self, context, base: str):
        self.base = base
        self.page = context.new_page()
        self.page.set_default_timeout(30000)
        self.watch = CspWatch(self.page)
        self.routes: set[str] = set()
        self.without_policy: list[str] = []
        self.server_errors: list[str] = []
        self.downloads: set[str | None] = set()
        self.page.on("response", self._response)
        self.page.on("framenavigated", self._navigated)

    def _response(self, response) -> None:
        if response.request.resource_type == "document" and response.frame == self.page.main_frame:
            if "script-src 'self'" not in response.headers.get("content-security-policy", ""):
                self.without_policy.append(f"{response.url} ({response.status})")
            if response.status >= 500:  # the error page, not the page: nothing was checked
                self.server_errors.append(f"{response.url} ({response.status})")

    def _navigated(self, frame) -> None:
        if frame == self.page.main_frame:
            path = urlsplit(frame.url).path
            self.routes.add(route_of(path) or path)

    def open(self, url: str) -> list[str]:
        """Show `url` until it settles; its links to other pages of the studio."""
        try:
            self.page.goto(url)
        except PlaywrightError as exc:
            if "Download is starting" not in str(exc):
                raise
            self.downloads.add(route_of(urlsplit(url).path))
            return []
        return self.settled()

    def settled(self) -> list[str]:
        settle(self.page)
        self.watch.collect()
        shot(self.page, f"csp-{route_of(urlsplit(self.page.url).path) or 'other'}")
        links = self.page.eval_on_selector_all("a[href]", "els => els.map((a) => a.href)")
        return [
            href.split("#", 1)[0]
            for href in links
            if href.startswith(self.base) and not SKIP_PATH.match(urlsplit(href).path)
        ]


def test_no_page_of_the_demo_is_refused_anything_by_the_policy(
    browser, live_server, login_with_form, default_worker, tmp_path
):
    demo, web, simulation, upload = demo_with_one_of_everything(tmp_path)
    base = live_server.url
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tour = Tour(context, base)
    page = tour.page
    login_with_form(page, "admin", "demo-password")

    # Pages reached by doing what a person does: an upload, an export.
    tour.open(f"{base}/projects/{demo.pk}/import/")
    page.set_input_files("input[name=file]", str(upload))
    page.get_by_role("button", name="Upload and import").click()
    page.locator(".import-job[data-status=succeeded]").wait_for(timeout=90_000)
    tour.settled()
    version = DatasetVersion.objects.get(dataset__name="web steps")
    tour.open(f"{base}/datasets/{version.dataset_id}/")
    page.click("#export-background")
    page.wait_for_url(re.compile(r"/exports/\d+/$"))
    page.locator("#export-file").wait_for(timeout=60_000)
    tour.settled()

    # Then every page linked from these on, once per kind of page (the path with its ids
    # blanked, the query's keys), starting with the pages of the trajectory with futures so
    # that its tree, compare and job pages are the ones seen, and each domain's trajectory
    # (each has renderers of its own).
    starts = [
        f"{base}/trajectories/{web.pk}/",
        f"{base}/jobs/{simulation.pk}/",
        f"{base}/trajectories/{web.pk}/tree/",
        f"{base}/",
        f"{base}/projects/{demo.pk}/",
        f"{base}/no-such-page/",
    ]
    for domain in DOMAINS:
        first = Trajectory.objects.filter(project=demo, domain=domain).order_by("pk").first()
        assert first is not None, f"the demo has no {domain} trajectory"
        starts.append(f"{base}/trajectories/{first.pk}/")
    queue: deque[str] = deque(starts)
    kinds: set = set()
    opened: set[str] = set()
    while queue:
        url = queue.popleft()
        kind = page_kind(url)
        if url in opened or (kind in kinds and url not in starts):
            continue
        kinds.add(kind)
        opened.add(url)
        assert len(opened) < 400, "the tour does not end: too many kinds of page"
        queue.extend(tour.open(url))

    # Django's admin (signed in), and the sign-in pages of a visitor who is not.
    admin_pk = get_user_model().objects.get(username="admin").pk
    for path in ("/admin/", "/admin/auth/user/", f"/admin/auth/user/{admin_pk}/change/"):
        tour.open(base + path)
    visitor = Tour(browser.new_context(), base)
    for path in ("/login/", "/admin/login/", "/healthz"):
        visitor.open(base + path)
    visitor.page.context.close()
    context.close()

    assert tour.server_errors + visitor.server_errors == []
    assert tour.watch.reports + visitor.watch.reports == []
    assert tour.without_policy + visitor.without_policy == []
    assert tour.downloads <= {*DOWNLOADS, *ALSO_DOWNLOADS}, tour.downloads
    every = {p.name for p in _patterns()}
    unreached = every - tour.routes - visitor.routes - set(NOT_PAGES)
    unreached -= post_only(unreached, get_user_model().objects.get(username="admin"))
    assert not unreached, (
        f"pages the tour never opened: {sorted(unreached)} (link them from a page of the demo, "
        "or list them in NOT_PAGES with the reason)"
    )


def test_the_policy_is_enforced_and_html_observations_still_render_in_their_sandbox(
    page, live_server, login
):
    call_command("load_demo", stdout=StringIO())
    demo = Project.objects.get(name="Demo")
    web = Trajectory.objects.filter(project=demo, domain="web").order_by("pk").first()
    assert web is not None
    watch = CspWatch(page)
    login(page, "admin")
    response = page.goto(f"{live_server.url}/trajectories/{web.pk}/")
    assert response is not None
    policy = response.headers["content-security-policy"]
    for directive in (
        "default-src 'self'", "script-src 'self'", "object-src 'none'", "base-uri 'self'",
        "form-action 'self'", "frame-ancestors 'none'",
    ):  # fmt: skip
        assert directive in policy, policy
    assert "unsafe-eval" not in policy and "script-src 'self' 'unsafe-inline'" not in policy
    assert response.headers["x-frame-options"] == "DENY"
    settle(page)

    # Both recorded pages (steps 0 and 2) render in their frames with their own <style>;
    # the orders page's script (it sets window.nwAnalytics) does not run.
    headings = {}
    for step in (0, 2):
        frame_el = page.locator(f"#step-{step} iframe.html-frame")
        assert frame_el.get_attribute("sandbox") == ""
        frame_el.scroll_into_view_if_needed()  # the frames load lazily
        frame = frame_el.element_handle().content_frame()
        assert frame is not None
        frame.locator("h1").wait_for()
        headings[step] = frame.locator("h1").inner_text()
        background = frame.locator("header").evaluate("(el) => getComputedStyle(el).background")
        assert background.startswith("rgb(18, 53, 91)")  # SHOP_STYLE's header: #12355b
        assert frame.evaluate("typeof window.nwAnalytics") == "undefined"
    assert headings == {0: "Your orders", 2: "Return policy"}
    shot(page, "csp-html-observation")
    assert watch.collect() == [] and watch.reports == []

    # An inline script, as injected markup would add one, is refused and reported.
    page.evaluate(
        """() => { const s = document.createElement('script');
                   s.textContent = 'window.__inlineRan = true'; document.body.append(s); }"""
    )
    page.wait_for_function("() => window.__cspViolations.length > 0")
    assert page.evaluate("window.__inlineRan") is None
    events = watch.collect()
    assert len(events) == 1 and events[0].startswith("script-src-elem blocked inline"), events
    expect(page.locator("h1")).to_have_text(web.title)
