"""The form that starts a behaviour search; `data_object()` is the validated `BehaviourData`
(the service checks it again: `studio.services.behaviour.validate`)."""

from __future__ import annotations

import re
from typing import Any, cast

from django import forms
from django.core.validators import MaxValueValidator

from inference.behaviour import MAX_DESCRIPTION_CHARS
from studio.forms.fields import FiniteFloatField, PlainNameField
from studio.models import BehaviourUnit, EndpointRole, ModelEndpoint, Project
from studio.services import behaviour as service


class BehaviourForm(forms.Form):
    description = forms.CharField(
        max_length=MAX_DESCRIPTION_CHARS,
        label="Behaviour",
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "e.g. the agent deletes files outside its workspace"}
        ),
        help_text="In plain language, as you would ask a colleague. The judge reads each "
        "candidate and answers yes or no, how sure it is, and why.",
    )
    query = forms.CharField(
        required=False,
        max_length=service.MAX_QUERY_CHARS,
        label="Candidates (a search query)",
        help_text="The steps to look at, in the library search's language (e.g. domain:terminal, "
        'source:simulated, "rm -rf", re:/sudo\\s+rm/). Empty: every step of the project.',
    )
    unit = forms.ChoiceField(
        choices=[
            (
                BehaviourUnit.STEPS,
                "Each step (its action and observation, with the steps before it)",
            ),
            (BehaviourUnit.TRAJECTORIES, "Each trajectory (read whole, shortened when long)"),
        ],
        initial=BehaviourUnit.STEPS,
        label="Look at",
    )
    max_candidates = forms.IntegerField(min_value=1, label="At most this many candidates")
    judge = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Judge model", empty_label=None
    )
    temperature = FiniteFloatField(min_value=0.0, max_value=2.0, initial=0.0)
    max_tokens = forms.IntegerField(min_value=1, max_value=service.MAX_TOKENS, initial=4096)
    concurrency = forms.IntegerField(
        min_value=1,
        max_value=service.MAX_CONCURRENCY,
        initial=8,
        help_text="Requests at once to the judge",
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        judges = ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.JUDGE, kind="openai"
        ).order_by("-is_default", "name")
        cast(forms.ModelChoiceField, self.fields["judge"]).queryset = judges
        most = service.max_candidates()
        field = cast(forms.IntegerField, self.fields["max_candidates"])
        field.max_value = most
        field.validators.append(MaxValueValidator(most))
        field.initial = min(100, most)
        field.help_text = (
            f"The newest the query matches are taken (at most {most:,}, "
            "STUDIO_BEHAVIOUR_MAX_CANDIDATES); with an embeddings model on the Models page, "
            "those closest in meaning to the behaviour among the newest, up to four times as many "
            "(narrow a large project with the query)."
        )
        field.widget.attrs["max"] = most

    def clean_description(self) -> str:
        try:
            return service.clean_description(self.cleaned_data.get("description"))
        except service.InvalidSearch as exc:
            raise forms.ValidationError(sentence(exc.message)) from None

    def clean_query(self) -> str:
        try:
            return service.clean_query(self.cleaned_data.get("query"))
        except service.InvalidSearch as exc:
            raise forms.ValidationError(sentence(exc.message)) from None

    def data_object(self) -> service.BehaviourData:
        c = self.cleaned_data
        return service.BehaviourData(
            judge=c["judge"],
            description=c["description"],
            query=c.get("query") or "",
            unit=c["unit"],
            max_candidates=c["max_candidates"],
            temperature=c["temperature"],
            max_tokens=c["max_tokens"],
            concurrency=c["concurrency"],
        )


def sentence(text: str) -> str:
    """A message as a sentence: a capital first (not where it starts with a query's own
    words, "domain:mars is not one of ..."), a full stop last."""
    if not _QUERY_FIELD.match(text):
        text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


_QUERY_FIELD = re.compile(r"[a-z_]+:\S")


class MakeForm(forms.Form):
    """A cluster's matches, or all of them, made into a tag, a queue or a dataset."""

    make = forms.ChoiceField(
        choices=[("tag", "a tag"), ("queue", "an annotation queue"), ("dataset", "a dataset")],
        error_messages={
            "required": "choose a tag, a queue or a dataset",
            "invalid_choice": "choose a tag, a queue or a dataset",
        },
    )
    cluster = forms.CharField(required=False, max_length=40)  # a cluster's id, or "": all
    name = PlainNameField(
        max_length=200, what="the name", error_messages={"required": "give it a name"}
    )
    blind = forms.BooleanField(required=False)
    confirm_rejected = forms.BooleanField(required=False)
