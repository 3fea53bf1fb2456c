"""The forms of a rollout campaign: the one that starts it (`CampaignForm`, whose
`data_object()` is the validated `studio.services.campaigns.CampaignData`), and the two that
turn its episodes into an annotation queue or a dataset version."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db.models import Avg, OuterRef, Subquery

from inference.rubrics import EPISODE_SEED_LIMIT
from inference.worlds import non_finite, number_word
from studio.forms.datasets import turns_of_source
from studio.forms.fields import FiniteFloatField, PlainNameField
from studio.models import (
    Campaign,
    CampaignSource,
    DatasetVersion,
    EndpointRole,
    ModelEndpoint,
    Perturbation,
    Project,
    Step,
    StepJudgement,
    Tag,
    Trajectory,
    World,
)
from studio.services import campaigns as service
from studio.services.episodes import MAX_STEPS_LIMIT

MAX_TYPED_TASKS = 500
MAX_TASKS_FILE_BYTES = 5 * 1024 * 1024
MAX_TAGGED_TRAJECTORIES = 500


def default_concurrency() -> int:
    return int(settings.STUDIO_CAMPAIGN_CONCURRENCY)


def max_concurrency() -> int:
    return int(settings.STUDIO_CAMPAIGN_MAX_CONCURRENCY)


def _endpoint_label(endpoint: ModelEndpoint) -> str:
    if not endpoint.model or endpoint.model == endpoint.name:
        return endpoint.name
    return f"{endpoint.name} · {endpoint.model}"


def _sentence(message: str) -> str:
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


# the tags a campaign gives its episodes ("campaign:12"): never offered as recorded starts
CAMPAIGN_TAG = r"^campaign:[0-9]+$"
SEED_WORDS = "A seed is a whole number from 0 to 2^63 − 1, or blank for a random one."


def world_model_choices(project: Project):
    """The world models a campaign's episodes can be answered by: every world model of the
    project but the retrieval baseline (it answers with recorded observations and never reads
    a world's prompt), by name."""
    return (
        ModelEndpoint.objects.filter(project=project, role=EndpointRole.WORLD)
        .exclude(kind="retrieval")
        .order_by("name", "pk")
    )


def world_model_help(project: Project, candidates: list[ModelEndpoint]) -> str:
    """Why the world model field has no choice made when the project's default world model
    cannot answer a campaign (it is the retrieval baseline, or there is none) and several can."""
    default = ModelEndpoint.objects.filter(
        project=project, role=EndpointRole.WORLD, is_default=True
    ).first()
    if default is not None:
        why = (
            f"The project's default world model, {default.name}, is the retrieval baseline: it "
            "answers with recorded observations and never reads a world's prompt"
        )
    else:
        why = "The project has no default world model"
    return (
        f"{why}. Choose which of these {len(candidates)} world models answers the episodes "
        "(making one the default on the Models page picks it here)."
    )


class CampaignForm(forms.Form):
    name = PlainNameField(max_length=200, what="the campaign's name")
    world = forms.ModelChoiceField(
        queryset=World.objects.none(),
        required=False,
        empty_label="— pick a world —",
        help_text="The world every episode plays in (its latest version when the campaign is "
        "made). Not used for recorded trajectories' starting states.",
    )
    source = forms.ChoiceField(
        choices=CampaignSource.choices,
        initial=CampaignSource.WORLD,
        widget=forms.RadioSelect,
        label="Tasks",
    )
    task_ids = forms.MultipleChoiceField(
        required=False,
        label="The world's tasks",
        widget=forms.SelectMultiple(attrs={"size": 8}),
        help_text="None picked: every task of the world.",
    )
    tasks_text = forms.CharField(
        required=False,
        label="Tasks typed in",
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}),
        help_text="One instruction per line.",
    )
    tasks_file = forms.FileField(
        required=False,
        label="Tasks file (JSONL)",
        help_text='One task a line: {"id": …, "instruction": …} with optional "expected", '
        '"success_criteria", "max_steps" and "rubric". "expected" and "success_criteria" are '
        "used only by rubric checks that need them (the task's own rubric, or the world's): "
        'a task no check applies to is "not scored".',
    )
    trajectory_tag = forms.ModelChoiceField(
        queryset=Tag.objects.none(),
        required=False,
        label="Recorded trajectories tagged",
        empty_label="— pick a tag —",
        help_text="Each trajectory with this tag is a task: its episodes start from its "
        "recorded start, with its instruction.",
    )
    agent = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(), label="Agent model", empty_label=None
    )
    world_model = forms.ModelChoiceField(
        queryset=ModelEndpoint.objects.none(),
        label="World model",
        empty_label="— pick a world model —",
    )
    episodes_per_task = forms.IntegerField(
        min_value=1, initial=4, label="Episodes per task (M)",
        help_text="Each task is played M times in every arm (no perturbation, and one arm per "
        "perturbation ticked below).",
    )  # fmt: skip
    max_steps = forms.IntegerField(min_value=1, max_value=MAX_STEPS_LIMIT, initial=10)
    perturbations = forms.ModelMultipleChoiceField(
        queryset=Perturbation.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Each perturbation ticked is an arm of its own, played beside the arm "
        "“none” (always played) with the same seeds.",
    )
    seed = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=EPISODE_SEED_LIMIT - 1,
        error_messages={"min_value": SEED_WORDS, "max_value": SEED_WORDS, "invalid": SEED_WORDS},
        help_text="Blank: drawn at random (shown on the campaign's page; keep it to repeat the "
        "campaign). Every arm plays a task's repeat with the same seed.",
    )
    concurrency = forms.IntegerField(min_value=1, label="Episodes at once")
    temperature = FiniteFloatField(
        min_value=0.0, max_value=2.0, initial=0.7, label="Agent temperature"
    )
    max_tokens = forms.IntegerField(
        min_value=1, max_value=262144, initial=1024, label="Agent max_tokens"
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.project = project
        worlds = World.objects.filter(project=project).order_by("name")
        cast(forms.ModelChoiceField, self.fields["world"]).queryset = worlds
        self.worlds = list(worlds)
        # every world's tasks, grouped by world: those of the world chosen are the ones taken
        self.world_tasks: dict[int, list[tuple[str, str]]] = {}
        groups = []
        for world in self.worlds:
            version = world.latest
            tasks = list(version.spec().tasks) if version is not None else []
            self.world_tasks[world.pk] = [(t.id, t.instruction) for t in tasks]
            if tasks:
                groups.append(
                    (
                        world.name,
                        [(f"{world.pk}:{t.id}", f"{t.id} · {t.instruction[:80]}") for t in tasks],
                    )
                )
        cast(forms.MultipleChoiceField, self.fields["task_ids"]).choices = groups
        cast(forms.ModelChoiceField, self.fields["trajectory_tag"]).queryset = (
            Tag.objects.filter(project=project).exclude(name__regex=CAMPAIGN_TAG).order_by("name")
        )
        agents = ModelEndpoint.objects.filter(
            project=project, role=EndpointRole.AGENT, kind="openai"
        ).order_by("-is_default", "name")
        agent_field = cast(forms.ModelChoiceField, self.fields["agent"])
        agent_field.queryset = agents
        agent_field.label_from_instance = _endpoint_label  # type: ignore[assignment]
        self.has_agent = agents.exists()
        wm_default, wm_candidates = service.world_model_candidates(project)
        wm_field = cast(forms.ModelChoiceField, self.fields["world_model"])
        wm_field.queryset = world_model_choices(project)
        wm_field.label_from_instance = _endpoint_label  # type: ignore[assignment]
        self.has_world_model = bool(wm_candidates)
        # never a silent pick: the project's default world model when it reads a world's
        # prompt, else the only one that does; several and no such default: the person picks
        wm_pick = wm_default or (wm_candidates[0] if len(wm_candidates) == 1 else None)
        if wm_pick is not None:
            wm_field.initial = wm_pick.pk
            wm_field.empty_label = None
        elif wm_candidates:
            wm_field.help_text = world_model_help(project, wm_candidates)
            wm_field.error_messages["required"] = (
                "Pick the world model that answers the episodes (the project's default world "
                "model does not read a world's prompt)."
            )
        # none to pick: the form says so once (clean), not also "this field is required"
        agent_field.required = self.has_agent
        wm_field.required = self.has_world_model
        perturbations = cast(forms.ModelMultipleChoiceField, self.fields["perturbations"])
        perturbations.queryset = Perturbation.objects.filter(project=project).order_by("name")
        self.has_perturbations = perturbations.queryset.exists()
        concurrency = self.fields["concurrency"]
        concurrency.initial = default_concurrency()
        cast(forms.IntegerField, concurrency).max_value = max_concurrency()
        concurrency.validators.append(MaxValueValidator(max_concurrency()))
        concurrency.help_text = (
            f"Episodes played at once (at most {max_concurrency()}, "
            "STUDIO_CAMPAIGN_MAX_CONCURRENCY)."
        )
        concurrency.widget.attrs.update(min="1", max=str(max_concurrency()))
        self.fields["max_steps"].widget.attrs.update(min="1", max=str(MAX_STEPS_LIMIT))
        # every task's episodes count against STUDIO_CAMPAIGN_MAX_EPISODES: one task's too
        episodes = cast(forms.IntegerField, self.fields["episodes_per_task"])
        episodes.max_value = settings.STUDIO_CAMPAIGN_MAX_EPISODES
        episodes.validators.append(MaxValueValidator(settings.STUDIO_CAMPAIGN_MAX_EPISODES))
        episodes.widget.attrs.update(min="1", max=str(settings.STUDIO_CAMPAIGN_MAX_EPISODES))
        first_agent = agents.first()
        if first_agent is not None:
            agent_field.initial = first_agent.pk
        self.resolved_tasks: list[dict[str, Any]] = []

    def preselect_world(self, world_id: Any) -> None:
        """`?world=<id>`: the world picked (one of the project's, else nothing)."""
        try:
            pk = int(world_id)
        except (TypeError, ValueError):
            return
        for world in self.worlds:
            if world.pk == pk:
                self.initial["world"] = world.pk
                if not self.initial.get("name"):
                    self.initial["name"] = f"{world.name} campaign"

    # ---- the tasks ----------------------------------------------------------------------

    def _tasks_of_world(self, world: World | None) -> list[dict[str, Any]]:
        picked = self.cleaned_data.get("task_ids") or []
        if world is None:
            if picked:
                self.add_error("world", "Pick the world whose tasks are played.")
            return []
        if not self.world_tasks.get(world.pk):
            self.add_error(
                "task_ids",
                f"The world {world.name!r} has no tasks: add some in its editor, or type tasks "
                "or import a JSONL file instead.",
            )
            return []
        ids: list[str] = []
        names = {w.pk: w.name for w in self.worlds}
        for value in picked:
            world_pk, _, task_id = str(value).partition(":")
            if world_pk != str(world.pk):
                other = names.get(int(world_pk)) if world_pk.isdigit() else None
                self.add_error(
                    "task_ids",
                    f"Task {task_id!r} is a task of the world {other!r}, not of {world.name!r}: "
                    "pick the chosen world's tasks (or none for all of them).",
                )
                return []
            ids.append(task_id)
        try:
            return service.world_tasks(world, ids or None)
        except service.CampaignError as exc:
            self.add_error("task_ids", _sentence(str(exc)))
            return []

    def _typed_tasks(self) -> list[dict[str, Any]]:
        lines = [line.strip() for line in (self.cleaned_data.get("tasks_text") or "").splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            self.add_error("tasks_text", "Type at least one task, one instruction per line.")
            return []
        if len(lines) > MAX_TYPED_TASKS:
            self.add_error(
                "tasks_text", f"{len(lines)} tasks typed; at most {MAX_TYPED_TASKS} at once."
            )
            return []
        return [{"id": f"task-{n}", "instruction": line} for n, line in enumerate(lines, 1)]

    def _file_tasks(self) -> list[dict[str, Any]]:
        upload = self.cleaned_data.get("tasks_file")
        if upload is None:
            self.add_error("tasks_file", "Choose a JSONL file of tasks.")
            return []
        name = str(upload.name or "tasks.jsonl")
        if upload.size is not None and upload.size > MAX_TASKS_FILE_BYTES:
            self.add_error(
                "tasks_file",
                f"{name} is {upload.size} bytes; a tasks file may be "
                f"{MAX_TASKS_FILE_BYTES // (1024 * 1024)} MB at most.",
            )
            return []
        raw = upload.read()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            self.add_error("tasks_file", f"{name} is not UTF-8 text.")
            return []
        try:
            tasks = service.parse_tasks_jsonl(text, name=name)
        except service.CampaignError as exc:  # "tasks.jsonl line 3: ...": the name as it is
            message = str(exc)
            self.add_error("tasks_file", message if message.endswith(".") else message + ".")
            return []
        for i, task in enumerate(tasks):
            # json.loads takes NaN / Infinity (e.g. in a state check's "equals"): refused here,
            # naming the task and the path, before anything is stored
            found = non_finite(task, "")
            if found is not None:
                self.add_error(
                    "tasks_file",
                    f"{name}, task {i + 1}: {found[0]} is {number_word(found[1])}: only finite "
                    "numbers are allowed.",
                )
                return []
        if not tasks:
            self.add_error("tasks_file", f"{name} has no task in it.")
        return tasks

    def _trajectory_tasks(self) -> list[dict[str, Any]]:
        tag = self.cleaned_data.get("trajectory_tag")
        if tag is None:
            self.add_error(
                "trajectory_tag", "Pick the tag of the recorded trajectories to start from."
            )
            return []
        ids = list(
            Trajectory.objects.filter(project=self.project, tags=tag)
            .exclude(source_format="episode")
            .order_by("pk")
            .values_list("pk", flat=True)[: MAX_TAGGED_TRAJECTORIES + 1]
        )
        if not ids:
            self.add_error(
                "trajectory_tag",
                f"No recorded trajectory (an episode is none) has the tag {tag.name!r}.",
            )
            return []
        if len(ids) > MAX_TAGGED_TRAJECTORIES:
            self.add_error(
                "trajectory_tag",
                f"More than {MAX_TAGGED_TRAJECTORIES} trajectories have the tag {tag.name!r}; "
                "tag fewer.",
            )
            return []
        try:
            return service.trajectory_tasks(self.project, ids)
        except service.CampaignError as exc:
            self.add_error("trajectory_tag", _sentence(str(exc)))
            return []

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.has_agent:
            self.add_error(
                "agent",
                "This project has no agent model: an admin adds one on the Models page "
                "(role “Agent model”, an OpenAI-compatible server).",
            )
        if not self.has_world_model:
            self.add_error(
                "world_model",
                "This project has no world model that reads a world's prompt: an admin adds "
                "one on the Models page (role “World model”).",
            )
        source = data.get("source")
        world = data.get("world")
        if source in (CampaignSource.WORLD, CampaignSource.TYPED, CampaignSource.FILE):
            if world is None and "world" not in self.errors:
                self.add_error("world", "Pick the world the episodes play in.")
            elif world is not None and world.latest is None:
                self.add_error("world", f"The world {world.name!r} has no version yet.")
        tasks: list[dict[str, Any]] = []
        if source == CampaignSource.WORLD:
            tasks = self._tasks_of_world(world if "world" not in self.errors else None)
        elif source == CampaignSource.TYPED:
            tasks = self._typed_tasks()
        elif source == CampaignSource.FILE:
            tasks = self._file_tasks()
        elif source == CampaignSource.TRAJECTORIES:
            tasks = self._trajectory_tasks()
        self.resolved_tasks = tasks
        return data

    def data_object(self) -> service.CampaignData:
        c = self.cleaned_data
        source = c["source"]
        return service.CampaignData(
            name=c["name"].strip(),
            world=c.get("world") if source != CampaignSource.TRAJECTORIES else None,
            source=source,
            tasks=tuple(self.resolved_tasks),
            agent=c["agent"],
            world_model=c["world_model"],
            episodes_per_task=c["episodes_per_task"],
            max_steps=c["max_steps"],
            perturbations=tuple(c.get("perturbations") or ()),
            seed=c.get("seed"),
            concurrency=c.get("concurrency"),
            temperature=c["temperature"],
            max_tokens=c["max_tokens"],
        )


# ---- from a campaign's episodes ------------------------------------------------------------

QUEUE_WHICH = (
    ("failed", "Episodes not a success, or failed with an error"),
    ("low_judge", "Episodes whose judge score is below a value"),
    ("all", "Every episode"),
)
DATASET_WHICH = (
    ("success", "Successful episodes"),
    ("failed", "Episodes not a success, or failed with an error"),
    ("all", "Every episode"),
)
# a dataset's default name: which episodes, which turns (a dataset holds one kind of turns)
WHICH_NAME = {
    "success": "successful episodes",
    "failed": "episodes not a success",
    "all": "every episode",
}
TURNS_NAME = {"agent": "agent turns", "wm": "world-model turns"}
# "This campaign has no ...": nothing of that kind to take
NO_EPISODE_WORDS = {
    "success": "successful episode yet",
    "failed": "episode yet that was not a success or failed with an error",
    "all": "episode yet",
}
TURNS = (
    ("agent", "Agent turns (agent SFT: export as agent-turns)"),
    ("wm", "World-model turns (world-model SFT: export as wm-turns)"),
)


def judge_scores(trajectory_ids: list[int]) -> dict[int, float]:
    """The mean judge score (1-5) of each episode: over its judged steps, each step's newest
    judgement that scored it. Episodes with no judged step have none."""
    newest = (
        StepJudgement.objects.filter(step=OuterRef("pk"), ok=True, total_score__isnull=False)
        .order_by("-created_at", "-id")
        .values("total_score")[:1]
    )
    rows = (
        Step.objects.filter(branch__trajectory_id__in=trajectory_ids)
        .annotate(score=Subquery(newest))
        .filter(score__isnull=False)
        .values("branch__trajectory_id")
        .annotate(mean=Avg("score"))
    )
    return {r["branch__trajectory_id"]: r["mean"] for r in rows}


class CampaignQueueForm(forms.Form):
    which = forms.ChoiceField(choices=QUEUE_WHICH, initial="failed", label="Episodes")
    below = FiniteFloatField(
        required=False,
        min_value=1.0,
        max_value=5.0,
        initial=3.0,
        label="Judge score below",
        help_text="For “judge score below”: an episode's score is the mean of its judged "
        "steps' newest scores (1–5); episodes not judged are left out.",
    )
    name = PlainNameField(max_length=200, label="Queue name", what="the queue's name")

    def __init__(self, *args: Any, campaign: Campaign, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.campaign = campaign
        self.trajectory_ids: list[int] = []
        if not self.is_bound:
            self.fields["name"].initial = f"{campaign.name}: episodes not a success"[:200]

    def clean(self) -> dict[str, Any]:
        c = super().clean() or {}
        which = c.get("which")
        if which == "low_judge":
            below = c.get("below")
            if below is None and "below" not in self.errors:
                self.add_error("below", "Give the judge score (1–5) episodes must be below.")
                return c
            if below is None:
                return c
            ids = service.slot_trajectory_ids(self.campaign, "all")
            scores = judge_scores(ids)
            if not scores:
                self.add_error(
                    "which",
                    "No episode of this campaign has a judge score yet: judge its steps first.",
                )
                return c
            self.trajectory_ids = [pk for pk in ids if pk in scores and scores[pk] < below]
            if not self.trajectory_ids:
                self.add_error(
                    "below",
                    f"No judged episode scores below {below:g} ({len(scores)} judged).",
                )
        elif which in ("failed", "all"):
            self.trajectory_ids = service.slot_trajectory_ids(self.campaign, which)
            if not self.trajectory_ids:
                words = NO_EPISODE_WORDS[which]
                self.add_error("which", f"This campaign has no {words}.")
        return c


def dataset_default_name(campaign: Campaign, which: str, turns: str) -> str:
    """ "Ledger run: successful episodes (agent turns)": which episodes and which turns, the
    campaign's name shortened to fit 200 characters."""
    suffix = f": {WHICH_NAME[which]} ({TURNS_NAME[turns]})"
    return f"{campaign.name[: 200 - len(suffix)]}{suffix}"


class CampaignDatasetForm(forms.Form):
    which = forms.ChoiceField(choices=DATASET_WHICH, initial="success", label="Episodes")
    turns = forms.ChoiceField(choices=TURNS, initial="agent", widget=forms.RadioSelect)
    dataset_name = PlainNameField(
        what="the dataset's name",
        max_length=200,
        label="Dataset",
        help_text="A new version of this dataset (made if the project has none of that name). "
        "A dataset holds one kind of turns: its name follows the turns chosen.",
    )

    def __init__(self, *args: Any, campaign: Campaign, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.campaign = campaign
        self.trajectory_ids: list[int] = []
        # "which:turns" -> the default name; static/js/campaigns.js follows the choices with it
        self.default_names = {
            f"{which}:{turns}": dataset_default_name(campaign, which, turns)
            for which in WHICH_NAME
            for turns in TURNS_NAME
        }
        if not self.is_bound:
            self.fields["dataset_name"].initial = self.default_names["success:agent"]
        self.fields["dataset_name"].widget.attrs["data-default-names"] = "campaign-dataset-names"

    def clean(self) -> dict[str, Any]:
        c = super().clean() or {}
        which, turns = c.get("which"), c.get("turns")
        name = (c.get("dataset_name") or "").strip()
        if which and turns and name:
            # a default name left as it was follows the choices (without JavaScript too)
            if name in self.default_names.values():
                name = self.default_names[f"{which}:{turns}"]
                c["dataset_name"] = name
            held = dataset_turns(self.campaign.project, name)
            if held is not None and held != turns:
                self.add_error(
                    "dataset_name",
                    f"The dataset {name!r} holds {TURNS_NAME[held]} and a version adds to its "
                    f"latest one's steps: {TURNS_NAME[turns]} go into a dataset of their own. "
                    "Give another name.",
                )
        if which:
            self.trajectory_ids = service.slot_trajectory_ids(self.campaign, which)
            if not self.trajectory_ids:
                self.add_error("which", f"This campaign has no {NO_EPISODE_WORDS[which]}.")
        return c


def dataset_turns(project: Project, name: str) -> str | None:
    """The turns ("agent" or "wm") the latest version of the project's dataset `name` was
    made of, as its source says; None when there is no such dataset or it does not say."""
    source = (
        DatasetVersion.objects.filter(dataset__project=project, dataset__name=name)
        .order_by("-number")
        .values_list("source", flat=True)
        .first()
    )
    return turns_of_source(source or "")
