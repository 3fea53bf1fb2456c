from __future__ import annotations

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat, pluralize

from studio.models import Domain
from studio.services.upload_limits import UploadRefusal, size_refusal


def format_choices() -> list[tuple[str, str]]:
    from studio.services.imports import list_formats

    return [("", "Detect from the content")] + [(f, f) for f in list_formats()]


class ImportUploadForm(forms.Form):
    file = forms.FileField()  # its help text names the limits (below)
    format = forms.ChoiceField(required=False)
    domain = forms.ChoiceField(
        required=False, choices=[("", "Detect from the content"), *Domain.choices]
    )

    def __init__(self, *args, refusal: UploadRefusal | None = None, **kwargs):
        """`refusal`: the upload was refused as it came in (`studio.upload_handlers`); the
        file is not there, and the form says why."""
        super().__init__(*args, **kwargs)
        field = self.fields["format"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = format_choices()
        self.fields["file"].help_text = (
            "A trajectory file in any supported format (JSON, JSONL, .traj, eval log): at most "
            f"{filesizeformat(settings.STUDIO_MAX_UPLOAD_BYTES)} a file and "
            f"{settings.STUDIO_MAX_UPLOADS_PER_HOUR} "
            f"upload{pluralize(settings.STUDIO_MAX_UPLOADS_PER_HOUR)} an hour."
        )
        self.refusal = refusal
        if refusal is not None:
            self.fields["file"].required = False  # absent: the refusal says why

    def clean_file(self):
        if self.refusal is not None:
            raise forms.ValidationError(self.refusal.message)
        uploaded = self.cleaned_data["file"]
        if uploaded.size > settings.STUDIO_MAX_UPLOAD_BYTES:
            self.refusal = size_refusal(uploaded.name, uploaded.size)
            raise forms.ValidationError(self.refusal.message)
        if uploaded.size == 0:
            raise forms.ValidationError(f"{uploaded.name} is empty.")
        return uploaded
