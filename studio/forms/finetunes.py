"""The form that starts a fine-tune (`FineTuneForm`, whose `data_object()` is the validated
`studio.services.finetunes.FineTuneData`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django import forms

from inference import worlds as worlding
from studio.forms.fields import FiniteFloatField, PlainNameField
from studio.models import (
    DatasetVersion,
    EndpointRole,
    FineTuneMethod,
    ModelEndpoint,
    Project,
)
from studio.services import finetunes as service

BASE_TINY = service.TINY
BASE_PATH = "path"
ENDPOINT_PREFIX = "endpoint-"
MODULE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
MAX_TARGETS = 64


def version_label(version: DatasetVersion) -> str:
    n = version.item_count
    return f"{version.dataset.name} v{version.number} ({n} step{'s' if n != 1 else ''})"


class FineTuneForm(forms.Form):
    name = PlainNameField(max_length=200, what="the name")
    dataset_version = forms.ModelChoiceField(
        queryset=DatasetVersion.objects.none(),
        label="Dataset version",
        help_text="Each reviewed step of the version trains as a world-model turn (its "
        "wm-turns row: the context is the prompt, the observation the completion).",
        error_messages={"invalid_choice": "Choose a dataset version of this project."},
    )
    base = forms.ChoiceField(
        label="Base model",
        help_text="The tiny random model is built in code (for trying the path out); an "
        "in-process world model of the Models page, or a model folder on the gpu worker.",
    )
    base_path = forms.CharField(
        max_length=1000,
        required=False,
        label="Model folder (for “a folder on the gpu worker”)",
        help_text="An absolute path, as the gpu worker sees it.",
    )
    method = forms.ChoiceField(choices=FineTuneMethod.choices, initial=FineTuneMethod.LORA)
    lora_rank = forms.IntegerField(
        min_value=1, max_value=service.MAX_LORA_RANK, initial=8, label="LoRA rank"
    )
    lora_alpha = forms.IntegerField(min_value=1, max_value=4096, initial=16, label="LoRA alpha")
    lora_targets = forms.CharField(
        max_length=2000,
        required=False,
        label="LoRA target modules",
        help_text="Module names, comma-separated (e.g. q_proj, v_proj); blank: every linear layer.",
    )
    epochs = FiniteFloatField(min_value=0.01, max_value=100, initial=1.0)
    learning_rate = FiniteFloatField(
        min_value=1e-9, max_value=1.0, initial=2e-4, label="Learning rate"
    )
    max_length = forms.IntegerField(
        min_value=16,
        max_value=service.MAX_MAX_LENGTH,
        initial=2048,
        label="Max length",
        help_text="Tokens per row at most (prompt and completion). A longer row keeps its "
        "most recent turns: the earliest turns of its history are left out; a row whose own "
        "turn is longer is left out and counted.",
    )
    max_steps = forms.IntegerField(
        min_value=1,
        max_value=service.MAX_STEPS,
        required=False,
        label="Max steps",
        help_text="Stop after this many optimizer steps; blank: train the epochs.",
    )
    seed = forms.IntegerField(
        min_value=0,
        max_value=service.MAX_SEED,
        initial=0,
        help_text="Seeds the training and the held-out draw.",
    )
    heldout = forms.IntegerField(
        min_value=0,
        max_value=service.MAX_HELDOUT,
        initial=service.DEFAULT_HELDOUT,
        label="Held-out trajectories",
        help_text="Recorded trajectories of the project that no training step comes from, "
        "kept apart to evaluate the base and the fine-tuned model on.",
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        versions = (
            DatasetVersion.objects.filter(dataset__project=project)
            .select_related("dataset")
            .order_by("dataset__name", "-number")
        )
        self.versions = versions
        field = self.fields["dataset_version"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = versions
        field.label_from_instance = version_label  # type: ignore[method-assign,assignment]
        self.endpoints = list(
            ModelEndpoint.objects.filter(project=project, role=EndpointRole.WORLD, kind="hf")
            .exclude(model="")
            .order_by("name", "pk")
        )
        choices = [(BASE_TINY, "The tiny random model (built in code)")]
        choices += [(f"{ENDPOINT_PREFIX}{e.pk}", f"{e.name} · {e.model}") for e in self.endpoints]
        choices.append((BASE_PATH, "A model folder on the gpu worker"))
        base = self.fields["base"]
        assert isinstance(base, forms.ChoiceField)
        base.choices = choices
        base.initial = BASE_TINY

    @property
    def has_versions(self) -> bool:
        return self.versions.exists()

    def preselect_version(self, raw: str | None) -> None:
        """A dataset version's "Fine-tune" button: its version chosen, its name suggested (one
        no fine-tune or model of the project has: "<dataset> vN fine-tune (2)" for the
        second)."""
        if not raw or not str(raw).isdigit():
            return
        version = self.versions.filter(pk=int(raw)).first()
        if version is not None:
            self.initial["dataset_version"] = version.pk
            self.initial["name"] = service.default_run_name(
                self.project, f"{version.dataset.name} v{version.number} fine-tune"
            )

    def clean_base_path(self) -> str:
        path = (self.cleaned_data.get("base_path") or "").strip()
        if path and worlding.CONTROL.search(path):
            raise forms.ValidationError("A path is one line, with no control characters.")
        return path

    def clean_lora_targets(self) -> tuple[str, ...]:
        text = self.cleaned_data.get("lora_targets") or ""
        names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        for name in names:
            if not MODULE_NAME.match(name) or len(name) > 200:
                raise forms.ValidationError(
                    f"{name[:60]!r} is not a module name (letters, digits and _)."
                )
        if len(names) > MAX_TARGETS:
            raise forms.ValidationError(f"At most {MAX_TARGETS} target modules.")
        return names

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        base = cleaned.get("base")
        if base == BASE_PATH:
            path = cleaned.get("base_path") or ""
            if not path and "base_path" not in self.errors:
                self.add_error("base_path", "Type the model folder's path on the gpu worker.")
            elif path and not Path(path).is_absolute():
                self.add_error(
                    "base_path", "An absolute path (it starts with /), as the gpu worker sees it."
                )
        version = cleaned.get("dataset_version")
        if version is not None and not version.items.exclude(step__isnull=True).exists():
            self.add_error(
                "dataset_version",
                f"{version.dataset.name} v{version.number} has no step left to train on.",
            )
        return cleaned

    def base_endpoint(self) -> ModelEndpoint | None:
        base = str(self.cleaned_data.get("base") or "")
        if not base.startswith(ENDPOINT_PREFIX):
            return None
        pk = int(base.removeprefix(ENDPOINT_PREFIX))
        return next((e for e in self.endpoints if e.pk == pk), None)

    def data_object(self) -> service.FineTuneData:
        d = self.cleaned_data
        base = str(d["base"])
        return service.FineTuneData(
            name=d["name"],
            dataset_version=d["dataset_version"],
            base=d["base_path"] if base == BASE_PATH else base,
            base_endpoint=self.base_endpoint(),
            method=d["method"],
            lora_rank=d["lora_rank"],
            lora_alpha=d["lora_alpha"],
            lora_targets=d["lora_targets"],
            epochs=d["epochs"],
            learning_rate=d["learning_rate"],
            max_length=d["max_length"],
            max_steps=d["max_steps"],
            seed=d["seed"],
            heldout=d["heldout"],
        )
