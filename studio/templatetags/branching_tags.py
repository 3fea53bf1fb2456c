"""Template helpers of the branching area: the "Branch here" hook for the trajectory page and
the renderers/diff helpers its own templates use. `{% load branching_tags %}`."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.presenters.diff import any_diff_html as render_any_diff
from studio.presenters.diff import diff_excerpt_html, text_excerpt_html
from studio.rendering import render_action, render_observation
from studio.rendering.ansi import strip_ansi
from studio.services.compare import CELL_CHANGES, CELL_CHARS

register = template.Library()


@register.simple_tag
def branch_here(branch, index, membership=None) -> SafeString | str:
    """The "Branch here" link for step `index` of `branch`, shown to those who may simulate.

    Usage in a step's `.step-actions` container:
    `{% branch_here branch step.index membership %}`."""
    if membership is None or not getattr(membership, "can_edit", False):
        return ""
    url = reverse("branch_fork", args=[branch.pk, index])
    return format_html(
        '<a class="button small branch-here" href="{}" data-step-index="{}" '
        'title="Edit the action at this step and simulate alternative futures">Branch here</a>',
        url,
        index,
    )


@register.simple_tag
def observation_html(domain: str, text: str, meta=None) -> SafeString:
    return render_observation(domain, text or "", meta or {})


@register.simple_tag
def action_html(domain: str, text: str, meta=None) -> SafeString:
    return render_action(domain, text or "", meta or {})


@register.filter
def diff_html(diff, limit=None) -> SafeString:
    """A compare cell's diff (`cell.observation_diff`, `cell.action_diff`) as HTML: JSON
    changes by path, or <del>/<ins> word or line pieces, every piece of user text escaped.
    `{{ diff|diff_html:8 }}` lists at most 8 JSON changes."""
    return render_any_diff(diff, int(limit) if limit is not None else None)


@register.simple_tag
def cell_diff(diff, full=False) -> SafeString:
    """A compare cell's diff: an excerpt of about CELL_CHARS characters (and CELL_CHANGES
    JSON changes), or whole with `full` ("Show all")."""
    if full:
        return render_any_diff(diff, None)
    return diff_excerpt_html(diff, 2 * CELL_CHARS, CELL_CHANGES)


@register.simple_tag
def cell_text(text, full=False) -> SafeString:
    """A compare cell's text in a <pre>: its first CELL_CHARS characters, or all of it."""
    return text_excerpt_html(text or "", None if full else CELL_CHARS)


@register.filter
def plain(text) -> str:
    """Terminal output as plain text, without its escape sequences (an excerpt in a <pre>;
    the full observation renders its colours)."""
    return strip_ansi(text or "")


@register.filter
def similar(value) -> str:
    """A similarity as a percentage that says 100% only when it is 1 (and 0% only when 0):
    one word changed in 100 KB is ">99%", not "100%"."""
    if value is None:
        return ""
    share = float(value) * 100
    if 99 < share < 100:
        return ">99%"
    if 0 < share < 1:
        return "<1%"
    return f"{round(share)}%"


@register.filter
def percent(value) -> str:
    if value is None:
        return ""
    return f"{round(float(value) * 100)}%"


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if mapping else None


@register.filter
def rate(value) -> str:
    """tokens/s with one decimal; "…" while too little was decoded to measure (None: see
    `inference.simulation.rates`); an em dash for anything else."""
    if value is None:
        return "…"
    try:
        return f"{float(value):.1f}"
    except (TypeError, ValueError):
        return "—"


@register.simple_tag
def rate_rule() -> str:
    """When a speed is shown, in words (the title of a "…" rate)."""
    from inference.simulation.rates import MIN_TOKENS, MIN_WINDOW_S

    return f"{MIN_TOKENS} tokens and {MIN_WINDOW_S:g} s have passed since the first token"


_OPEN_OBS = "<predicted_observation>"
_CLOSE_OBS = "</predicted_observation>"
_TAGS = ("<think>", "</think>", _OPEN_OBS, _CLOSE_OBS)


def _cut_partial_tag(text: str) -> str:
    """Drop a tag still being written at the end (`<thi`, `</predicted_obs`)."""
    start = text.rfind("<")
    if start != -1 and ">" not in text[start:]:
        fragment = text[start:]
        if any(tag.startswith(fragment) for tag in _TAGS):
            return text[:start]
    return text


def split_stream(text: str) -> tuple[str, str]:
    """Text streamed so far -> (thinking so far, observation so far). Tolerates the unclosed
    and half-written tags a partial answer has; the final parse is the worker's."""
    text = _cut_partial_tag(text or "")
    if _OPEN_OBS in text:
        before, after = text.split(_OPEN_OBS, 1)
        observation = after.split(_CLOSE_OBS, 1)[0]
    else:
        before, observation = text, ""
    thinking = before.replace("<think>", "").replace("</think>", "").strip()
    return thinking, observation.strip("\n")


@register.simple_tag
def stream_parts(text: str) -> dict:
    """For the job page: thinking and observation so far, or `plain` text when the model
    writes no tags at all (then it is neither, yet)."""
    cut = _cut_partial_tag(text or "")
    if not any(tag in cut for tag in _TAGS):
        return {"thinking": "", "observation": "", "plain": cut.strip()}
    thinking, observation = split_stream(cut)
    return {"thinking": thinking, "observation": observation, "plain": ""}
