"""The world editor: the world's parts as forms (basics, and a formset per list part), put
together into the world's JSON and checked once by `inference.worlds.parse_world`. A tool's
parameters are JSON typed into a textarea: their syntax is checked here, on the tool's field;
everything else (JSON Schema validity, duplicate names, sizes) by `parse_world`, whose
message names the part and the tool. Tasks (with their success criteria) and state keys are
rows like the tools; the world's rubric and termination, and a task's own rubric, are JSON
in textareas (the format `inference.rubrics` describes), checked the same way."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.forms import formset_factory

from inference import worlds as worlding
from studio.forms.fields import PlainNameField, loads_json
from studio.models import Domain, World

TEXTAREA = {"rows": 3, "spellcheck": "false"}


class BasicsForm(forms.Form):
    name = PlainNameField(max_length=200, what="the world's name")
    domain = forms.ChoiceField(choices=Domain.choices)
    description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What this world is: the company, the machine, the web site.",
    )
    rules = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What always holds (e.g. 'Orders older than 30 days cannot be refunded').",
    )
    initial_state = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Initial state",
        help_text="Where things stand before the agent's first action.",
    )

    def __init__(self, *args, project, world: World | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self.world = world

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A world needs a name.")
        clash = World.objects.filter(project=self.project, name=name)
        if self.world is not None:
            clash = clash.exclude(pk=self.world.pk)
        if clash.exists():
            raise forms.ValidationError(f"This project already has a world named {name!r}.")
        return name


class KnowledgeForm(forms.Form):
    text = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Fact, entity or record"
    )


class FileForm(forms.Form):
    path = forms.CharField(required=False, max_length=500)
    content = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs=TEXTAREA))


class ToolForm(forms.Form):
    name = forms.CharField(
        required=False,
        max_length=64,
        help_text=f"{worlding.TOOL_NAME_RULE[0].upper()}{worlding.TOOL_NAME_RULE[1:]}.",
    )
    description = forms.CharField(required=False, max_length=2000)
    parameters = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=TEXTAREA),
        help_text='A JSON Schema, e.g. {"type": "object", "properties": {"city": {"type": '
        '"string"}}, "required": ["city"]}. Blank: no arguments.',
    )

    def clean_name(self) -> str:
        name = self.cleaned_data.get("name", "").strip()
        problem = worlding.tool_name_problem(name) if name else None
        if problem is not None:
            raise forms.ValidationError(problem[0].upper() + problem[1:] + ".")
        return name

    def clean_parameters(self) -> Any:
        text = self.cleaned_data.get("parameters", "").strip()
        if not text:
            return {"type": "object", "properties": {}}
        try:
            schema = worlding.loads(text, check=False)
            worlding.check_finite(schema, "parameters")  # NaN / Infinity, naming the path
            return schema
        except worlding.WorldError as exc:
            raise forms.ValidationError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from None
        except RecursionError:
            raise forms.ValidationError("The JSON is nested too deeply.") from None
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
            ) from None


def _json_field(value: str, what: str) -> Any:
    """The JSON typed into a textarea (None when blank); a syntax error names the line, NaN
    or Infinity its path."""
    text = (value or "").strip()
    if not text:
        return None
    return loads_json(text, what)


RUBRIC_HELP = (
    'JSON: {"step": [checks], "episode": [checks]}; a check is {"name", "kind": exact | '
    'contains | regex | state | judge, "weight", ...}.'
)


class TaskForm(forms.Form):
    id = forms.CharField(
        required=False,
        max_length=100,
        label="Id",
        help_text="A slug, e.g. refund-order.",
        widget=forms.TextInput(attrs={"placeholder": "refund-order"}),
    )
    instruction = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the agent is told.",
    )
    success_criteria = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Success criteria",
        help_text="What a judge checks at the end (a judge check's default criteria).",
    )
    expected = forms.CharField(
        required=False,
        max_length=5000,
        label="Expected answer",
        help_text="The final answer; exact and contains checks without a pattern compare with it.",
    )
    max_steps = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=worlding.MAX_TASK_STEPS,
        label="Max steps",
        help_text="The episode's limit when reset gives none (a max_steps given to reset wins).",
    )
    rubric = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={**TEXTAREA, "placeholder": "Blank: the world's rubric"}),
        label="Rubric of this task",
        help_text="Blank: the world's rubric. " + RUBRIC_HELP,
    )

    def clean_rubric(self) -> Any:
        return _json_field(self.cleaned_data.get("rubric", ""), "Rubric")


class StateKeyForm(forms.Form):
    name = PlainNameField(required=False, max_length=100, what="the state key")
    description = forms.CharField(
        required=False, max_length=2000, help_text="What the value means, e.g. true once refunded."
    )


class RewardsForm(forms.Form):
    """The world's rubric and termination, as JSON."""

    rubric = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        label="Rubric",
        help_text=RUBRIC_HELP + " Step checks score every observation; episode checks score "
        "the episode at its end.",
    )
    termination = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        label="Termination",
        help_text='JSON: {"terminal": [checks that end the episode when one passes], "submit": '
        '{"tool": "submit_answer", "argument": "answer"} or {"prefix": "FINAL ANSWER:"}}.',
    )

    def clean_rubric(self) -> Any:
        return _json_field(self.cleaned_data.get("rubric", ""), "Rubric")

    def clean_termination(self) -> Any:
        return _json_field(self.cleaned_data.get("termination", ""), "Termination")


