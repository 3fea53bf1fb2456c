"""Fields and checks every form shares against hostile input: numbers that are not finite or
not bounded, JSON with NaN or Infinity in it, and names with markup or control characters.
One place, so a new form gets the same rules (and the same messages) by using them;
`tests/test_hostile_form_inputs.py` feeds every form of `studio.forms` such input."""

from __future__ import annotations

import json
import math
from typing import Any

from django import forms

from inference import worlds as worlding

MAX_ID = 2**63 - 1  # a database id (a bigint): larger overflows the database's integer
MAX_ABS_FLOAT = 1e15  # a number field's default bound when it names none (exact as a float)


class FiniteFloatField(forms.FloatField):
    """A float field that refuses NaN and Infinity (typed as "nan", "inf", "1e400") with a
    message that says so ("Enter a number." reads wrong for what parses as one), and is
    bounded: ±MAX_ABS_FLOAT unless the field names its own bounds."""

    def __init__(self, *, min_value=None, max_value=None, **kwargs: Any):
        super().__init__(
            min_value=-MAX_ABS_FLOAT if min_value is None else min_value,
            max_value=MAX_ABS_FLOAT if max_value is None else max_value,
            **kwargs,
        )

    def validate(self, value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise forms.ValidationError(
                "Only finite numbers are allowed (not NaN or Infinity, and not a number too "
                "large for a float).",
                code="non_finite",
            )
        super().validate(value)


def id_field(**kwargs: Any) -> forms.IntegerField:
    """An integer field holding a database id: 1..MAX_ID (a larger one would overflow the
    query, not just find nothing)."""
    return forms.IntegerField(min_value=1, max_value=MAX_ID, **kwargs)


def loads_json(text: str, what: str) -> Any:
    """The JSON typed into a textarea, NaN / Infinity refused naming their path; a syntax
    error names the line and column. Raises ValidationError starting with `what`."""
    try:
        return worlding.loads(text)
    except worlding.WorldError as exc:
        raise forms.ValidationError(f"{what}: {exc}.") from None
    except RecursionError:
        raise forms.ValidationError(f"{what}: the JSON is nested too deeply.") from None
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"{what}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
        ) from None


def check_plain_name(value: str, what: str = "the name") -> str:
    """`value` stripped, or ValidationError when it holds '<', '>' or a control character
    (a name is one line of plain text: it is shown in pages, prompts and file names)."""
    name = value.strip()
    problem = worlding.name_problem(name, what)
    if problem is not None:
        raise forms.ValidationError(problem[0].upper() + problem[1:] + ".")
    return name


class PlainNameField(forms.CharField):
    """A name: plain one-line text, stripped, over `max_length` refused (never cut)."""

    def __init__(self, *, what: str = "the name", **kwargs: Any):
        if kwargs.get("max_length") is None:
            raise TypeError("a name field needs a max_length")
        self.what = what
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        value = super().clean(value)
        return check_plain_name(value, self.what) if value else value
