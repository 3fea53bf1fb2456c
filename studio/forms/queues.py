"""The form that makes an annotation queue; `data_object()` is the validated `QueueData`."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth import get_user_model

from studio.models import Branch, Project, World
from studio.services.queues import DOMAIN_CHOICES, MAX_ITEMS, ORIGINS, QueueData


class StepFilterForm(forms.Form):
    """The filter that chooses steps (a queue's, a dataset's): `filter_values()` are the
    matching `QueueData` fields."""

    domain = forms.ChoiceField(choices=DOMAIN_CHOICES, required=False)
    origin = forms.ChoiceField(choices=list(ORIGINS.items()), required=False, label="Branches")
    perturbed = forms.BooleanField(required=False, help_text="Only perturbed observations")
    malformed = forms.BooleanField(
        required=False, help_text="Only simulations whose answer was not well formed"
    )
    tag = forms.CharField(max_length=100, required=False, help_text="A trajectory tag")
    world = forms.ChoiceField(choices=[], required=False, help_text="Steps simulated in a world")
    judge_below = forms.FloatField(
        required=False,
        min_value=1.0,
        max_value=5.0,
        label="Judge score below",
        help_text="Only steps whose newest judge total (1-5) is below this; blank: any",
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        worlds = World.objects.filter(project=project).order_by("name")
        cast(forms.ChoiceField, self.fields["world"]).choices = [
            ("", "any"),
            *[(w.name, w.name) for w in worlds],
        ]

    def filter_values(self) -> dict[str, Any]:
        c = self.cleaned_data
        return {
            "domain": c["domain"] or "",
            "origin": c["origin"] or "",
            "perturbed": c["perturbed"],
            "malformed": c["malformed"],
            "tag": c["tag"].strip(),
            "world": c["world"] or "",
            "judge_below": c.get("judge_below"),
            "limit": c["limit"],
        }


class QueueForm(StepFilterForm):
    field_order = [
        "name", "annotators_per_item", "blind", "claim_minutes", "assignees", "domain",
        "origin", "perturbed", "malformed", "tag", "world", "judge_below", "branches", "limit",
    ]  # fmt: skip

    name = forms.CharField(max_length=200)
    annotators_per_item = forms.IntegerField(
        min_value=1, max_value=5, initial=2, help_text="How many people annotate each step (1-5)"
    )
    blind = forms.BooleanField(
        required=False, initial=True, help_text="No one sees the others' work before submitting"
    )
    claim_minutes = forms.IntegerField(
        min_value=5, max_value=1440, initial=30, help_text="How long a taken item stays taken"
    )
    assignees = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every member of the project",
    )
    branches = forms.CharField(required=False, widget=forms.HiddenInput)
    limit = forms.IntegerField(min_value=1, max_value=MAX_ITEMS, initial=200, label="At most")

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, project=project, **kwargs)
        members = get_user_model().objects.filter(memberships__project=project).order_by("username")
        cast(forms.ModelMultipleChoiceField, self.fields["assignees"]).queryset = members

    def clean_branches(self) -> tuple[int, ...]:
        raw = self.cleaned_data.get("branches") or ""
        ids = []
        for part in raw.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit():
                raise forms.ValidationError(f"{part!r} is not a branch id")
            ids.append(int(part))
        found = set(
            Branch.objects.filter(pk__in=ids, trajectory__project=self.project).values_list(
                "pk", flat=True
            )
        )
        if set(ids) - found:
            raise forms.ValidationError("a branch to compare is not one of this project's")
        return tuple(ids)

    def data_object(self) -> QueueData:
        c = self.cleaned_data
        return QueueData(
            name=c["name"].strip(),
            annotators_per_item=c["annotators_per_item"],
            blind=c["blind"],
            claim_minutes=c["claim_minutes"],
            assignees=tuple(c["assignees"]),
            branches=c["branches"],
            **self.filter_values(),
        )