class DocumentForm(forms.Form):
    title = forms.CharField(required=False, max_length=500)
    url = forms.CharField(required=False, max_length=2000, label="URL")
    snippet = forms.CharField(required=False, max_length=2000)
    body = forms.CharField(required=False, widget=forms.Textarea(attrs=TEXTAREA))


class ScreenForm(forms.Form):
    name = PlainNameField(required=False, max_length=200, what="the screen's name")
    elements = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs=TEXTAREA),
        help_text="Its element list or accessibility tree, as the domain shows screens.",
    )


class DemonstrationForm(forms.Form):
    action = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs=TEXTAREA))
    observation = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs=TEXTAREA)
    )


# (prefix, form, title): every list part of a world, in the editor's order
PARTS: list[tuple[str, type[forms.Form], str]] = [
    ("knowledge", KnowledgeForm, "Knowledge"),
    ("files", FileForm, "Files"),
    ("tools", ToolForm, "Tools"),
    ("corpus", DocumentForm, "Search corpus"),
    ("screens", ScreenForm, "Screens"),
    ("demonstrations", DemonstrationForm, "Demonstrations"),
    ("tasks", TaskForm, "Tasks"),
    ("state_keys", StateKeyForm, "State keys"),
]
# Parts a form may lack (posted by a client made before they existed): none of them.
OPTIONAL_PARTS = ("tasks", "state_keys")
ALWAYS_OPEN = {"tasks"}  # every domain's worlds have tasks


# The parts each domain's worlds usually have (knowledge and demonstrations: every domain).
RELEVANT = {
    "mcp": {"knowledge", "tools", "demonstrations"},
    "search": {"knowledge", "corpus", "demonstrations"},
    "terminal": {"knowledge", "files", "demonstrations"},
    "swe": {"knowledge", "files", "demonstrations"},
    "os": {"knowledge", "files", "screens", "demonstrations"},
    "android": {"knowledge", "screens", "demonstrations"},
    "web": {"knowledge", "screens", "demonstrations"},
}


def _blank(form: forms.Form) -> bool:
    data = getattr(form, "cleaned_data", {}) or {}
    return all(
        not str(v if v is not None else "").strip()
        for k, v in data.items()
        if k not in ("DELETE", "parameters")
    ) and (not isinstance(form, ToolForm) or not data.get("name"))


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) if value else ""


