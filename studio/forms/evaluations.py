"""The form that makes an evaluation run; `data()` is the validated
`studio.services.evaluations.EvaluationData`."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from studio.forms.fields import FiniteFloatField, PlainNameField
from studio.models import DOMAINS, EndpointRole, ModelEndpoint, Project
from studio.services.evaluations import (
    MAX_SAMPLES_PER_DOMAIN,
    SOURCES,
    EvaluationData,
    benchmark_files,
)


class SampleSetFields(forms.Form):
    """The fields that fix an evaluation's samples (with its source): the domains, the limit
    per domain and the seed. Every form that makes evaluation runs takes them from here."""

    domains = forms.MultipleChoiceField(
        choices=[(d, d) for d in DOMAINS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every domain",
    )
    limit_per_domain = forms.IntegerField(
        min_value=1, max_value=MAX_SAMPLES_PER_DOMAIN, initial=50, label="Samples per domain"
    )
    # a fixed default, not a fresh one per run: two runs made with the defaults compare
    sample_seed = forms.IntegerField(
        min_value=0,
        max_value=2**63 - 1,
        initial=0,
        required=False,
        label="Sampling seed",
        help_text="The same source, files, domains, limit and seed draw the same samples, so "
        "runs made with them score the same steps and compare (blank: 0)",
    )


class EvaluationForm(SampleSetFields):
    # the sample-set fields after the source and its files, the sampling after them
    field_order = ["name", "world", "judge", "source", "benchmark_files"]

    name = PlainNameField(
        max_length=200, what="the run's name", help_text="How the leaderboard names this run"
    )
    world = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="World model", empty_label=None
    )
    judge = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Judge model", empty_label=None
    )
    source = forms.ChoiceField(choices=list(SOURCES.items()), initial="recorded")
    benchmark_files = forms.MultipleChoiceField(
        choices=[],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Benchmark files",
        help_text="With the AgentWorldBench source: the imported files to use (none ticked: all)",
    )
    temperature = FiniteFloatField(min_value=0.0, max_value=2.0, initial=0.6)
    max_tokens = forms.IntegerField(min_value=1, max_value=262144, initial=32768)
    top_p = FiniteFloatField(
        min_value=0.0, max_value=1.0, required=False, help_text="Blank: not sent"
    )
    judge_temperature = FiniteFloatField(min_value=0.0, max_value=2.0, initial=0.6)
    judge_max_tokens = forms.IntegerField(min_value=1, max_value=262144, initial=32768)
    concurrency = forms.IntegerField(
        min_value=1, max_value=64, initial=8, help_text="Requests at once, to each model"
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        endpoints = ModelEndpoint.objects.filter(project=project).order_by("-is_default", "name")
        world_field = cast(forms.ModelChoiceField, self.fields["world"])
        world_field.queryset = endpoints.filter(role=EndpointRole.WORLD)
        judge_field = cast(forms.ModelChoiceField, self.fields["judge"])
        judge_field.queryset = endpoints.filter(role=EndpointRole.JUDGE, kind="openai")
        files_field = cast(forms.MultipleChoiceField, self.fields["benchmark_files"])
        files_field.choices = [(f, f) for f in benchmark_files(project)]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        world = cleaned.get("world")
        if world is not None and world.kind == "openai" and not world.model:
            self.add_error("world", f"endpoint {world.name!r} names no model")
        return cleaned

    def data_object(self) -> EvaluationData:
        c = self.cleaned_data
        return EvaluationData(
            name=c["name"].strip(),
            world=c["world"],
            judge=c["judge"],
            source=c["source"],
            files=list(c["benchmark_files"]) if c["source"] == "benchmark" else [],
            domains=list(c["domains"]),
            limit_per_domain=c["limit_per_domain"],
            sample_seed=c["sample_seed"] if c["sample_seed"] is not None else 0,
            temperature=c["temperature"],
            max_tokens=c["max_tokens"],
            top_p=c["top_p"],
            judge_temperature=c["judge_temperature"],
            judge_max_tokens=c["judge_max_tokens"],
            concurrency=c["concurrency"],
        )
