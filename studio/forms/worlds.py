"""The world editor: the world's parts as forms (basics, and a formset per list part), put
together into the world's JSON and checked once by `inference.worlds.parse_world`. A tool's
parameters are JSON typed into a textarea: their syntax is checked here, on the tool's field;
everything else (JSON Schema validity, duplicate names, sizes) by `parse_world`, whose
message names the part and the tool."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.forms import formset_factory

from inference import worlds as worlding
from studio.models import Domain, World

TEXTAREA = {"rows": 3, "spellcheck": "false"}


class BasicsForm(forms.Form):
    name = forms.CharField(max_length=200)
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
    name = forms.CharField(required=False, max_length=200)
    description = forms.CharField(required=False, max_length=2000)
    parameters = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=TEXTAREA),
        help_text='A JSON Schema, e.g. {"type": "object", "properties": {"city": {"type": '
        '"string"}}, "required": ["city"]}. Blank: no arguments.',
    )

    def clean_parameters(self) -> Any:
        text = self.cleaned_data.get("parameters", "").strip()
        if not text:
            return {"type": "object", "properties": {}}
        try:
            return json.loads(text)
        except RecursionError:
            raise forms.ValidationError("The JSON is nested too deeply.") from None
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
            ) from None


class DocumentForm(forms.Form):
    title = forms.CharField(required=False, max_length=500)
    url = forms.CharField(required=False, max_length=2000, label="URL")
    snippet = forms.CharField(required=False, max_length=2000)
    body = forms.CharField(required=False, widget=forms.Textarea(attrs=TEXTAREA))


class ScreenForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
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
]


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
        not str(v or "").strip() for k, v in data.items() if k not in ("DELETE", "parameters")
    ) and (not isinstance(form, ToolForm) or not data.get("name"))


class WorldEditor:
    """The editor's forms bound together; `is_valid()` builds `spec` (a WorldSpec) or
    collects `errors` (messages that name the part, shown above the forms)."""

    def __init__(self, data=None, *, project, world: World | None = None, initial=None):
        initial = initial or {}
        self.basics = BasicsForm(
            data, project=project, world=world, initial=initial.get("basics"), prefix="world"
        )
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
            out.append((prefix, title, formset, prefix in used or filled))
        return out

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
                imported = json.loads(self.import_text)
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
        }

    def is_valid(self) -> bool:
        ok = self.basics.is_valid()
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
            self.spec = worlding.parse_world(data)
        except worlding.WorldError as exc:
            self.errors.append(_part_message(str(exc)))
            return False
        return True


def _part_message(message: str) -> str:
    """A parse_world message as the editor says it: `tools[1] (x): ...` -> `Tools, row 2 (x): ...`."""
    m = re.match(r"(\w+)\[(\d+)\](.*)", message)
    if m:
        titles = {p: t for p, _, t in PARTS}
        part = titles.get(m.group(1), m.group(1))
        message = f"{part}, row {int(m.group(2)) + 1}{m.group(3)}"
    return message[0].upper() + message[1:] + ("" if message.endswith(".") else ".")


class WorldImportForm(forms.Form):
    file = forms.FileField(help_text="A world file (JSON), as Export writes it.")


class StartTrajectoryForm(forms.Form):
    task = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Task instruction",
        help_text="What the agent is asked to do in this world.",
        max_length=5000,
    )
