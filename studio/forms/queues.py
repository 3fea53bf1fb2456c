"""The forms that make an annotation queue (`data_object()` is the validated `QueueData`),
edit its guidelines and questions, and reassign a claim.

Questions are written one a line, `<kind>[*] <key> [options or min-max]: <label>` (`*`:
required), e.g. `scale* clarity 1-5: How clear is it?`, `single safety [safe, unsafe]: Is it
safe?`, `multi issues [typo, wrong value]: Which issues?`, `text notes: Anything else?`; or
as a JSON list of question objects (see `studio.services.questions`)."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from django import forms
from django.contrib.auth import get_user_model

from inference.worlds import loads as strict_json
from studio.forms.fields import FiniteFloatField, PlainNameField
from studio.models import Branch, Project, World
from studio.services.questions import validate_questions
from studio.services.queues import DOMAIN_CHOICES, MAX_ITEMS, ORIGINS, QueueData, name_taken

MAX_GUIDELINES_CHARS = 50_000
QUESTION_LINE = re.compile(
    r"^(?P<kind>[a-z]+)(?P<required>\*)?\s+(?P<key>\S+?)"
    r"(?:\s*\[(?P<options>[^\]]*)\]|\s+(?P<min>-?\d+)\s*-\s*(?P<max>-?\d+))?"
    r"\s*(?::\s*(?P<label>.*))?$"
)
QUESTIONS_HELP = (
    "One a line: kind (scale, single, multi, text), * if required, a key, the options in "
    "[ ] or a scale's min-max (0-9), then : and the question. E.g. "
    "“scale* clarity 1-5: How clear is it?”, “single safety [safe, unsafe]: Is it safe?”, "
    "“multi issues [typo, wrong value]: Which issues?”, “text notes: Anything else?”"
)


def parse_questions(text: str) -> list[dict[str, Any]]:
    """The questions written in the form (lines, or a JSON list), validated; ValueError
    names the line or the question."""
    text = (text or "").strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            raw = strict_json(text)  # NaN / Infinity refused (a WorldError, a ValueError)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the questions are not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise ValueError("the questions' JSON is nested too deeply") from None
        except ValueError as exc:
            raise ValueError(f"the questions: {exc}") from None
        return validate_questions(raw)
    raw = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        found = QUESTION_LINE.match(line)
        if found is None:
            raise ValueError(f"line {n}: write “kind key [options]: question” (see the help)")
        item: dict[str, Any] = {
            "kind": found["kind"],
            "key": found["key"],
            "label": (found["label"] or "").strip(),
            "required": bool(found["required"]),
        }
        if found["options"] is not None:
            item["options"] = found["options"].split(",")
        if found["min"] is not None:
            item["min"], item["max"] = found["min"], found["max"]
        raw.append(item)
    return validate_questions(raw)


def format_questions(questions: list[dict[str, Any]]) -> str:
    """The questions as the form writes them (for editing)."""
    lines = []
    for q in questions or []:
        head = q["kind"] + ("*" if q.get("required") else "") + " " + q["key"]
        if q["kind"] == "scale":
            head += f" {q['min']}-{q['max']}"
        elif q["kind"] in ("single", "multi"):
            head += " [" + ", ".join(q["options"]) + "]"
        lines.append(f"{head}: {q['label']}")
    return "\n".join(lines)


class SetupFields(forms.Form):
    """A queue's guidelines and questions (the new-queue form and the owners' edit form)."""

    guidelines = forms.CharField(
        required=False,
        max_length=MAX_GUIDELINES_CHARS,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="What annotators read before they start, in Markdown (no raw HTML)",
    )
    questions = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "mono"}),
        label="Custom questions",
        help_text=QUESTIONS_HELP,
    )

    def clean_questions(self) -> list[dict[str, Any]]:
        try:
            return parse_questions(self.cleaned_data.get("questions") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class QueueSetupForm(SetupFields):
    pass


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
    judge_below = FiniteFloatField(
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


class QueueForm(StepFilterForm, SetupFields):
    field_order = [
        "name", "annotators_per_item", "blind", "claim_minutes", "assignees", "guidelines",
        "questions", "domain", "origin", "perturbed", "malformed", "tag", "world",
        "judge_below", "branches", "limit",
    ]  # fmt: skip

    name = PlainNameField(max_length=200, what="the queue's name")
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

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        clash = name_taken(self.project, name)
        if clash is not None:
            raise forms.ValidationError(
                f"This project already has a queue named {clash!r} (queue names are unique "
                "per project, ignoring case)."
            )
        return name

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
            guidelines=(c.get("guidelines") or "").strip(),
            questions=tuple(c.get("questions") or ()),
            **self.filter_values(),
        )


class ReassignForm(forms.Form):
    """Whom the lead gives a claim's slot to: a member who works the queue."""

    user = forms.ModelChoiceField(queryset=get_user_model().objects.none(), label="Give to")

    def __init__(self, *args: Any, queue: Any, exclude: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        members = get_user_model().objects.filter(memberships__project=queue.project_id)
        if queue.assignees.exists():
            members = members.filter(pk__in=queue.assignees.values("pk"))
        if exclude is not None:
            members = members.exclude(pk=exclude)
        field = cast(forms.ModelChoiceField, self.fields["user"])
        field.queryset = members.order_by("username")

    def members(self):
        """Whom the slot may go to (the queue page lists them beside each claim)."""
        return cast(forms.ModelChoiceField, self.fields["user"]).queryset
