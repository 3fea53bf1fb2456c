"""Search results as cards: JSON result lists (title/url/snippet, also under `organic_results`,
`results`, `items`...) and text lists (`Title:`/`URL:`/`Snippet:` blocks, numbered results with
a URL line). A FireAct-style single snippet is one card."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering.safe import join

_TITLE_KEYS = ("title", "name", "headline")
_URL_KEYS = ("url", "link", "href", "source_url")
_SNIPPET_KEYS = ("snippet", "content", "description", "text", "body", "summary")
_LIST_KEYS = ("organic_results", "results", "items", "search_results", "webPages", "value", "data")


def _first(item: dict, keys: tuple[str, ...]) -> str:
    for key in keys:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _looks_like_result(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and bool(_first(item, _TITLE_KEYS))
        and bool(_first(item, _URL_KEYS) or _first(item, _SNIPPET_KEYS))
    )


def find_results(value: Any) -> list[dict] | None:
    """The list of search results inside a parsed JSON value, or None."""
    if isinstance(value, list) and value and all(_looks_like_result(v) for v in value):
        has_url = any(_first(v, _URL_KEYS) for v in value)
        return (
            [
                {
                    "title": _first(v, _TITLE_KEYS),
                    "url": _first(v, _URL_KEYS),
                    "snippet": _first(v, _SNIPPET_KEYS),
                }
                for v in value
            ]
            if has_url
            else None
        )
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            inner = value.get(key)
            if isinstance(inner, dict):
                inner = inner.get("value") or inner.get("results")
            found = find_results(inner)
            if found:
                return found
    return None


_FIELD_RE = re.compile(r"^\s*(title|url|link|snippet|content|description)\s*:\s*(.*)$", re.I)
_NUMBERED_RE = re.compile(r"^\s*(?:\d{1,3}[.)]|\[\d{1,3}\])\s+(.+)$")
_URL_LINE_RE = re.compile(r"^\s*(?:(?:url|link|source)\s*:\s*)?<?(https?://\S+?)>?\s*$", re.I)


def parse_text_results(text: str) -> list[dict] | None:
    """Results from text listings; None unless at least one result has a URL."""
    results: list[dict] = []
    current: dict | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        field = _FIELD_RE.match(line)
        if field:
            key = field.group(1).lower()
            key = {"link": "url", "content": "snippet", "description": "snippet"}.get(key, key)
            if key == "title" or current is None:
                current = {"title": "", "url": "", "snippet": ""}
                results.append(current)
            current[key] = (current[key] + " " + field.group(2)).strip()
            continue
        numbered = _NUMBERED_RE.match(line)
        if numbered and i + 1 < len(lines) and _URL_LINE_RE.match(lines[i + 1]):
            current = {"title": numbered.group(1).strip(), "url": "", "snippet": ""}
            results.append(current)
            continue
        url = _URL_LINE_RE.match(line)
        if url and current is not None and not current["url"]:
            current["url"] = url.group(1)
            continue
        if current is not None and line.strip():
            current["snippet"] = (current["snippet"] + " " + line.strip()).strip()
    if results and any(r["url"] for r in results):
        return results
    return None


def _safe_href(url: str) -> str:
    """Only http(s) links become clickable; anything else (javascript:, data:) stays text."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme in ("http", "https") and parts.netloc else ""


def render_cards(results: list[dict]) -> SafeString:
    cards = []
    for n, r in enumerate(results, 1):
        href = _safe_href(r.get("url", ""))
        title = r.get("title") or r.get("url") or f"Result {n}"
        if href:
            host = urlsplit(href).netloc
            head = format_html(
                '<a class="sc-title" href="{}" target="_blank" rel="noopener noreferrer nofollow">{}</a>'
                '<div class="sc-url">{}</div>',
                href,
                title,
                host + urlsplit(href).path,
            )
        else:
            head = format_html(
                '<div class="sc-title">{}</div>{}',
                title,
                format_html('<div class="sc-url">{}</div>', r["url"]) if r.get("url") else "",
            )
        cards.append(
            format_html(
                '<li class="search-card"><span class="sc-rank">{}</span><div>{}{}</div></li>',
                n,
                head,
                format_html('<p class="sc-snippet">{}</p>', r["snippet"])
                if r.get("snippet")
                else "",
            )
        )
    return format_html('<ol class="search-cards">{}</ol>', join(cards))


def render_snippet_card(text: str) -> SafeString:
    """One retrieved passage with no title or URL (FireAct/HotpotQA style)."""
    return format_html(
        '<ol class="search-cards"><li class="search-card single"><span class="sc-rank">1</span>'
        '<p class="sc-snippet">{}</p></li></ol>',
        text.strip(),
    )
