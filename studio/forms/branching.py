"""Forms of the branching area: the simulate-from-here editor and branch renaming.

The editor's fields are the input of `inference.simulation.request.SimulationRequest`: the
form parses what the browser sends (numbers, choices), the request checks everything else
and its messages are shown on the fields they name. Limits, backends and defaults come from
`inference.simulation.limits`; the form repeats none of them."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.conf import settings

from inference import perturbations as perturbing
from inference.simulation import limits
from inference.simulation.request import (
    Defaults,
    ForkFacts,
    InvalidRequest,
    SimulationRequest,
)
from studio.forms.fields import MAX_ID, FiniteFloatField, PlainNameField, id_field
from studio.models import Domain, EndpointRole, ModelEndpoint, Perturbation, World
from studio.models.trajectories import BranchOrigin
from studio.services.endpoints import (
    agent_input,
    endpoints_for,
    sampling_defaults,
    world_input,
)
from studio.services.perturbations import rule_input, sweep_input

# The usual shapes of an agent action per domain, offered as snippets in the editor.
ACTION_SNIPPETS: dict[str, list[tuple[str, str]]] = {
    Domain.MCP: [
        ("Tool call", '{\n  "name": "tool_name",\n  "arguments": {\n    "key": "value"\n  }\n}'),
        ("Tool call, no arguments", '{\n  "name": "tool_name",\n  "arguments": {}\n}'),
    ],
    Domain.SEARCH: [
        ("Search", "search[query terms]"),
        ("Open result", "lookup[exact phrase]"),
        ("Finish", "finish[answer]"),
    ],
    Domain.TERMINAL: [
        ("List files", "ls -la"),
        ("Read a file", "cat path/to/file"),
        ("Run tests", "python -m pytest -q"),
    ],
    Domain.SWE: [
        ("Open file", "open path/to/file.py"),
        ("Search code", 'grep -rn "pattern" .'),
        ("Edit lines", "edit 10:12\nnew text\nend_of_edit"),
        ("Submit", "submit"),
    ],
    Domain.ANDROID: [
        ("Click", '{"action_type": "click", "index": 0}'),
        ("Type text", '{"action_type": "input_text", "text": "hello", "index": 0}'),
        ("Scroll", '{"action_type": "scroll", "direction": "down"}'),
        ("Open app", '{"action_type": "open_app", "app_name": "Settings"}'),
        ("Navigate back", '{"action_type": "navigate_back"}'),
    ],
    Domain.WEB: [
        ("Click", "Click [1]"),
        ("Type", "Type [1]; search text"),
        ("Scroll", "Scroll [WINDOW]; down"),
        ("Go back", "GoBack"),
        ("Answer", "ANSWER; the answer"),
    ],
    Domain.OS: [
        ("Shell command", "ls /home"),
        ("Read a file", "cat /etc/hostname"),
        ("Answer", "answer(the answer)"),
    ],
}


def pretty_json_or_none(text: str) -> str | None:
    """The text re-indented when it is a JSON object or list, else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return json.dumps(value, indent=2, ensure_ascii=False)


