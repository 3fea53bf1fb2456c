"""The playground's one form: the next action, the world model, and optionally a perturbation
for that step. It becomes a one-future "next observation" request at the playground's step."""

from __future__ import annotations

from typing import Any

from django import forms

from inference import perturbations as perturbing
from inference.simulation import limits
from inference.simulation.request import Defaults, ForkFacts, InvalidRequest, SimulationRequest
from studio.models import EndpointRole, ModelEndpoint, Perturbation
from studio.services.endpoints import endpoints_for, sampling_defaults, world_input
from studio.services.perturbations import rule_input


class PlayForm(forms.Form):
    action = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}), strip=False
    )
    action_format = forms.ChoiceField(
        choices=list(limits.ACTION_FORMATS.items()), initial="auto", label="Format"
    )
    world_endpoint = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), empty_label=None, label="World model"
    )
    perturbation = forms.ModelChoiceField(
        queryset=Perturbation.objects.none(),
        required=False,
        empty_label="(none)",
        label="Perturb this step",
    )
    perturbation_mode = forms.ChoiceField(
        choices=[("", "as the library says"), *perturbing.MODES.items()],
        required=False,
        label="Applied",
    )

    def __init__(
        self,
        *args,
        project,
        fork: ForkFacts,
        at: int,
        in_world: bool = False,
        remembered: dict[str, Any] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.fork, self.at = fork, at
        world_field = self.fields["world_endpoint"]
        perturbation_field = self.fields["perturbation"]
        assert isinstance(world_field, forms.ModelChoiceField)
        assert isinstance(perturbation_field, forms.ModelChoiceField)
        world_field.queryset = endpoints_for(project, EndpointRole.WORLD)
        perturbation_field.queryset = Perturbation.objects.filter(project=project)
        self.has_perturbations = perturbation_field.queryset.exists()
        if not self.is_bound:
            # the choices of the step played before (`services.playground.remembered`):
            # a person who picked a model keeps it from step to step
            remembered = dict(remembered or {})
            endpoint_id = remembered.pop("world_endpoint", None)
            chosen = world_field.queryset.filter(pk=endpoint_id).first() if endpoint_id else None
            if chosen is None:
                # in a world, the baseline (which reads no world) is refused: start on a
                # model that reads the world's prompt when there is one
                options = list(world_field.queryset)
                readers = [e for e in options if e.kind != "retrieval"]
                chosen = (readers if in_world and readers else options or [None])[0]
            if chosen is not None:
                world_field.initial = chosen.pk
            if remembered.get("action_format") in limits.ACTION_FORMATS:
                self.fields["action_format"].initial = remembered["action_format"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        endpoint = data.get("world_endpoint")
        if self.errors or endpoint is None:
            return data
        given: dict[str, Any] = {
            "fork_index": self.at,
            "action": data.get("action"),
            "action_format": data.get("action_format"),
            "mode": "next",
            "n": 1,
            **sampling_defaults(endpoint),
            **world_input(endpoint),
        }
        entry = data.get("perturbation")
        if entry is not None:
            mode = data.get("perturbation_mode") or ""
            given["perturbations"] = [
                rule_input(entry, mode=mode, first_step=self.at, last_step=self.at)
            ]
        try:
            data["request"] = SimulationRequest.build(given, fork=self.fork, defaults=Defaults())
        except InvalidRequest as exc:
            for name, messages in exc.errors.items():
                target = {
                    "perturbations": "perturbation",
                    "backend": "world_endpoint",
                    "model": "world_endpoint",
                    "base_url": "world_endpoint",
                }.get(name, name if name in self.fields else None)
                for message in messages:
                    self.add_error(target, message if message.endswith(".") else message + ".")
        return data
