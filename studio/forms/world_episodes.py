"""The world page's chart options and filters (query parameters, validated here), and the
form a chart selection posts to make a queue or a dataset of the selected episodes."""

from __future__ import annotations

from django import forms

from studio.forms.fields import PlainNameField
from studio.http import whole_number
from studio.services import world_episodes as service
from studio.services.episode_library import CLIENTS, STATES
from studio.services.episode_selection import MAX_EPISODES, NAME_CHARS, TURNS


class WorldEpisodesForm(forms.Form):
    group = forms.ChoiceField(
        required=False, choices=[("token", "by token"), ("client", "by client")], label="Group"
    )
    window = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=service.MAX_WINDOW,
        label="Latest episodes",
        widget=forms.NumberInput(attrs={"step": 1}),
    )
    average = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=service.MAX_AVERAGE,
        label="Moving average over",
        widget=forms.NumberInput(attrs={"step": 1}),
    )
    x = forms.ChoiceField(required=False, choices=list(service.X_AXES.items()), label="X axis")
    client = forms.ChoiceField(
        required=False, choices=[("", "Any client"), *CLIENTS, ("campaign", "campaign")]
    )
    token = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, choices=[("", "Any token")]
    )
    task_id = forms.ChoiceField(required=False, choices=[("", "Any task")], label="Task")
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *STATES])

    def __init__(self, *args, choices: dict[str, list[tuple[str, str]]], **kwargs):
        super().__init__(*args, **kwargs)
        token_field = self.fields["token"]
        assert isinstance(token_field, forms.ChoiceField)
        token_field.choices = [("", "Any token"), *choices["tokens"]]
        task_field = self.fields["task_id"]
        assert isinstance(task_field, forms.ChoiceField)
        task_field.choices = [("", "Any task"), *choices["tasks"]]

    def filters(self) -> service.Filters:
        """The cleaned options (defaults for those not given); call after is_valid()."""
        data = self.cleaned_data
        return service.Filters(
            group=data.get("group") or "token",
            window=data.get("window") or service.DEFAULT_WINDOW,
            average=data.get("average") or service.DEFAULT_AVERAGE,
            x=data.get("x") or "number",
            client=data.get("client") or "",
            token=data.get("token"),
            task_id=data.get("task_id") or "",
            state=data.get("state") or "",
        )


class EpisodeIdsField(forms.CharField):
    """Episode ids, comma or space separated (the chart's selection writes them)."""

    def to_python(self, value):
        text = super().to_python(value) or ""
        parts = [p for p in text.replace(",", " ").split() if p]
        ids: list[int] = []
        for part in parts:
            number = whole_number(part)
            if number is None:
                raise forms.ValidationError(f"{part!r} is not an episode id (a whole number)")
            ids.append(number)
        if len(ids) > MAX_EPISODES:
            raise forms.ValidationError(f"at most {MAX_EPISODES} episodes at once")
        return ids


class SelectionQueueForm(forms.Form):
    episodes = EpisodeIdsField(
        required=False, max_length=MAX_EPISODES * 12, widget=forms.HiddenInput
    )
    # the table's checkboxes: the same ids, for those who do not draw on the chart
    episode = forms.TypedMultipleChoiceField(required=False, coerce=int, choices=[])
    name = PlainNameField(max_length=NAME_CHARS, label="Queue name", what="the queue's name")
    blind = forms.BooleanField(required=False, label="Blind (annotators do not see each other)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # any whole number: the service refuses ids that are no episode of the project
        episode_field = self.fields["episode"]
        assert isinstance(episode_field, forms.TypedMultipleChoiceField)
        episode_field.valid_value = lambda value: str(value).isdigit()  # type: ignore[method-assign]

    def ids(self) -> list[int]:
        return [*self.cleaned_data.get("episodes", []), *self.cleaned_data.get("episode", [])]

    def clean(self):
        data = super().clean() or {}
        if not self.errors and not (data.get("episodes") or data.get("episode")):
            raise forms.ValidationError(
                "no episode selected: select points on a chart or tick episodes in the table"
            )
        return data


class SelectionDatasetForm(SelectionQueueForm):
    name = PlainNameField(max_length=NAME_CHARS, label="Dataset name", what="the dataset's name")
    turns = forms.ChoiceField(choices=list(TURNS.items()), initial="agent", label="Turns")
    blind = None  # type: ignore[assignment]
