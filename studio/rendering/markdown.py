"""Markdown that people write (a queue's guidelines) as safe HTML: CommonMark by
markdown-it-py with raw HTML off (a `<script>` is shown as text, not run), and links and
images only to http(s), mailto or relative addresses (a `javascript:` or `data:` link stays
text). Links open in a new tab without the page's opener."""

from __future__ import annotations

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

SCHEMES = ("http:", "https:", "mailto:")


def _allowed(url: str) -> bool:
    # browsers ignore control characters and spaces inside a scheme ("java\tscript:")
    cleaned = "".join(ch for ch in url if ch > " ").lower()
    if ":" not in cleaned.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]:
        return True  # relative: a path, a query or a fragment
    return cleaned.startswith(SCHEMES)


def _validate_link(url: str) -> bool:
    return _allowed(url)


def _link_open(self, tokens, idx, options, env) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    tokens[idx].attrSet("target", "_blank")
    return self.renderToken(tokens, idx, options, env)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table").enable("strikethrough")
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _parser()
MAX_CHARS = 50_000


def render_markdown(text: str) -> SafeString:
    """`text` as HTML that runs no script and links nowhere but http(s), mailto or relative."""
    if not text:
        return mark_safe("")
    # markdown-it escapes every character it does not render (raw HTML is off)
    return mark_safe(_MD.render(text[:MAX_CHARS]))
