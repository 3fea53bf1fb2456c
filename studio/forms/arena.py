"""The form that starts an arena at a step: which world models (two or more), N futures each,
the action (blank: the recorded one), the sampling and seed every model gets, and the judge.
`data_object()` is the validated `studio.services.arena.ArenaData`: one request per model,
each built and checked as the branch editor's (`SimulationRequest.build`)."""

from __future__ import annotations

import random
from typing import Any, cast

from django import forms
from django.conf import settings

from inference.simulation import limits
from inference.simulation.request import ForkFacts, InvalidRequest, SimulationRequest
from studio.forms.branching import NO_DEFAULTS
from studio.forms.fields import FiniteFloatField
from studio.models import Branch, EndpointRole, ModelEndpoint, Project
from studio.services.arena import ArenaData
from studio.services.endpoints import endpoints_for, world_input
from studio.services.simulation import world_of_trajectory

NO_JUDGE = (
    "This project has no judge model, and an arena needs one to score and compare the "
    "futures. An admin adds one on the Models page (role “Judge model”, an "
    "OpenAI-compatible server)."
)


def random_seed() -> int:
    return random.randrange(limits.MAX_SEED)


def _endpoint_label(endpoint: ModelEndpoint) -> str:
    """An endpoint as the arena's models are named: its name and the model it serves."""
    if endpoint.kind == "retrieval" or not endpoint.model or endpoint.model == endpoint.name:
        return endpoint.name
    return f"{endpoint.name} · {endpoint.model}"


def _sentence(message: str) -> str:
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


class ArenaForm(forms.Form):
    world_models = forms.ModelMultipleChoiceField(
        queryset=ModelEndpoint.objects.none(),
        label="World models",
        widget=forms.CheckboxSelectMultiple,
        help_text="Tick two or more: each runs the same fork with the same seed.",
    )
    n = forms.IntegerField(
        label="Futures per model (N)", initial=2, min_value=1, max_value=limits.MAX_FUTURES
    )
    action = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}),
        strip=False,
        required=False,
        help_text="The action every model answers. Blank: the recorded action at this step.",
    )
    temperature = FiniteFloatField(
        initial=limits.DEFAULT_TEMPERATURE, min_value=0.0, max_value=limits.TEMPERATURE_MAX
    )
    top_p = FiniteFloatField(
        label="top_p", initial=limits.DEFAULT_TOP_P, min_value=0.0, max_value=1.0
    )
    max_tokens = forms.IntegerField(
        label="max_tokens",
        initial=limits.DEFAULT_MAX_TOKENS,
        min_value=1,
        max_value=limits.MAX_TOKENS,
    )
    seed = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=limits.MAX_SEED,
        help_text="Sent to every model alike (a server asked for the N futures in one request "
        "gets it once; one asked future by future gets seed + i for future i). Drawn at "
        "random; keep it to repeat an arena.",
    )
    judge = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Judge model", empty_label=None
    )
    judge_temperature = FiniteFloatField(
        min_value=0.0, max_value=2.0, initial=0.6, label="Judge temperature"
    )
    judge_max_tokens = forms.IntegerField(
        min_value=1, max_value=262144, initial=32768, label="Judge max_tokens"
    )

    def __init__(self, *args: Any, branch: Branch, fork_index: int, fork: ForkFacts, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.branch = branch
        self.fork_index = fork_index
        self.fork = fork
        project: Project = branch.trajectory.project
        worlds = endpoints_for(project, EndpointRole.WORLD)
        models_field = cast(forms.ModelMultipleChoiceField, self.fields["world_models"])
        models_field.queryset = worlds
        models_field.label_from_instance = _endpoint_label  # type: ignore[assignment]
        # fewer than two to pick from: the page says how to get another, not only "tick two"
        self.world_model_count = worlds.count()
        judges = ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.JUDGE, kind="openai"
        ).order_by("-is_default", "name")
        cast(forms.ModelChoiceField, self.fields["judge"]).queryset = judges
        self.has_judge = judges.exists()
        # a trajectory started in a world runs in it: the baseline reads no world's prompt
        self.world_version = world_of_trajectory(branch.trajectory)
        if not self.is_bound:
            self.fields["seed"].initial = random_seed()
        self.fields["n"].widget.attrs.update(
            min="1", max=str(settings.STUDIO_MAX_FUTURES), step="1"
        )
        self.fields["temperature"].widget.attrs.update(
            step="0.05", min="0", max=str(limits.TEMPERATURE_MAX)
        )
        self.fields["top_p"].widget.attrs.update(step="0.01", min="0", max="1")
        self.fields["max_tokens"].widget.attrs.update(min="1", max=str(limits.MAX_TOKENS))

    def clean_world_models(self) -> list[ModelEndpoint]:
        chosen = list(self.cleaned_data["world_models"])
        if len(chosen) < 2:
            raise forms.ValidationError(
                f"An arena compares two or more world models; {len(chosen)} ticked."
            )
        if self.world_version is not None:
            baseline = [e for e in chosen if e.kind == "retrieval"]
            if baseline:
                world = self.world_version.world.name
                raise forms.ValidationError(
                    f"{baseline[0].name!r} is the retrieval baseline, which answers with "
                    "recorded observations and never reads a world's prompt; this trajectory "
                    f"was started in the world {world!r} (version {self.world_version.number}) "
                    "and runs in it. Untick it and pick world models."
                )
        return chosen

    def clean_judge(self) -> ModelEndpoint:
        return self.cleaned_data["judge"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.has_judge:
            self.add_error("judge", NO_JUDGE)
        if data.get("seed") is None and "seed" not in self.errors:
            data["seed"] = random_seed()
        chosen = data.get("world_models") or []
        given: dict[str, Any] = {
            "fork_index": self.fork_index,
            "mode": "next",
            **{k: data[k] for k in ("n", "temperature", "top_p", "max_tokens") if k in data},
        }
        if data.get("seed") is not None:
            given["seed"] = data["seed"]
        if (data.get("action") or "").strip():
            given["action"] = data["action"]
        requests: list[tuple[ModelEndpoint, SimulationRequest]] = []
        # each model's request, as the editor builds it; a field's problem is reported once
        # (the same for every model), a model's own under the models
        for endpoint in chosen:
            try:
                request = SimulationRequest.build(
                    {**given, **world_input(endpoint)}, fork=self.fork, defaults=NO_DEFAULTS
                )
            except InvalidRequest as exc:
                for name, messages in exc.errors.items():
                    target = name if name in self.fields else "world_models"
                    for message in messages:
                        text = _sentence(message)
                        if target == "world_models":
                            text = f"{endpoint.name}: {text}"
                        if text not in self.errors.get(target, []):
                            self.add_error(target, text)
                continue
            requests.append((endpoint, request))
        self.requests = requests
        return data

    def data_object(self) -> ArenaData:
        c = self.cleaned_data
        return ArenaData(
            branch=self.branch,
            fork_index=self.fork_index,
            models=tuple(self.requests),
            n=c["n"],
            seed=c["seed"],
            judge=c["judge"],
            judge_temperature=c["judge_temperature"],
            judge_max_tokens=c["judge_max_tokens"],
        )
