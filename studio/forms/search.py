"""The search page's forms: the query (the search language of `studio.search.query`, whose
parse errors name the column), saving a search, and a search's hits made into a tag, a
queue or a dataset. The only place their parameters are validated."""

from __future__ import annotations

from django import forms

from studio.forms.fields import PlainNameField
from studio.models.search import QUERY_CHARS
from studio.search.query import QueryError, parse
from studio.search.service import MAX_OFFSET, SORTS
from studio.services.step_selection import NAME_CHARS, TAG_CHARS

QUERY_MAX = 1000  # what a person types; a saved search holds up to QUERY_CHARS
SORT_LABELS = {
    "relevance": "Best match",
    "newest": "Newest first",
    "oldest": "Oldest first",
    "meaning": "Closest in meaning",
}
PER_PAGE = 25
MAX_PAGE = MAX_OFFSET // PER_PAGE + 1

assert QUERY_MAX <= QUERY_CHARS


class QueryField(forms.CharField):
    """A query of the search language: refused with the parser's message (what is wrong
    and at which column)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", QUERY_MAX)
        kwargs.setdefault("strip", True)
        super().__init__(**kwargs)

    def clean(self, value):
        value = super().clean(value)
        if value:
            try:
                parse(value)
            except QueryError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value


def sort_choices(meaning: bool) -> list[tuple[str, str]]:
    names = [*SORTS, "meaning"] if meaning else list(SORTS)
    return [(name, SORT_LABELS[name]) for name in names]


class SearchForm(forms.Form):
    q = QueryField(
        required=False,
        label="Search",
        widget=forms.TextInput(
            attrs={
                "type": "search",
                "placeholder": 'Words, "a phrase", prefix*, -excluded, action:…, domain:…',
                "autocomplete": "off",
                "autofocus": True,
            }
        ),
    )
    sort = forms.ChoiceField(required=False, choices=sort_choices(False), label="Sort")
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def __init__(self, *args, meaning: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        sort = self.fields["sort"]
        assert isinstance(sort, forms.ChoiceField)
        # "closest in meaning" only where the project has an embedding model
        sort.choices = sort_choices(meaning)


class SaveSearchForm(forms.Form):
    name = PlainNameField(max_length=200, label="Name", what="the search's name")
    q = QueryField(required=True, label="Query")
    sort = forms.ChoiceField(required=False, choices=sort_choices(True))
    shared = forms.BooleanField(required=False, label="Shared with the project")


class HitsForm(forms.Form):
    """Every hit of a search (not only the page shown): the query it runs again."""

    q = QueryField(required=True, label="Query", widget=forms.HiddenInput)


class HitsTagForm(HitsForm):
    tag = PlainNameField(max_length=TAG_CHARS, label="Tag", what="the tag")


class HitsQueueForm(HitsForm):
    name = PlainNameField(max_length=NAME_CHARS, label="Queue name", what="the queue's name")
    blind = forms.BooleanField(required=False, label="Blind (annotators do not see each other)")


class HitsDatasetForm(HitsForm):
    name = PlainNameField(max_length=NAME_CHARS, label="Dataset name", what="the dataset's name")
    confirm_rejected = forms.BooleanField(
        required=False, label="Add steps someone rejected in review too"
    )