class EndpointSelect(forms.Select):
    """Options carry the endpoint's kind and default sampling (the editor's script fills the
    sampling fields from them when another model is picked)."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        endpoint = getattr(value, "instance", None)
        if endpoint is not None:
            option["attrs"]["data-kind"] = endpoint.kind
            for key, setting in sampling_defaults(endpoint).items():
                option["attrs"][f"data-{key.replace('_', '-')}"] = str(setting)
        return option


# Request fields about a model, shown on the field that picks it.
WORLD_FIELDS = {"backend", "model", "base_url", "supports_n"}
AGENT_FIELDS = {"agent_model", "agent_base_url"}


class SimulateForm(forms.Form):
    """Branch at one step: the (edited) action, how many futures, how to sample them, and
    which of the project's models run. `cleaned_data["request"]` holds the validated
    SimulationRequest."""

    action = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        strip=False,
        required=False,
    )
    action_format = forms.ChoiceField(
        choices=list(limits.ACTION_FORMATS.items()), initial="auto", label="Action format"
    )
    mode = forms.ChoiceField(choices=list(limits.MODES.items()), initial="next")
    max_steps = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=limits.MAX_ROLLOUT_STEPS,
        label="Max steps",
        help_text=f"Agent rollout only: steps the agent takes, 1-{limits.MAX_ROLLOUT_STEPS}. "
        "Replay re-simulates every later recorded step.",
    )
    n = forms.IntegerField(label="Futures (N)", initial=1)
    temperature = FiniteFloatField(initial=limits.DEFAULT_TEMPERATURE)
    top_p = FiniteFloatField(label="top_p", initial=limits.DEFAULT_TOP_P)
    max_tokens = forms.IntegerField(label="max_tokens", initial=limits.DEFAULT_MAX_TOKENS)
    seed = forms.IntegerField(required=False, help_text="Blank: random.")
    world_endpoint = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(),
        label="World model",
        empty_label=None,
        widget=EndpointSelect,
    )
    agent_endpoint = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(),
        required=False,
        label="Agent model",
        empty_label="(none)",
        widget=EndpointSelect,
        help_text="Agent rollout only: the model that proposes each next action.",
    )

    perturbation = forms.ModelChoiceField(
        queryset=Perturbation.objects.none(),
        required=False,
        label="Perturb this step",
        empty_label="(none)",
    )
    perturbation_mode = forms.ChoiceField(
        choices=[("", "as the library says"), *perturbing.MODES.items()],
        required=False,
        label="Applied",
    )
    rule_perturbation = forms.ModelChoiceField(
        queryset=Perturbation.objects.none(),
        required=False,
        label="Perturb later steps",
        empty_label="(none)",
        help_text="Replay and rollout: a rule over the steps after this one.",
    )
    rule_first_step = forms.IntegerField(
        required=False, min_value=0, max_value=MAX_ID, label="from step"
    )
    rule_last_step = forms.IntegerField(
        required=False, min_value=0, max_value=MAX_ID, label="to step"
    )
    rule_tool = forms.CharField(
        required=False,
        max_length=200,
        label="only tool",
        help_text="Blank: every action. A JSON call's name, or a command's first word.",
    )
    rule_probability = FiniteFloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        label="probability",
        help_text="0-1; blank: 1 (every matching step).",
    )
    sweep = forms.ModelMultipleChoiceField(
        queryset=Perturbation.objects.none(),
        required=False,
        label="Sweep",
        widget=forms.CheckboxSelectMultiple,
        help_text="Tick 2 or more: each runs at this step on its own N futures, in one job, "
        "compared side by side.",
    )

    world = forms.ModelChoiceField(
        queryset=World.objects.none(),
        required=False,
        label="World",
        empty_label="(the trajectory's own environment)",
        help_text="A fictional world of the project: its prompt and tools replace the "
        "trajectory's from this step on (its latest version).",
    )

    def __init__(
        self, *args, fork_index: int, fork: ForkFacts, project, in_world: bool = False, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.fork_index = fork_index
        self.fork = fork
        self.project = project
        world_field = self.fields["world"]
        assert isinstance(world_field, forms.ModelChoiceField)
        world_field.queryset = World.objects.filter(project=project, domain=fork.domain)
        self.has_worlds = world_field.queryset.exists()
        library = Perturbation.objects.filter(project=project).order_by("name")
        for name in ("perturbation", "rule_perturbation", "sweep"):
            field = self.fields[name]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = library
        self.has_perturbations = library.exists()
        self.fields["rule_probability"].widget.attrs.update(step="0.05", min="0", max="1")
        worlds = endpoints_for(project, EndpointRole.WORLD)
        agents = endpoints_for(project, EndpointRole.AGENT)
        world_field = self.fields["world_endpoint"]
        agent_field = self.fields["agent_endpoint"]
        assert isinstance(world_field, forms.ModelChoiceField)
        assert isinstance(agent_field, forms.ModelChoiceField)
        world_field.queryset = worlds
        agent_field.queryset = agents
        self.has_agents = agents.exists()
        first_world = worlds.first()
        if in_world:
            # a trajectory started in a world refuses the baseline (it reads no world's
            # prompt): start on a model that reads it, when the project has one
            first_world = worlds.exclude(kind="retrieval").first() or first_world
        first_agent = agents.first()
        if not self.is_bound:
            world_field.initial = first_world.pk if first_world else None
            agent_field.initial = first_agent.pk if first_agent else None
            for key, value in sampling_defaults(first_world).items():
                self.fields[key].initial = value
        for name in ("n", "max_tokens", "max_steps", "seed"):
            self.fields[name].widget.attrs["step"] = "1"
        # the operator's cap (STUDIO_MAX_FUTURES, at most limits.MAX_FUTURES)
        self.fields["n"].widget.attrs.update(min="1", max=str(settings.STUDIO_MAX_FUTURES))
        self.fields["max_steps"].widget.attrs.update(min="1", max=str(limits.MAX_ROLLOUT_STEPS))
        self.fields["temperature"].widget.attrs.update(
            step="0.05", min="0", max=str(limits.TEMPERATURE_MAX)
        )
        self.fields["top_p"].widget.attrs.update(step="0.01", min="0", max="1")
        self.fields["max_tokens"].widget.attrs.update(min="1", max=str(limits.MAX_TOKENS))

    @property
    def steps_after(self) -> int:
        """Recorded steps after the fork step: what a replay re-simulates."""
        return max(0, self.fork.step_count - self.fork_index - 1)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # Fields that failed to parse are left out (their error already shows); the request
        # checks the rest, so every problem is reported at once.
        given = {
            name: data[name]
            for name in self.fields
            if name in data and name not in ("world_endpoint", "agent_endpoint", *LIBRARY_FIELDS)
        }
        rule_fields = self._perturbation_input(data, given)
        world = data.get("world_endpoint")
        agent = data.get("agent_endpoint")
        if data.get("world") is not None and world is not None and world.kind == "retrieval":
            self.add_error(
                "world",
                "The retrieval baseline answers with recorded observations and never reads a "
                "world's prompt: pick a world model to simulate in a world.",
            )
        if world is not None:
            given.update(world_input(world))
        if agent is not None:
            given.update(agent_input(agent))
        try:
            data["request"] = SimulationRequest.build(
                {**given, "fork_index": self.fork_index}, fork=self.fork, defaults=NO_DEFAULTS
            )
        except InvalidRequest as exc:
            for name, messages in exc.errors.items():
                target = (
                    "world_endpoint"
                    if name in WORLD_FIELDS
                    else "agent_endpoint"
                    if name in AGENT_FIELDS
                    else name
                    if name in self.fields
                    else None
                )
                if name == "perturbations" and rule_fields:
                    at = re.match(r"perturbations\[(\d+)\]", messages[0])
                    target = rule_fields[min(int(at.group(1)) if at else 0, len(rule_fields) - 1)]
                for message in messages:
                    if target is None or target not in self.errors:
                        self.add_error(target, _sentence(message))
        return data

    @property
    def world_version(self):
        world = (getattr(self, "cleaned_data", None) or {}).get("world")
        return world.latest if world is not None else None

    def _perturbation_input(self, data: dict[str, Any], given: dict[str, Any]) -> list[str]:
        """The library choices as the request's `perturbations` and `sweep`; returns the
        form field behind each rule, in order, to show the request's messages on."""
        mode = data.get("perturbation_mode") or ""
        rules: list[dict[str, Any]] = []
        fields: list[str] = []
        here = data.get("perturbation")
        if here is not None:
            rules.append(
                rule_input(here, mode=mode, first_step=self.fork_index, last_step=self.fork_index)
            )
            fields.append("perturbation")
        later = data.get("rule_perturbation")
        if later is not None:
            first = data.get("rule_first_step")
            rules.append(
                rule_input(
                    later,
                    mode=mode,
                    first_step=self.fork_index + 1 if first is None else first,
                    last_step=data.get("rule_last_step"),
                    tool=(data.get("rule_tool") or "").strip(),
                    probability=data.get("rule_probability"),
                )
            )
            fields.append("rule_perturbation")
        elif data.get("rule_probability") is not None or (data.get("rule_tool") or "").strip():
            self.add_error(
                "rule_perturbation", "Choose the perturbation these rule fields are for."
            )
        swept = list(data.get("sweep") or [])
        if swept and here is not None:
            self.add_error(
                "sweep", "Perturb this step with one perturbation or sweep several, not both."
            )
        elif swept:
            given["sweep"] = sweep_input(swept, mode)
        if rules:
            given["perturbations"] = rules
        return fields


