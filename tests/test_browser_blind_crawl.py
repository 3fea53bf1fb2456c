"""A blind annotator who has not submitted crawls, in headless Chromium, every page reachable by
links from the projects page (and every htmx fragment those pages name in `hx-get`), and
nowhere finds the judge's scores of the blind queue's steps or the other annotator's
annotation of them: not in the HTML sent, not in the page once its scripts and htmx have run,
not in a download."""

from __future__ import annotations

import html
import re
import time
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from tests.support.blind_review import SECRETS, build, hold

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MAX_URLS = 160  # the fixture's project has ~60 distinct pages; this bounds a link explosion
MAX_PER_PATH = 4  # query variants of one path (?step=..., ?version=...) read at most
SKIP = ("/logout/", "/admin/", "/static/", "/login/")

# links, htmx fragments, and GET forms as sent with their defaults (a POST form changes
# something: never sent)
LINKS_JS = """() => [
  ...[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
  ...[...document.querySelectorAll('[hx-get]')].map(e => e.getAttribute('hx-get')),
  ...[...document.querySelectorAll('form')]
    .filter(f => (f.getAttribute('method') || 'get').toLowerCase() === 'get')
    .map(f => {
      const url = new URL(f.getAttribute('action') || location.href, location.href);
      for (const [k, v] of new FormData(f)) if (typeof v === 'string') url.searchParams.append(k, v);
      return url.href;
    }),
]"""
HX_JS = "() => [...document.querySelectorAll('[hx-get]')].map(e => e.getAttribute('hx-get'))"
HTMX_SETTLED = "() => !document.querySelector('.htmx-request')"


def _follow(base, here, hrefs, seen, per_path, queue, hx, fragments=None) -> None:
    """Queue the same-origin targets of `hrefs` not seen yet (a few variants per path)."""
    for href in hrefs:
        target, _ = urldefrag(urljoin(here, href or ""))
        parts = urlparse(target)
        if not target.startswith(base) or any(parts.path.startswith(s) for s in SKIP):
            continue
        if target in seen or per_path.get(parts.path, 0) >= MAX_PER_PATH:
            continue
        seen.add(target)
        per_path[parts.path] = per_path.get(parts.path, 0) + 1
        if href in hx and fragments is not None:
            fragments.add(target)
        queue.append(target)


def test_a_blind_annotator_crawls_every_page_and_sees_no_hidden_score(
    page, live_server, login, project, tmp_path
):
    review = build(project, tmp_path)
    claim = hold(review, project.users["annotator"])  # one item taken, none submitted
    login(page, "annotator")
    base = live_server.url
    started = time.monotonic()
    # the projects page, and the item page the queue's Start button (a POST) opens
    item = f"/steps/{claim.item.step_id}/annotate/?queue={review.queue.pk}"
    # and searches that would find the hidden steps by the other annotator's comment and
    # correction (their snippets would show the secrets)
    searches = [
        f"{base}/projects/{project.pk}/search/?q={q}"
        for q in ("comment%3Awrong", "correction%3Aobservation", "verdict%3Aneeds_fix")
    ]
    queue = [f"{base}/", f"{base}{item}&branch={review.branch.pk}", *searches]
    seen: set[str] = set(queue)
    per_path: dict[str, int] = {}
    fragments: set[str] = set()  # hx-get URLs: parts of a page, read as sent
    rendered: set[str] = set()  # paths opened in the browser (one query variant is enough)
    visited: list[str] = []
    leaks: list[str] = []
    while queue and len(visited) < MAX_URLS:
        url = queue.pop(0)
        visited.append(url)
        # the bytes as sent (pages, fragments, downloads alike)
        response = page.context.request.get(url, max_redirects=5)
        body = response.text()
        leaks += [f"{url} (sent): {s}" for s in SECRETS if s in body]
        kind = response.headers.get("content-type", "")
        attachment = "attachment" in response.headers.get("content-disposition", "")
        path = urlparse(url).path
        if not response.ok or "text/html" not in kind or attachment or url in fragments:
            continue
        if path in rendered:
            # another variant of a page already opened: its links, from the HTML as sent
            hrefs = re.findall(r'(?:href|hx-get)="([^"]*)"', body)
            _follow(base, url, [html.unescape(h) for h in hrefs], seen, per_path, queue, set())
            continue
        rendered.add(path)
        # the page as shown: its scripts ran, its htmx fragments loaded (load, revealed)
        page.goto(url)
        page.wait_for_function(HTMX_SETTLED)
        shown = page.content()
        leaks += [f"{url} (shown): {s}" for s in SECRETS if s in shown]
        links = page.evaluate(LINKS_JS)
        hx = set(page.evaluate(HX_JS))
        _follow(base, page.url, links, seen, per_path, queue, hx, fragments)
    assert not leaks, leaks
    assert not queue, f"the crawl stopped at {MAX_URLS} URLs with {len(queue)} left"
    paths = {urlparse(u).path for u in visited}
    # the crawl reached the pages that hold the queue's steps' scores and annotations
    for must in (
        f"/judge-jobs/{review.job.pk}/",
        f"/branches/{review.branch.pk}/fidelity/",
        f"/datasets/{review.version.dataset_id}/",
        f"/queues/{review.queue.pk}/",
        f"/steps/{review.hidden[0].pk}/annotate/",
        f"/trajectories/{review.branch.trajectory_id}/tree/",
        f"/dataset-versions/{review.version.pk}/export/",  # the export form, sent
    ):
        assert must in paths, f"{must} not reached; visited {sorted(paths)}"
    print(f"crawled {len(visited)} URLs in {time.monotonic() - started:.1f} s")