class WorldEditor:
    """The editor's forms bound together; `is_valid()` builds `spec` (a WorldSpec) or
    collects `errors` (messages that name the part, shown above the forms)."""

    def __init__(self, data=None, *, project, world: World | None = None, initial=None):
        initial = initial or {}
        if data is not None and any(f"{p}-TOTAL_FORMS" not in data for p in OPTIONAL_PARTS):
            data = data.copy()
            for prefix in OPTIONAL_PARTS:
                if f"{prefix}-TOTAL_FORMS" not in data:
                    data[f"{prefix}-TOTAL_FORMS"] = "0"
                    data[f"{prefix}-INITIAL_FORMS"] = "0"
        self.basics = BasicsForm(
            data, project=project, world=world, initial=initial.get("basics"), prefix="world"
        )
        self.rewards = RewardsForm(data, initial=initial.get("rewards"), prefix="rewards")
        self.formsets = {}
        for prefix, form, _ in PARTS:
            factory = formset_factory(form, extra=1, can_delete=True)
            self.formsets[prefix] = factory(data, prefix=prefix, initial=initial.get(prefix))
        self.import_text = (data or {}).get("tools_import", "") if data is not None else ""
        self.spec: worlding.WorldSpec | None = None
        self.errors: list[str] = []

    @classmethod
    def for_spec(cls, spec: worlding.WorldSpec, *, project, world: World | None):
        initial: dict[str, Any] = {
            "basics": {
                "name": spec.name,
                "domain": spec.domain,
                "description": spec.description,
                "rules": spec.rules,
                "initial_state": spec.initial_state,
            },
            "knowledge": [{"text": k} for k in spec.knowledge],
            "files": [{"path": p, "content": c} for p, c in spec.files],
            "tools": [
                {
                    "name": t["function"]["name"],
                    "description": t["function"]["description"],
                    "parameters": json.dumps(t["function"]["parameters"], indent=2),
                }
                for t in spec.tools
            ],
            "corpus": [vars(d) for d in spec.corpus],
            "screens": [vars(s) for s in spec.screens],
            "demonstrations": [vars(d) for d in spec.demonstrations],
            "tasks": [
                {
                    "id": t.id,
                    "instruction": t.instruction,
                    "success_criteria": t.success_criteria,
                    "expected": t.expected,
                    "max_steps": t.max_steps,
                    "rubric": _json_text(t.rubric.to_file() if t.rubric is not None else None),
                }
                for t in spec.tasks
            ],
            "state_keys": [vars(k) for k in spec.state_keys],
            "rewards": {
                "rubric": _json_text(spec.rubric.to_file() if spec.rubric else None),
                "termination": _json_text(spec.termination.to_file() if spec.termination else None),
            },
        }
        return cls(project=project, world=world, initial=initial)

    def file_rows(self) -> list[tuple[int, str, str]]:
        """(row index, path, content) of the file rows as the form shows them (row i is
        `files-i`); rows without a path are left out."""
        rows = []
        formset = self.formsets["files"]
        for i, form in enumerate(formset.forms):
            if formset.is_bound:
                path = form.data.get(f"files-{i}-path", "")
                content = form.data.get(f"files-{i}-content", "")
            else:
                path = (form.initial or {}).get("path", "")
                content = (form.initial or {}).get("content", "")
            if path.strip():
                rows.append((i, path.strip(), content))
        return rows

    def parts(self):
        """(prefix, title, formset, open): parts the domain uses, or that hold something,
        are open; the others fold away (still there to fill in)."""
        domain = (
            self.basics.data.get("world-domain")
            if self.basics.is_bound
            else (self.basics.initial or {}).get("domain")
        ) or "mcp"
        used = RELEVANT.get(domain, set())
        out = []
        for prefix, _, title in PARTS:
            formset = self.formsets[prefix]
            filled = formset.has_changed() if formset.is_bound else bool(formset.initial)
            out.append((prefix, title, formset, prefix in used or prefix in ALWAYS_OPEN or filled))
        return out

    @property
    def rewards_open(self) -> bool:
        """The rewards part unfolds when it holds something or has an error."""
        form = self.rewards
        if form.is_bound:
            filled = any(form.data.get(f"rewards-{f}", "").strip() for f in form.fields)
            return filled or bool(form.errors)
        return any((form.initial or {}).get(f) for f in form.fields)

    def _rows(self, prefix: str) -> list[dict[str, Any]]:
        rows = []
        for form in self.formsets[prefix].forms:
            data = getattr(form, "cleaned_data", None) or {}
            if data.get("DELETE") or _blank(form):
                continue
            rows.append({k: v for k, v in data.items() if k != "DELETE"})
        return rows

    def world_data(self) -> dict[str, Any]:
        b = self.basics.cleaned_data
        tools = [
            {"type": "function", "function": {"name": r["name"], "description": r["description"],
                                               "parameters": r["parameters"]}}
            for r in self._rows("tools")
        ]  # fmt: skip
        if self.import_text.strip():
            try:
                # NaN / Infinity: refused by read_tools below, naming the path and the tool
                imported = worlding.loads(self.import_text, check=False)
            except RecursionError:
                raise worlding.WorldError(
                    "tools to import: the JSON is nested too deeply"
                ) from None
            except json.JSONDecodeError as exc:
                raise worlding.WorldError(
                    f"tools to import: not valid JSON at line {exc.lineno}, column "
                    f"{exc.colno}: {exc.msg}"
                ) from None
            tools.extend(worlding.read_tools(imported, "tools to import"))
        return {
            "name": b["name"],
            "domain": b["domain"],
            "description": b["description"],
            "rules": b["rules"],
            "initial_state": b["initial_state"],
            "knowledge": [r["text"] for r in self._rows("knowledge")],
            "files": {r["path"]: r["content"] for r in self._rows("files")},
            "tools": tools,
            "corpus": self._rows("corpus"),
            "screens": self._rows("screens"),
            "demonstrations": self._rows("demonstrations"),
            **self._reward_parts(),
        }

    def _reward_parts(self) -> dict[str, Any]:
        """Tasks, state keys, rubric and termination: only what the form holds, so a world
        without them keeps its file."""
        out: dict[str, Any] = {}
        tasks = [
            {k: v for k, v in row.items() if v is not None and not (k == "max_steps" and v == "")}
            for row in self._rows("tasks")
        ]
        if tasks:
            out["tasks"] = tasks
        keys = self._rows("state_keys")
        if keys:
            out["state_keys"] = keys
        r = self.rewards.cleaned_data
        if r.get("rubric") is not None:
            out["rubric"] = r["rubric"]
        if r.get("termination") is not None:
            out["termination"] = r["termination"]
        return out

    def field_messages(self) -> list[str]:
        """Each field's errors, naming the part and the row (`Tools, row 1, parameters: ...`):
        the preview shows them as one types (the marks on the fields come with a save)."""
        titles = {p: t for p, _, t in PARTS}
        out = [f"World, {name}: {e}" for name, errors in self.basics.errors.items() for e in errors]
        out += [
            f"Rewards, {name}: {e}" for name, errors in self.rewards.errors.items() for e in errors
        ]
        for prefix, formset in self.formsets.items():
            out += [f"{titles[prefix]}: {e}" for e in formset.non_form_errors()]
            for i, form in enumerate(formset.forms):
                for name, messages in form.errors.items():
                    out += [f"{titles[prefix]}, row {i + 1}, {name}: {e}" for e in messages]
        return out

    def is_valid(self) -> bool:
        ok = self.basics.is_valid()
        ok = self.rewards.is_valid() and ok
        for formset in self.formsets.values():
            ok = formset.is_valid() and ok
        if not ok:
            self.errors.append("Some fields need attention (marked below).")
            return False
        try:
            data = self.world_data()
            paths = list(data["files"])
            if len(paths) != len(self._rows("files")):
                raise worlding.WorldError("files: two files have the same path")
            self.spec = worlding.parse_world(data, incoming=True)
        except worlding.WorldError as exc:
            self.errors.append(_part_message(str(exc)))
            return False
        return True


