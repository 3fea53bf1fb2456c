"""The library's search/filter/sort form: the only place its query parameters are validated."""

from __future__ import annotations

from django import forms

from studio.models import Domain, Project

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

    def clean_sort(self) -> str:
        return self.cleaned_data.get("sort") or "newest"

    def clean_page(self) -> int:
        return self.cleaned_data.get("page") or 1

    @property
    def is_filtered(self) -> bool:
        data = getattr(self, "cleaned_data", {})
        return any(data.get(k) for k in ("q", "domain", "source", "tag", "perturbation"))
