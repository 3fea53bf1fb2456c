"""Step fields and trajectory texts on a page, bounded (`studio.rendering.bounded`): a text
longer than STUDIO_PAGE_FIELD_CHARS shows its start, says how much of it is shown and
links to its *Show all* address (`studio.views.step_text`)."""

from __future__ import annotations

from django import template
from django.template.defaultfilters import linebreaksbr
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering import TERMINAL_DOMAINS, render_action, render_observation
from studio.rendering.bounded import bounded_text, head_of, is_cut, render_cut, shown_note

register = template.Library()


def step_text_url(step, field: str) -> str:
    return reverse("step_text", args=[step.pk, field])


def trajectory_text_url(trajectory, field: str) -> str:
    return reverse("trajectory_text", args=[trajectory.pk, field])


@register.simple_tag
def bounded_observation(domain: str, step, chars: int | None = None) -> SafeString:
    """`chars`: a list's own bound for each of its steps (below the page's setting)."""
    url = step_text_url(step, "observation")
    if chars and is_cut(step.observation, chars):
        css = "term" if domain in TERMINAL_DOMAINS else "obs-text"
        return render_cut(step.observation, url, css, chars)
    return render_observation(domain, step.observation, step.meta, full_url=url)


@register.simple_tag
def bounded_action(domain: str, step, chars: int | None = None) -> SafeString:
    url = step_text_url(step, "action")
    if chars and is_cut(step.action, chars):
        return render_cut(step.action, url, "action action-text", chars)
    return render_action(domain, step.action, step.meta, full_url=url)


@register.simple_tag
def bounded_field(step, field: str, css: str = "obs-text", chars: int | None = None) -> SafeString:
    """A plain step field (thinking, state, raw output) in a <pre>, bounded (`chars`: a
    list's own bound for each of its steps)."""
    return bounded_text(getattr(step, field), step_text_url(step, field), css, chars)


@register.simple_tag
def bounded_task(trajectory, pre: bool = False) -> SafeString:
    """The trajectory's task: in a <pre> (`pre`) or as paragraphs, bounded."""
    text = trajectory.task_instruction or ""
    url = trajectory_text_url(trajectory, "task")
    if pre:
        return bounded_text(text, url, "task-text")
    note = shown_note(len(text), url) if is_cut(text) else ""
    return format_html(
        '<div class="task-text">{}</div>{}', linebreaksbr(head_of(text), autoescape=True), note
    )
