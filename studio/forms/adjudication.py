"""The adjudicator's decision on a queue item: the final verdict, ratings and note, and the
correction that stands: one annotator's (picked), the adjudicator's own (written from the
observation), or none. `decision()` is the validated request for
`studio.services.agreement.adjudicate`."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from inference.judge import DIMENSIONS
from studio.models import StepAnnotation, Verdict

NONE, OWN = "none", "own"


class AdjudicationForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=Verdict.choices, error_messages={"required": "pick the final verdict"}
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    correction = forms.ChoiceField(choices=[], required=False)
    own_correction = forms.CharField(required=False, strip=False)

    def __init__(
        self, *args: Any, annotations: list[StepAnnotation], observation: str, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self.observation = observation
        # only the corrections of the annotations the queue counts can be picked
        self.picks = {f"a{a.pk}": a for a in annotations if a.corrected_observation}
        cast(forms.ChoiceField, self.fields["correction"]).choices = [
            (NONE, "none"),
            *[(key, a.author.username) for key, a in self.picks.items()],
            (OWN, "my own"),
        ]
        for dim in DIMENSIONS:
            self.fields[f"rating_{dim}"] = forms.IntegerField(
                required=False,
                min_value=1,
                max_value=5,
                error_messages={
                    "invalid": f"the {dim} rating must be 1-5",
                    "min_value": f"the {dim} rating must be 1-5",
                    "max_value": f"the {dim} rating must be 1-5",
                },
            )

    def clean(self) -> dict[str, Any]:
        c = super().clean() or {}
        if c.get("verdict") == Verdict.NEEDS_FIX and (c.get("correction") or NONE) == NONE:
            # a "needs fix" with no correction trains nothing and reads as decided
            self.add_error(
                "correction",
                "“needs fix” needs the correction that stands: pick an annotator's or write "
                "your own",
            )
        if c.get("correction") == OWN:
            text = c.get("own_correction") or ""
            if not text.strip():
                self.add_error("own_correction", "write your correction, or pick another")
            elif text == self.observation:
                self.add_error(
                    "own_correction",
                    "your correction is the model's observation unchanged: correct it, or "
                    "accept the observation as it is"
                    if c.get("verdict") == Verdict.NEEDS_FIX
                    else "your correction is the model's observation unchanged: pick “none” "
                    "instead",
                )
        return c

    def first_error(self) -> str:
        for errors in self.errors.values():
            return str(errors[0])
        return ""

    def decision(self, adjudicator) -> dict[str, Any]:
        """The keyword arguments of `adjudicate` after the item and the adjudicator."""
        c = self.cleaned_data
        choice = c.get("correction") or NONE
        text, by = "", None
        if choice == OWN:
            text, by = c["own_correction"], adjudicator
        elif choice in self.picks:
            picked = self.picks[choice]
            text, by = picked.corrected_observation, picked.author
        return {
            "verdict": c["verdict"],
            "ratings": {
                dim: c[f"rating_{dim}"] for dim in DIMENSIONS if c.get(f"rating_{dim}") is not None
            },
            "note": c["note"].strip(),
            "corrected_observation": text,
            "correction_by": by,
        }
