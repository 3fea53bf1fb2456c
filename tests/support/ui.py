"""Trajectories made straight with the ORM for the UI tests and the page benchmark."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from html.parser import HTMLParser

from studio.models import Branch, BranchOrigin, Project, Step, Tag, Trajectory

XSS_PAYLOADS = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "'><iframe src=javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "</textarea><script>alert(2)</script>",
)


def make_trajectory(
    project: Project,
    *,
    title: str = "A trajectory",
    domain: str = "terminal",
    n_steps: int = 3,
    steps: Sequence[tuple[str, str]] | None = None,
    step_factory: Callable[[int], dict] | None = None,
    source_format: str = "native",
    task_instruction: str = "Do the task.",
    tags: Sequence[str] = (),
    key: str | None = None,
    **fields,
) -> Trajectory:
    """A trajectory with its root branch "recorded" and steps: `steps` as (action, observation)
    pairs, or `step_factory(i)` giving Step fields, or n_steps generic steps."""
    if steps is not None:
        rows = [{"action": a, "observation": o} for a, o in steps]
    elif step_factory is not None:
        rows = [step_factory(i) for i in range(n_steps)]
    else:
        rows = [{"action": f"echo {i}", "observation": f"output {i}"} for i in range(n_steps)]
    traj = Trajectory.objects.create(
        project=project,
        title=title,
        domain=domain,
        source_format=source_format,
        source_key=key or uuid.uuid4().hex,
        task_instruction=task_instruction,
        step_count=len(rows),
        **fields,
    )
    root = Branch.objects.create(trajectory=traj, name="recorded", origin=BranchOrigin.RECORDED)
    Step.objects.bulk_create(
        [Step(branch=root, index=i, **row) for i, row in enumerate(rows)], batch_size=200
    )
    for name in tags:
        tag, _ = Tag.objects.get_or_create(project=project, name=name)
        traj.tags.add(tag)
    return traj


def make_child_branch(
    traj: Trajectory, *, fork_index: int, name: str = "what-if", n_own: int = 2, **fields
) -> Branch:
    root = traj.branches.get(parent__isnull=True)
    child = Branch.objects.create(
        trajectory=traj,
        parent=root,
        fork_index=fork_index,
        name=name,
        origin=fields.pop("origin", BranchOrigin.SIMULATED),
        **fields,
    )
    Step.objects.bulk_create(
        [
            Step(
                branch=child,
                index=fork_index + i,
                action=f"alt action {fork_index + i}",
                observation=f"simulated observation {fork_index + i}",
                provenance="replayed",
                observation_source="simulated",
                parse_status="well_formed",
            )
            for i in range(n_own)
        ]
    )
    return child


# ---------------------------------------------------------------- markup safety checks

# Tags our pages and renderers emit; a payload that became markup shows up as another tag
# (script, img, svg, iframe without sandbox...) or as an on* attribute.
SAFE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "link",
    "body",
    "header",
    "nav",
    "main",
    "section",
    "aside",
    "article",
    "footer",
    "div",
    "span",
    "p",
    "a",
    "pre",
    "code",
    "kbd",
    "strong",
    "em",
    "b",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "details",
    "summary",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "form",
    "input",
    "select",
    "option",
    "label",
    "button",
    "textarea",
    "noscript",
    "small",
    "time",
    "iframe",
    "script",
}


class _MarkupAudit(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text: list[str] = []
        self.attr_text: list[str] = []
        self.iframes: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs_d = {k: (v or "") for k, v in attrs}
        if tag not in SAFE_TAGS:
            self.problems.append(f"unexpected <{tag}> {attrs_d}")
        for name, value in attrs_d.items():
            if name.startswith("on"):
                self.problems.append(f"event handler attribute {name}={value!r} on <{tag}>")
            if name in ("href", "src", "action", "formaction", "hx-get", "hx-post"):
                if value.strip().lower().startswith(("javascript:", "data:", "vbscript:")):
                    self.problems.append(f"{name}={value!r} on <{tag}>")
            if name != "srcdoc":
                self.attr_text.append(value)
        if tag == "script":
            src = attrs_d.get("src", "")
            if not (src.startswith("/static/") or attrs_d.get("type") == "application/json"):
                self.problems.append(f"inline or foreign script {attrs_d}")
        if tag == "iframe":
            self.iframes.append(attrs_d)
            if "sandbox" not in attrs_d or "allow-scripts" in attrs_d["sandbox"]:
                self.problems.append(f"iframe without a script-free sandbox {attrs_d}")
            if attrs_d.get("src"):
                self.problems.append(f"iframe with a src {attrs_d['src']!r}")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)


def audit_markup(html: str) -> _MarkupAudit:
    audit = _MarkupAudit()
    audit.feed(html)
    audit.close()
    return audit


def assert_markup_safe(html: str, payloads: Sequence[str] = XSS_PAYLOADS) -> _MarkupAudit:
    """No payload became markup: only known tags, no on* attributes, no javascript: URLs, no
    script but our own static files, iframes sandboxed without scripts; and no payload appears
    verbatim (unescaped) in the HTML source outside an iframe's srcdoc."""
    audit = audit_markup(html)
    assert not audit.problems, audit.problems
    for payload in payloads:
        if "<" in payload or '"' in payload:
            assert payload not in html, f"unescaped payload {payload!r} in the HTML"
    return audit