# Editor fields that pick from the perturbation library (turned into request input above)
# or a world (the job's, not the request's).
LIBRARY_FIELDS = (
    "world",
    "perturbation",
    "perturbation_mode",
    "rule_perturbation",
    "rule_first_step",
    "rule_last_step",
    "rule_tool",
    "rule_probability",
    "sweep",
)


# The form always names its models: nothing is filled in behind the user's back.
NO_DEFAULTS = Defaults()


def _sentence(message: str) -> str:
    return message if message.endswith(".") else message + "."


class RenameBranchForm(forms.Form):
    name = PlainNameField(
        max_length=200,
        what="the branch's name",
        error_messages={"required": "A branch needs a name."},
    )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A branch needs a name.")
        return name


COMPARE_DIFFS = [
    ("meaning", "Meaning: JSON by key, text ignoring line-end whitespace and colour codes"),
    ("words", "Raw text, word by word"),
    ("lines", "Raw text, line by line"),
]


class _BranchChoiceForm(forms.Form):
    """A form whose `b` field picks among the given branches (of one trajectory)."""

    def __init__(self, *args, branches, **kwargs):
        super().__init__(*args, **kwargs)
        self.branches = {b.pk: b for b in branches}
        field = self.fields["b"]
        assert isinstance(field, forms.TypedMultipleChoiceField)
        field.choices = [(b.pk, b.name) for b in branches]


