from __future__ import annotations

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from studio.models import Domain


def format_choices() -> list[tuple[str, str]]:
    from studio.services.imports import list_formats

    return [("", "Detect from the content")] + [(f, f) for f in list_formats()]


class ImportUploadForm(forms.Form):
    file = forms.FileField(
        help_text="A trajectory file in any supported format (JSON, JSONL, .traj, eval log)."
    )
    format = forms.ChoiceField(required=False)
    domain = forms.ChoiceField(
        required=False, choices=[("", "Detect from the content"), *Domain.choices]
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["format"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = format_choices()

    def clean_file(self):
        uploaded = self.cleaned_data["file"]
        limit = settings.STUDIO_MAX_UPLOAD_BYTES
        if uploaded.size > limit:
            raise forms.ValidationError(
                f"{uploaded.name} is {filesizeformat(uploaded.size)}; the limit is "
                f"{filesizeformat(limit)} (STUDIO_MAX_UPLOAD_MB)."
            )
        if uploaded.size == 0:
            raise forms.ValidationError(f"{uploaded.name} is empty.")
        return uploaded
