"""Forms of the branching area: the simulate-from-here editor and branch renaming.

All validation of what a user asks the world model to do lives here; views only pass the
cleaned data on to `studio.services.simulation.do_start_simulation`."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings

from studio.models import Domain
from studio.models.jobs import SimulationMode

MAX_FUTURES = 64
MAX_ROLLOUT_STEPS = 50
MAX_TOKENS_LIMIT = 32768
MAX_SEED = 2**31 - 1

BACKEND_CHOICES = [
    ("retrieval", "retrieval (non-neural baseline: nearest recorded observation)"),
    ("openai", "openai (OpenAI-compatible server: vLLM, SGLang, ...)"),
    ("hf", "hf (transformers model in the GPU worker)"),
]

ACTION_KIND_CHOICES = [
    ("auto", "Auto: JSON if it looks like JSON, else text"),
    ("json", "JSON (validated and pretty-printed)"),
    ("text", "Free text"),
]

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

# Domains whose actions are JSON by convention: `[` there opens a JSON list, whereas in a shell
# `[ -f x ]` is a test command.
_JSON_DOMAINS = {Domain.MCP, Domain.ANDROID}


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


def looks_like_json(text: str, domain: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("{") or (stripped.startswith("[") and domain in _JSON_DOMAINS)


def default_model_for(backend: str) -> str:
    if backend == "hf":
        return settings.WORLD_MODEL_PATH or settings.WORLD_MODEL_NAME
    if backend == "openai":
        return settings.WORLD_MODEL_NAME
    return ""


class SimulateForm(forms.Form):
    """Branch at one step: the (edited) action, how many futures, how to sample them."""

    action = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        strip=False,
        required=False,
    )
    action_kind = forms.ChoiceField(choices=ACTION_KIND_CHOICES, initial="auto")
    mode = forms.ChoiceField(choices=SimulationMode.choices, initial=SimulationMode.NEXT)
    max_steps = forms.IntegerField(
        required=False,
        label="Max steps",
        help_text=f"Agent rollout only: steps the agent takes, 1-{MAX_ROLLOUT_STEPS}. Replay "
        "re-simulates every later recorded step.",
    )
    n = forms.IntegerField(label="Futures (N)", initial=1)
    temperature = forms.FloatField(initial=0.7)
    top_p = forms.FloatField(label="top_p", initial=0.95)
    max_tokens = forms.IntegerField(label="max_tokens", initial=1024)
    seed = forms.IntegerField(required=False, help_text="Blank: random.")
    backend = forms.ChoiceField(choices=BACKEND_CHOICES)
    model = forms.CharField(
        required=False,
        max_length=300,
        help_text="Served model name (openai) or local path / hub id (hf). Blank: the default.",
    )
    base_url = forms.CharField(
        required=False,
        max_length=500,
        label="Base URL",
        help_text="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1. Blank: the default.",
    )

    def __init__(self, *args, domain: str, steps_after: int, **kwargs):
        """`steps_after`: steps the branch has after the fork step (what replay can redo)."""
        super().__init__(*args, **kwargs)
        self.domain = domain
        self.steps_after = steps_after
        self.fields["backend"].initial = settings.WORLD_MODEL_BACKEND
        self.fields["model"].widget.attrs["placeholder"] = (
            default_model_for(settings.WORLD_MODEL_BACKEND) or "default"
        )
        self.fields["base_url"].widget.attrs["placeholder"] = (
            settings.WORLD_MODEL_BASE_URL or "http://127.0.0.1:8000/v1"
        )
        for name in ("n", "max_tokens", "max_steps", "seed"):
            self.fields[name].widget.attrs["step"] = "1"
        self.fields["n"].widget.attrs.update(min="1", max=str(MAX_FUTURES))
        self.fields["temperature"].widget.attrs.update(step="0.05", min="0", max="2")
        self.fields["top_p"].widget.attrs.update(step="0.01", min="0", max="1")

    # -- single fields ---------------------------------------------------------------------
    def clean_n(self) -> int:
        n = self.cleaned_data["n"]
        if not 1 <= n <= MAX_FUTURES:
            raise forms.ValidationError(
                f"Number of futures must be between 1 and {MAX_FUTURES} (got {n})."
            )
        return n

    def clean_temperature(self) -> float:
        t = self.cleaned_data["temperature"]
        if not 0.0 <= t <= 2.0:
            raise forms.ValidationError(f"Temperature must be between 0 and 2 (got {t}).")
        return t

    def clean_top_p(self) -> float:
        p = self.cleaned_data["top_p"]
        if not 0.0 < p <= 1.0:
            raise forms.ValidationError(f"top_p must be above 0 and at most 1 (got {p}).")
        return p

    def clean_max_tokens(self) -> int:
        m = self.cleaned_data["max_tokens"]
        if not 1 <= m <= MAX_TOKENS_LIMIT:
            raise forms.ValidationError(
                f"max_tokens must be between 1 and {MAX_TOKENS_LIMIT} (got {m})."
            )
        return m

    def clean_seed(self) -> int | None:
        seed = self.cleaned_data["seed"]
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise forms.ValidationError(f"Seed must be between 0 and {MAX_SEED} (got {seed}).")
        return seed

    def clean_model(self) -> str:
        return self.cleaned_data["model"].strip()

    def clean_base_url(self) -> str:
        url = self.cleaned_data["base_url"].strip()
        if url and not url.startswith(("http://", "https://")):
            raise forms.ValidationError(
                f"Base URL must start with http:// or https:// (got {url!r})."
            )
        return url.rstrip("/")

    # -- the whole form -------------------------------------------------------------------
    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self._clean_action(data)
        self._clean_mode(data)
        self._clean_backend(data)
        return data

    def _clean_action(self, data: dict[str, Any]) -> None:
        action = data.get("action", "")
        kind = data.get("action_kind", "auto")
        if not action.strip():
            self.add_error("action", "The action is empty: write what the agent does at this step.")
            return
        as_json = kind == "json" or (kind == "auto" and looks_like_json(action, self.domain))
        if as_json:
            try:
                value = json.loads(action)
            except ValueError as exc:
                where = (
                    f" at line {exc.lineno}, column {exc.colno}"
                    if isinstance(exc, json.JSONDecodeError)
                    else ""
                )
                hint = " (choose 'Free text' if this action is not JSON)" if kind == "auto" else ""
                msg = getattr(exc, "msg", str(exc))
                self.add_error("action", f"The action is not valid JSON{where}: {msg}{hint}.")
                return
            data["action"] = json.dumps(value, indent=2, ensure_ascii=False)
        else:
            # Free text: keep it as typed, minus trailing whitespace a textarea adds.
            data["action"] = action.rstrip()

    def _clean_mode(self, data: dict[str, Any]) -> None:
        mode = data.get("mode")
        max_steps = data.get("max_steps")
        if mode == SimulationMode.NEXT:
            data["max_steps"] = 1
        elif mode == SimulationMode.REPLAY:
            if self.steps_after < 1:
                self.add_error(
                    "mode",
                    "Counterfactual replay needs recorded steps after this one; this is the "
                    "branch's last step (use 'Next observation only' or 'Agent rollout').",
                )
                return
            # Replay re-simulates every later recorded step: there is no step budget.
            data["max_steps"] = 1
        elif mode == SimulationMode.ROLLOUT:
            if max_steps is None:
                self.add_error(
                    "max_steps", "Agent rollout needs a number of steps (max steps, 1-50)."
                )
                return
            if not 1 <= max_steps <= MAX_ROLLOUT_STEPS:
                self.add_error(
                    "max_steps",
                    f"Agent rollout takes 1 to {MAX_ROLLOUT_STEPS} steps (got {max_steps}).",
                )
                return
            if max_steps > 1 and not settings.AGENT_MODEL_BASE_URL:
                self.add_error(
                    "mode",
                    "Agent rollout needs an agent model server: set AGENT_MODEL_BASE_URL (or "
                    "WORLD_MODEL_BASE_URL, whose model then plays the agent too).",
                )
                return
            data["max_steps"] = max_steps

    def _clean_backend(self, data: dict[str, Any]) -> None:
        backend = data.get("backend")
        if backend is None:
            return
        model = data.get("model", "")
        base_url = data.get("base_url", "")
        if backend == "retrieval":
            data["model"], data["base_url"] = "", ""
            return
        if not model:
            model = default_model_for(backend)
        if backend == "openai":
            base_url = base_url or settings.WORLD_MODEL_BASE_URL
            if not base_url:
                self.add_error(
                    "base_url",
                    "The openai backend needs the base URL of an OpenAI-compatible server "
                    "(none is configured in WORLD_MODEL_BASE_URL).",
                )
            if not model:
                self.add_error("model", "The openai backend needs a model name.")
        elif backend == "hf":
            base_url = ""
            if not model:
                self.add_error(
                    "model",
                    "The hf backend needs a model path or hub id (none is configured in "
                    "WORLD_MODEL_PATH).",
                )
        data["model"], data["base_url"] = model, base_url

    def sampling_params(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {
            "temperature": d["temperature"],
            "top_p": d["top_p"],
            "max_tokens": d["max_tokens"],
            "seed": d["seed"],
        }


class RenameBranchForm(forms.Form):
    name = forms.CharField(max_length=200, error_messages={"required": "A branch needs a name."})

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A branch needs a name.")
        return name


class CompareForm(forms.Form):
    """`?b=1&b=2...` (2-6 branches of the trajectory) or `?fork=<branch>&at=<index>` (all
    children of one fork). The trajectory's branches are passed in to bound the choices."""

    MIN_BRANCHES = 2
    MAX_BRANCHES = 6

    b = forms.TypedMultipleChoiceField(coerce=int, required=False, label="Branches")
    fork = forms.IntegerField(required=False)
    at = forms.IntegerField(required=False, min_value=0)
    diff = forms.ChoiceField(
        choices=[("words", "Word diff"), ("lines", "Line diff")], required=False
    )
    start = forms.IntegerField(required=False, min_value=0)

    def __init__(self, *args, branches, **kwargs):
        super().__init__(*args, **kwargs)
        self.branches = {b.pk: b for b in branches}
        self.fields["b"].choices = [(b.pk, b.name) for b in branches]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        fork, at, picked = data.get("fork"), data.get("at"), data.get("b") or []
        if self.errors:
            return data
        if fork is not None:
            parent = self.branches.get(fork)
            if parent is None:
                raise forms.ValidationError(f"Branch {fork} is not a branch of this trajectory.")
            children = [
                b
                for b in self.branches.values()
                if b.parent_id == fork and (at is None or b.fork_index == at)
            ]
            if not children:
                where = f" at step {at}" if at is not None else ""
                raise forms.ValidationError(f"Branch {parent.name!r} has no children{where}.")
            data["selected"] = sorted(children, key=lambda b: (b.fork_index, b.sample_index, b.pk))
            return data
        unique = list(dict.fromkeys(picked))
        if not self.MIN_BRANCHES <= len(unique) <= self.MAX_BRANCHES:
            raise forms.ValidationError(
                f"Pick {self.MIN_BRANCHES} to {self.MAX_BRANCHES} branches to compare "
                f"(got {len(unique)})."
            )
        data["selected"] = [self.branches[pk] for pk in unique]
        return data
