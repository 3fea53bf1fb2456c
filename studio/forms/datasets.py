"""The forms of datasets: a new version from a queue's accepted items or from a filter
(`DatasetForm.data_object()` is the validated `SelectionData`), a hand-picked step added to a
dataset, and the choice of an export format."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from studio.exports.formats import FORMATS
from studio.models import AnnotationQueue, Project, World
from studio.services.datasets import MAX_ITEMS, SelectionData
from studio.services.queues import DOMAIN_CHOICES, ORIGINS, QueueData

SOURCES = [("queue", "A queue's accepted items"), ("filter", "Steps matching a filter")]


class DatasetForm(forms.Form):
    name = forms.CharField(
        max_length=200, help_text="A new name makes a dataset; an existing one a new version"
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    source = forms.ChoiceField(choices=SOURCES, initial="queue", widget=forms.RadioSelect)
    queue = forms.ModelChoiceField(
        queryset=AnnotationQueue.objects.none(), required=False, label="Queue"
    )
    with_fixed = forms.BooleanField(
        required=False,
        initial=True,
        label="Also items marked “needs fix” that have a corrected observation",
    )
    domain = forms.ChoiceField(choices=DOMAIN_CHOICES, required=False)
    origin = forms.ChoiceField(choices=list(ORIGINS.items()), required=False, label="Branches")
    perturbed = forms.BooleanField(required=False, help_text="Only perturbed observations")
    malformed = forms.BooleanField(
        required=False, help_text="Only simulations whose answer was not well formed"
    )
    tag = forms.CharField(max_length=100, required=False, help_text="A trajectory tag")
    world = forms.ChoiceField(choices=[], required=False, help_text="Steps simulated in a world")
    judge_below = forms.FloatField(
        required=False, min_value=1.0, max_value=5.0, label="Judge score below"
    )
    limit = forms.IntegerField(min_value=1, max_value=MAX_ITEMS, initial=1000, label="At most")

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        queues = AnnotationQueue.objects.filter(project=project).order_by("-created_at")
        cast(forms.ModelChoiceField, self.fields["queue"]).queryset = queues
        worlds = World.objects.filter(project=project).order_by("name")
        cast(forms.ChoiceField, self.fields["world"]).choices = [
            ("", "any"),
            *[(w.name, w.name) for w in worlds],
        ]

    def clean(self) -> dict[str, Any]:
        c = super().clean() or {}
        if c.get("source") == "queue" and not c.get("queue"):
            self.add_error("queue", "choose the queue whose accepted items make the dataset")
        return c

    def data_object(self) -> SelectionData:
        c = self.cleaned_data
        name = c["name"].strip()
        if c["source"] == "queue":
            return SelectionData(
                name=name,
                description=c["description"].strip(),
                queue=c["queue"],
                with_fixed=c["with_fixed"],
            )
        return SelectionData(
            name=name,
            description=c["description"].strip(),
            filter=QueueData(
                name=name,
                domain=c["domain"] or "",
                origin=c["origin"] or "",
                perturbed=c["perturbed"],
                malformed=c["malformed"],
                tag=c["tag"].strip(),
                world=c["world"] or "",
                judge_below=c.get("judge_below"),
                limit=c["limit"],
            ),
        )


class AddStepForm(forms.Form):
    name = forms.CharField(max_length=200, label="Dataset")


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=[(k, v.label) for k, v in FORMATS.items()])
    turns = forms.ChoiceField(
        choices=[("wm", "world-model turns"), ("agent", "agent turns")],
        required=False,
        initial="wm",
    )
    thinking = forms.BooleanField(required=False)
    style = forms.ChoiceField(
        choices=[("sharegpt", "ShareGPT"), ("alpaca", "Alpaca")], required=False, initial="sharegpt"
    )
