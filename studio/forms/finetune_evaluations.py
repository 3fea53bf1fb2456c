"""The fine-tune page's "Evaluate" form: a judge, the samples per domain, the seed and the
comparisons; `data_object()` is the validated
`studio.services.finetune_evaluations.FineTuneEvaluationData`."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from studio.forms.evaluations import SampleSetFields
from studio.models import FineTuneRun, ModelEndpoint, Project
from studio.services.finetune_evaluations import (
    COMPARISONS,
    FineTuneEvaluationData,
    judges,
    unavailable,
)


class FineTuneEvaluationForm(SampleSetFields):
    field_order = ["judge", "sources"]
    judge = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Judge model", empty_label=None
    )
    sources = forms.MultipleChoiceField(
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        label="Compare on",
        help_text="Each comparison runs the base and the fine-tuned model on the same samples",
    )

    def __init__(self, *args: Any, project: Project, finetune: FineTuneRun | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields[
            "sample_seed"
        ].help_text = "Both models are scored on the samples this seed draws (blank: 0)"
        self.project = project
        judge_field = cast(forms.ModelChoiceField, self.fields["judge"])
        judge_field.queryset = judges(project)
        sources_field = cast(forms.MultipleChoiceField, self.fields["sources"])
        # every comparison is a valid value (one not offered is refused with why, in
        # clean_sources); the boxes are the offered ones
        self.unavailable = unavailable(finetune, project)
        choices = [(s, label) for s, label in COMPARISONS.items() if s not in self.unavailable]
        sources_field.choices = list(COMPARISONS.items())
        sources_field.widget.choices = choices
        sources_field.initial = [s for s, _ in choices]

    def clean_sources(self) -> list[str]:
        sources = list(self.cleaned_data["sources"])
        refused = [s for s in COMPARISONS if s in sources and s in self.unavailable]
        if refused:
            raise forms.ValidationError(
                "; ".join(f"{COMPARISONS[s]}: {self.unavailable[s]}" for s in refused) + "."
            )
        return sources

    def data_object(self) -> FineTuneEvaluationData:
        c = self.cleaned_data
        return FineTuneEvaluationData(
            judge=c["judge"],
            sources=list(c["sources"]),
            limit_per_domain=c["limit_per_domain"],
            sample_seed=c["sample_seed"] if c["sample_seed"] is not None else 0,
            domains=list(c["domains"]),
        )
