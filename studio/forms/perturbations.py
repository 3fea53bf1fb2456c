"""The perturbation library's form: a kind, its parameters (one field per parameter of any
kind, `inference.perturbations.KINDS`; only the chosen kind's are read), a default mode and
a description. The kind's own validation names the parameter of each problem."""

from __future__ import annotations

from typing import Any

from django import forms

from inference import perturbations as perturbing
from studio.forms.fields import PlainNameField
from studio.models import Perturbation
from studio.models.perturbations import PerturbationKind, PerturbationMode


def param_field_name(kind: str, param: str) -> str:
    return f"p_{kind}_{param}"


class PerturbationForm(forms.Form):
    name = PlainNameField(max_length=100, what="the perturbation's name")
    kind = forms.ChoiceField(choices=PerturbationKind.choices)
    mode = forms.ChoiceField(
        choices=PerturbationMode.choices,
        label="Applied",
        initial=perturbing.DETERMINISTIC,
        help_text="Prompted: the world model is told and writes a realistic observation "
        "(needs a model). Deterministic: the observation text is transformed, no model "
        "needed (works with the retrieval baseline).",
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)

    def __init__(self, *args, project, instance: Perturbation | None = None, **kwargs):
        if instance is not None and "initial" not in kwargs:
            initial: dict[str, Any] = {
                "name": instance.name,
                "kind": instance.kind,
                "mode": instance.mode,
                "description": instance.description,
            }
            for key, value in (instance.params or {}).items():
                initial[param_field_name(instance.kind, key)] = value
            kwargs["initial"] = initial
        super().__init__(*args, **kwargs)
        self.project = project
        self.instance = instance
        for kind in perturbing.KINDS.values():
            for p in kind.params:
                name = param_field_name(kind.name, p.name)
                widget = (
                    forms.Textarea(attrs={"rows": 3})
                    if p.name == "instruction"
                    else forms.TextInput()
                )
                widget.attrs.update({"data-kind": kind.name, "placeholder": str(p.default)})
                self.fields[name] = forms.CharField(
                    required=False,
                    label=f"{p.name.replace('_', ' ')}",
                    help_text=p.help,
                    widget=widget,
                    strip=False,
                )

    def param_fields(self):
        """(kind, [bound fields]) for the template: each kind's parameters in a group."""
        return [
            (kind.name, [self[param_field_name(kind.name, p.name)] for p in kind.params])
            for kind in perturbing.KINDS.values()
            if kind.params
        ]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A perturbation needs a name.")
        clash = Perturbation.objects.filter(project=self.project, name=name)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise forms.ValidationError(f"This project already has a perturbation named {name!r}.")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind")
        if kind not in perturbing.KINDS:
            return data
        params = {}
        for p in perturbing.KINDS[kind].params:
            raw = data.get(param_field_name(kind, p.name), "")
            if raw != "" and raw is not None:
                params[p.name] = raw
        try:
            built = perturbing.build(kind, params, data.get("mode"), data.get("name", ""))
        except perturbing.PerturbationError as exc:
            message = str(exc)
            target = None
            for p in perturbing.KINDS[kind].params:
                if f"{kind}.{p.name}" in message:
                    target = param_field_name(kind, p.name)
            if "deterministic form" in message or "mode must" in message:
                target = "mode"
            self.add_error(target, message[0].upper() + message[1:] + ".")
            return data
        data["built"] = built
        return data
