"""The forms of datasets: a new version from a queue's accepted items or from a filter
(`DatasetForm.data_object()` is the validated `SelectionData`; a queue's adds to the latest
version unless `replace`), a hand-picked step added to a dataset (`confirm` once warned that
it was rejected), and the choice of an export format."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from studio.exports.formats import FORMATS, ExportOptions
from studio.forms.fields import PlainNameField
from studio.forms.queues import StepFilterForm
from studio.models import AnnotationQueue, Project
from studio.services.datasets import MAX_ITEMS, SelectionData
from studio.services.queues import QueueData

SOURCES = [("queue", "A queue's accepted items"), ("filter", "Steps matching a filter")]


class DatasetForm(StepFilterForm):
    field_order = [
        "name", "description", "source", "queue", "with_fixed", "replace", "domain", "origin",
        "perturbed", "malformed", "tag", "world", "judge_below", "limit",
    ]  # fmt: skip

    name = PlainNameField(
        max_length=200,
        what="the dataset's name",
        help_text="A new name makes a dataset; an existing one a new version",
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
    replace = forms.BooleanField(
        required=False,
        label="Replace the latest version's steps with the queue's",
        help_text="Unticked, the queue's accepted steps are added to the latest version's (a "
        "step already there takes the queue's decision: replaced if accepted, dropped if not)",
    )
    limit = forms.IntegerField(min_value=1, max_value=MAX_ITEMS, initial=1000, label="At most")

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, project=project, **kwargs)
        queues = AnnotationQueue.objects.filter(project=project).order_by("-created_at")
        cast(forms.ModelChoiceField, self.fields["queue"]).queryset = queues

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
                replace=c["replace"],
            )
        return SelectionData(
            name=name,
            description=c["description"].strip(),
            filter=QueueData(name=name, **self.filter_values()),
        )


class AddStepForm(forms.Form):
    name = PlainNameField(max_length=200, label="Dataset", what="the dataset's name")
    # the second POST after the warning that someone rejected the step
    confirm = forms.BooleanField(required=False)


# how a version made of episodes' steps starts its source (studio.services.episode_selection)
SOURCE_TURNS = (("agent turns", "agent"), ("world-model turns", "wm"))


def turns_of_source(source: str) -> str | None:
    """ "agent" or "wm" for a version whose source says it was made of agent turns or
    world-model turns; None when it does not say."""
    for words, turns in SOURCE_TURNS:
        if source.startswith(words):
            return turns
    return None


def export_initial(version: Any) -> dict[str, str]:
    """The export form's first choices for `version`: its own turns in TRL prompt-completion
    rows (agent-turns or wm-turns) when its source says which, else the benchmark rows."""
    turns = turns_of_source(str(getattr(version, "source", "") or ""))
    if turns == "agent":
        return {"format": "agent-turns", "turns": "agent"}
    if turns == "wm":
        return {"format": "wm-turns", "turns": "wm"}
    return {"format": "agentworldbench", "turns": "wm"}


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
    drop_rejected_context = forms.BooleanField(required=False)

    def export_options(self) -> ExportOptions:
        c = self.cleaned_data
        return ExportOptions(
            turns=c["turns"] or "wm",
            thinking=c["thinking"],
            llamafactory_style=c["style"] or "sharegpt",
            drop_rejected_context=c["drop_rejected_context"],
        )