class CompareForm(_BranchChoiceForm):
    """`?b=1&b=2...` (2-6 branches of the trajectory), or `?fork=<branch>&at=<index>`: the
    futures of one fork as a summary of outcomes plus at most 6 columns (`b` picks them;
    default: the recorded branch and the outcomes' representatives). The trajectory's
    branches are passed in to bound the choices."""

    MIN_BRANCHES = 2
    MAX_BRANCHES = 6

    b = forms.TypedMultipleChoiceField(coerce=int, required=False, label="Branches")
    fork = id_field(required=False)
    at = forms.IntegerField(required=False, min_value=0, max_value=MAX_ID)
    # which action's futures (`studio.services.futures.action_key`); default: the most tried
    action = forms.RegexField(regex=r"^[0-9a-f]{1,40}$", required=False)
    diff = forms.ChoiceField(choices=COMPARE_DIFFS, required=False)
    start = forms.IntegerField(required=False, min_value=0, max_value=MAX_ID)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        fork, at, picked = data.get("fork"), data.get("at"), data.get("b") or []
        if self.errors:
            return data
        unique = list(dict.fromkeys(picked))
        if fork is not None:
            return self._clean_fork(data, fork, at, unique)
        if not self.MIN_BRANCHES <= len(unique) <= self.MAX_BRANCHES:
            raise forms.ValidationError(
                f"Pick {self.MIN_BRANCHES} to {self.MAX_BRANCHES} branches to compare "
                f"(got {len(unique)})."
            )
        data["selected"] = [self.branches[pk] for pk in unique]
        return data

    def _clean_fork(self, data, fork: int, at: int | None, picked: list[int]):
        parent = self.branches.get(fork)
        if parent is None:
            raise forms.ValidationError(f"Branch {fork} is not a branch of this trajectory.")
        # futures: simulated children (recorded alternatives, e.g. ToolBench's, are not)
        steps = sorted(
            {
                b.fork_index
                for b in self.branches.values()
                if b.parent_id == fork and b.origin != BranchOrigin.RECORDED
            }
        )
        if at is None and len(steps) == 1:
            at = steps[0]
        if at is None:
            where = ", ".join(str(i) for i in steps) or "none"
            raise forms.ValidationError(
                f"Branch {parent.name!r} has futures forked at several steps ({where}): "
                "say which with at=."
            )
        if at not in steps:
            raise forms.ValidationError(f"Branch {parent.name!r} has no futures at step {at}.")
        if len(picked) > self.MAX_BRANCHES:
            raise forms.ValidationError(
                f"Pick at most {self.MAX_BRANCHES} columns (got {len(picked)})."
            )
        data["fork_parent"], data["at"] = parent, at
        data["chosen"] = [self.branches[pk] for pk in picked]
        return data


class CompareRowsForm(_BranchChoiceForm):
    """One window of a comparison's rows (`?b=...&diff=&from=`), asked for as the page
    scrolls: `run` (a run of identical steps that began there goes on at `from`), or `to`
    (the rows from..to of an opened run); `at` + `column`: one cell in full ("Show all").
    `until`: the steps from..until of a gap the find bar left; `jump`: the row of that step
    (the find bar's) with the steps from `start` to it folded (`to`: they are a run of
    identical steps) or left as a gap."""

    b = forms.TypedMultipleChoiceField(coerce=int, label="Branches")
    diff = forms.ChoiceField(choices=COMPARE_DIFFS, required=False)
    start = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    run = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    to = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    at = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    column = id_field(required=False)
    until = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    jump = forms.IntegerField(min_value=0, max_value=MAX_ID, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        unique = list(dict.fromkeys(data.get("b") or []))
        start, jump = data.get("start"), data.get("jump")
        for name in ("until", "jump"):
            if data.get(name) is not None and start is not None and data[name] < start:
                self.add_error(name, f"{name}= is before start= ({data[name]} < {start}).")
        for name in ("until", "to"):
            if jump is not None and data.get(name) is not None and jump > data[name]:
                self.add_error("jump", f"jump= is past {name}= ({jump} > {data[name]}).")
        if not 1 <= len(unique) <= CompareForm.MAX_BRANCHES:
            raise forms.ValidationError(
                f"Pick 1 to {CompareForm.MAX_BRANCHES} branches (got {len(unique)})."
            )
        data["selected"] = [self.branches[pk] for pk in unique]
        start, run, to = data.get("start"), data.get("run"), data.get("to")
        if data.get("at") is None and start is None:
            self.add_error("start", "Say where the rows start (start=).")
        if run is not None and start is not None and run > start:
            self.add_error("run", f"A run that goes on at step {start} cannot begin after it.")
        if to is not None and start is not None and to < start:
            self.add_error("to", f"The rows end before they start ({start}–{to}).")
        column = data.get("column")
        if data.get("at") is not None and column not in unique:
            self.add_error("column", f"Column {column} is not one of the compared branches.")
        return data
