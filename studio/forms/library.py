"""The library's search/filter/sort form: the only place its query parameters are validated."""

from __future__ import annotations

from django import forms

from studio.forms.fields import FiniteFloatField
from studio.models import Domain, Project
from studio.services.episode_library import CLIENTS, STATES

SORTS = {
    "newest": ("-created_at", "-id"),
    "oldest": ("created_at", "id"),
    "title": ("title", "id"),
    "steps": ("-step_count", "-id"),
}
SORT_CHOICES = [
    ("newest", "Newest first"),
    ("oldest", "Oldest first"),
    ("title", "Title A–Z"),
    ("steps", "Most steps"),
]


class LibraryFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        label="Search",
        max_length=200,
        strip=True,
        widget=forms.TextInput(
            attrs={
                "type": "search",
                "placeholder": "Search titles, tasks, actions and observations…",
                "autocomplete": "off",
            }
        ),
    )
    domain = forms.ChoiceField(required=False, choices=[("", "All domains"), *Domain.choices])
    source = forms.ChoiceField(required=False, choices=[("", "All sources")])
    tag = forms.ChoiceField(required=False, choices=[("", "All tags")])
    # "*": any perturbed step; else steps perturbed by the perturbation of that label
    perturbation = forms.ChoiceField(required=False, choices=[("", "Perturbed or not")])
    # episodes served to agents (`studio.services.episode_library`)
    world = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, choices=[("", "All worlds")]
    )
    client = forms.ChoiceField(required=False, choices=[("", "Any client"), *CLIENTS])
    token = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, choices=[("", "Any token")]
    )
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *STATES])
    reward_min = FiniteFloatField(
        required=False,
        label="Total reward from",
        widget=forms.NumberInput(attrs={"step": "any", "placeholder": "total reward ≥"}),
    )
    reward_max = FiniteFloatField(
        required=False,
        label="Total reward to",
        widget=forms.NumberInput(attrs={"step": "any", "placeholder": "total reward ≤"}),
    )
    empty = forms.BooleanField(required=False, label="Show episodes without steps")
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES, initial="newest")
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        sources = (
            project.trajectories.order_by("source_format")
            .values_list("source_format", flat=True)
            .distinct()
        )
        source_field = self.fields["source"]
        assert isinstance(source_field, forms.ChoiceField)
        source_field.choices = [("", "All sources"), *((s, s) for s in sources if s)]
        tags = project.tags.order_by("name").values_list("name", flat=True)
        tag_field = self.fields["tag"]
        assert isinstance(tag_field, forms.ChoiceField)
        tag_field.choices = [("", "All tags"), *((t, t) for t in tags)]
        from studio.services.perturbations import labels_in_project

        perturbation_field = self.fields["perturbation"]
        assert isinstance(perturbation_field, forms.ChoiceField)
        perturbation_field.choices = [
            ("", "Perturbed or not"),
            ("*", "Any perturbed step"),
            *((label, f"Perturbed by {label}") for label in labels_in_project(project)),
        ]

        world_field = self.fields["world"]
        assert isinstance(world_field, forms.ChoiceField)
        world_field.choices = [
            ("", "All worlds"),
            *project.worlds.order_by("name").values_list("pk", "name"),
        ]
        token_field = self.fields["token"]
        assert isinstance(token_field, forms.ChoiceField)
        token_field.choices = [
            ("", "Any token"),
            *(
                (pk, f"{name} ({prefix}…)")
                for pk, name, prefix in project.api_tokens.order_by("name").values_list(
                    "pk", "name", "prefix"
                )
            ),
        ]

    def clean(self):
        data = super().clean() or {}
        low, high = data.get("reward_min"), data.get("reward_max")
        if low is not None and high is not None and low > high:
            self.add_error("reward_max", f"must be at least the lower bound ({low:g})")
        return data

    def clean_sort(self) -> str:
        return self.cleaned_data.get("sort") or "newest"

    def clean_page(self) -> int:
        return self.cleaned_data.get("page") or 1

    @property
    def is_filtered(self) -> bool:
        data = getattr(self, "cleaned_data", {})
        keys = ("q", "domain", "source", "tag", "perturbation", "world", "client", "token", "state")
        return any(data.get(k) for k in keys) or any(
            data.get(k) is not None for k in ("reward_min", "reward_max")
        )