def _part_message(message: str) -> str:
    """A parse_world message as the editor says it: `tools[1] (x): ...` -> `Tools, row 2 (x): ...`."""
    m = re.match(r"(\w+)\[(\d+)\](.*)", message, re.DOTALL)
    if m:
        titles = {p: t for p, _, t in PARTS}
        part = titles.get(m.group(1), m.group(1))
        rest = m.group(3)
        # `tasks[0] (refund).instruction is required` -> `Tasks, row 1 (refund): instruction ...`
        dotted = re.match(r"( \([^)]*\))?\.(.*)", rest, re.DOTALL)
        if dotted:
            rest = f"{dotted.group(1) or ''}: {dotted.group(2)}"
        message = f"{part}, row {int(m.group(2)) + 1}{rest}"
    return message[0].upper() + message[1:] + ("" if message.endswith(".") else ".")


class WorldImportForm(forms.Form):
    file = forms.FileField(help_text="A world file (JSON), as Export writes it.")


class StartTrajectoryForm(forms.Form):
    task = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Task instruction",
        help_text="What the agent is asked to do in this world.",
        max_length=5000,
    )
    task_id = forms.CharField(required=False, max_length=100, label="Or one of its tasks")

    def instruction(self, spec: worlding.WorldSpec) -> str | None:
        """The instruction to start with: the world's task picked, else the one typed; None
        (with the form's error) when neither is there."""
        task_id = self.cleaned_data.get("task_id", "").strip()
        if task_id:
            task = spec.task(task_id)
            if task is None:
                self.add_error("task_id", f"{spec.name!r} has no task {task_id!r}.")
                return None
            return task.instruction
        typed = self.cleaned_data.get("task", "").strip()
        if not typed:
            self.add_error("task", "Write the task the agent is given, or pick one of the world's.")
            return None
        return typed
