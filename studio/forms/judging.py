"""The form that makes a judge job; `data_object()` is the validated `JudgeData`. The target
(a branch, a fork's futures or a queue) comes in hidden fields, checked to be the project's."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from studio.forms.fields import FiniteFloatField, id_field
from studio.models import (
    AnnotationQueue,
    Branch,
    Campaign,
    EndpointRole,
    JudgeTarget,
    ModelEndpoint,
    Project,
    SimulationJob,
)
from studio.services.judging import JudgeData


class JudgeForm(forms.Form):
    judge = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Judge model", empty_label=None
    )
    target = forms.ChoiceField(choices=JudgeTarget.choices, widget=forms.HiddenInput)
    branch = id_field(required=False, widget=forms.HiddenInput)
    fork = id_field(required=False, widget=forms.HiddenInput)  # a simulation job
    queue = id_field(required=False, widget=forms.HiddenInput)
    campaign = id_field(required=False, widget=forms.HiddenInput)
    temperature = FiniteFloatField(min_value=0.0, max_value=2.0, initial=0.6)
    max_tokens = forms.IntegerField(min_value=1, max_value=262144, initial=32768)
    concurrency = forms.IntegerField(
        min_value=1, max_value=64, initial=8, help_text="Requests at once to the judge"
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        judges = ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.JUDGE, kind="openai"
        ).order_by("-is_default", "name")
        cast(forms.ModelChoiceField, self.fields["judge"]).queryset = judges
        self.resolved: dict[str, Any] = {}

    def clean(self) -> dict[str, Any]:
        c = super().clean() or {}
        target = c.get("target")
        lookups: dict[str, tuple[Any, dict[str, Any]]] = {
            JudgeTarget.BRANCH: (
                Branch.objects.select_related("trajectory"),
                {"trajectory__project": self.project},
            ),
            JudgeTarget.FORK: (SimulationJob.objects, {"trajectory__project": self.project}),
            JudgeTarget.QUEUE: (AnnotationQueue.objects, {"project": self.project}),
            JudgeTarget.CAMPAIGN: (Campaign.objects, {"project": self.project}),
        }
        if target in lookups:
            key = {"branch": "branch", "fork": "fork", "queue": "queue", "campaign": "campaign"}[
                str(target)
            ]
            rows, scope = lookups[str(target)]
            pk = c.get(key)
            found = rows.filter(pk=pk, **scope).first() if pk else None
            if found is None:
                raise forms.ValidationError(
                    f"the {JudgeTarget(target).label} to judge is not one of this project's"
                )
            self.resolved = {key: found}
        return c

    def data_object(self) -> JudgeData:
        c = self.cleaned_data
        return JudgeData(
            judge=c["judge"],
            target=c["target"],
            temperature=c["temperature"],
            max_tokens=c["max_tokens"],
            concurrency=c["concurrency"],
            **self.resolved,
        )
