"""Template helpers of the library and trajectory pages (`{% load ui_tags %}`)."""

from __future__ import annotations

from django import template
from django.template.loader import get_template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from studio.rendering import render_action, render_observation, render_preview
from studio.rendering.json_view import render_json_value
from studio.services.perturbations import PROMPTED_TITLES, PROMPTED_WORDS, prompted_check

register = template.Library()


@register.simple_tag
def url_or_empty(name: str, *args) -> str:
    """`{% url_or_empty 'import_upload' project.pk as import_url %}`: the URL, or "" while
    the view behind that name does not exist yet (areas are built in parallel)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


@register.simple_tag(takes_context=True)
def optional_include(context, template_name: str) -> SafeString | str:
    """Render `template_name` with the current context if some area provides it (e.g. the
    branching area's per-step actions), else nothing."""
    try:
        tmpl = get_template(template_name)
    except template.TemplateDoesNotExist:
        return ""
    return tmpl.render(context.flatten(), context.get("request"))


@register.simple_tag
def step_action(step, domain: str) -> SafeString:
    return render_action(domain, step.action, step.meta)


@register.simple_tag
def step_observation(step, domain: str) -> SafeString:
    """The rendered observation; a step fetched with only the start of a long observation
    (`obs_head`/`obs_len` annotations) gets a preview that loads the full rendering."""
    head = getattr(step, "obs_head", None)
    if head is None:
        return render_observation(domain, step.observation, step.meta)
    total = step.obs_len or 0
    if total <= len(head):
        return render_observation(domain, head, step.meta)
    return render_preview(domain, head, total, reverse("step_observation", args=[step.pk]))


@register.filter
def json_tree(value) -> SafeString:
    return render_json_value(value)


@register.filter
def tool_names(tools) -> list[str]:
    """Names of OpenAI/MCP tool definitions, whatever their nesting."""
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        if not isinstance(fn, dict):
            fn = tool
        name = fn.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


# Short badge words; the title says it in full (Step.provenance_label).
ACTION_BADGES = {
    "recorded": "recorded",
    "replayed": "replayed",
    "edited": "edited",
    "agent": "agent",
    "typed": "typed",  # the playground: a person typed the action (not an edit of one)
}
OBSERVATION_BADGES = {
    "simulated": "simulated obs",
    "perturbed": "perturbed",
    "none": "final answer",
}


def _observation_text(step) -> str:
    """The step's observation, from the head a page read (`obs_head`, its observation
    deferred) when that head is all of it: no query per step."""
    head, length = getattr(step, "obs_head", None), getattr(step, "obs_len", None)
    if isinstance(head, str) and length == len(head):
        return head
    return getattr(step, "observation", "") or ""


@register.simple_tag
def provenance_badge(step) -> SafeString:
    """Where the step's action came from and, unless recorded, where its observation did."""
    action = getattr(step, "provenance", "") or ""
    source = getattr(step, "observation_source", "") or ""
    title = step.provenance_label if hasattr(step, "provenance_label") else action
    html = format_html(
        '<span class="badge prov prov-{}" title="{}">{}</span>',
        action if action in ACTION_BADGES else "other",
        title,
        ACTION_BADGES.get(action, action or "unknown"),
    )
    perturbation = (getattr(step, "meta", None) or {}).get("perturbation")
    if not isinstance(perturbation, dict):
        perturbation = None
    label = str((perturbation or {}).get("label") or (perturbation or {}).get("kind") or "")
    if action != "recorded" and source in OBSERVATION_BADGES:
        word = OBSERVATION_BADGES[source]
        if source == "perturbed" and label:
            word = f"perturbed: {label}"
            title = f"{title}: {label} ({perturbation.get('mode', '')})" if perturbation else title
        html += format_html(
            ' <span class="badge prov obs-{}" title="{}">{}</span>', source, title, word
        )
    # a prompted perturbation was asked of the model: say whether its answer shows it
    shown = None
    if perturbation is not None and perturbation.get("mode") == "prompted":
        shown = prompted_check(perturbation, _observation_text(step))
    if shown is not None and action != "recorded":
        html += format_html(
            ' <span class="badge prov prompted-{}" title="{}">{}</span>',
            shown.replace(" ", "-"),
            PROMPTED_TITLES[shown],
            PROMPTED_WORDS[shown],
        )
    world = (getattr(step, "meta", None) or {}).get("world")
    if isinstance(world, dict) and world.get("name"):
        html += format_html(
            ' <span class="badge prov obs-world" title="{}">{}</span>',
            "Simulated in this fictional world (its prompt and tools replaced the trajectory's)",
            f"world: {world['name']} v{world.get('version', '?')}",
        )
    if perturbation is not None and perturbation.get("changed") is False:
        html += format_html(
            ' <span class="badge prov perturb-noop" title="{}">{}</span>',
            "The perturbation applied here left the observation as it was "
            "(e.g. a schema drift of a field the observation does not have).",
            f"{label}: no effect",
        )
    return html


@register.filter
def human_size(n) -> str:
    n = int(n or 0)
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} B"
