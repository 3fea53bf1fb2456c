"""Hostile input everywhere numbers, JSON or names come in (issue 25 points 3 and 7): every
form of `studio.forms` (found by importing the package, so a new form is covered too) is fed
NaN / Infinity, huge and negative numbers, markup-bearing names, control characters and
over-long text, and must refuse the value with a message on that field or clean it to a
finite, bounded, markup-free value, never raise. Worlds: NaN anywhere in a valid world is
refused naming its path, in `parse_world`, the import page, both editor paths and the
`worlds` command; plus the replay's max_steps, tool names and duplicate queue names."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import pkgutil
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import studio.forms
from inference import worlds as W
from inference.simulation.request import ForkFacts
from studio.forms.fields import MAX_ID
from studio.models import AnnotationQueue, Campaign, World
from studio.services import queues as queue_service
from tests.support.branching import make_trajectory

ROOT = Path(__file__).resolve().parents[1]

# ---- the forms, found -----------------------------------------------------------------------


def _form_classes() -> list[type[forms.BaseForm]]:
    found = []
    for info in pkgutil.iter_modules(studio.forms.__path__):
        module = importlib.import_module(f"studio.forms.{info.name}")
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, forms.BaseForm)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__name__}")


FORMS = _form_classes()


def _needs_a_file(cls: type[forms.BaseForm]) -> bool:
    return any(isinstance(f, forms.FileField) for f in cls.base_fields.values())


@pytest.fixture
def form_env(project):
    """What the forms' constructors take, by keyword: one of each, of `project`."""
    _, branch = make_trajectory(project, domain="mcp", steps=[("a", "b"), ("c", "d")])
    fork = ForkFacts(step_count=2, recorded_action="a", domain="mcp")
    return {
        "project": project,
        "branch": branch,
        "branches": [branch],
        "fork_index": 0,
        "fork": fork,
        "at": 0,
        "campaign": Campaign.objects.create(project=project, name="A campaign"),
        "queue": AnnotationQueue.objects.create(project=project, name="A queue"),
        "annotations": [],
        "observation": "an observation",
        "choices": {"tokens": [], "tasks": []},
    }


def _make(cls: type[forms.BaseForm], data: dict[str, Any], env: dict[str, Any]):
    params = inspect.signature(cls.__init__).parameters.values()
    kwargs = {
        p.name: env[p.name]
        for p in params
        if p.kind is p.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    }
    return cls(data, **kwargs)


# ---- hostile values, by the kind of field ---------------------------------------------------

NON_FINITE_TEXT = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e400", "-1e999"]
NUMBERS = st.one_of(
    st.sampled_from(NON_FINITE_TEXT + ["9" * 40, "-" + "9" * 40, "-5", "0", "1e308"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
MARKUP = ["<b>bad name</b>", '"><script>alert(1)</script>', "a<b", "x>y"]
CONTROL = ["a\x00b", "line\nbreak", "tab\there", "\x1b[31mred", "bell\x07", "c1\x85"]
JSON_NON_FINITE = [
    '{"a": NaN}',
    "[1, Infinity]",
    '{"type": "object", "properties": {"n": {"type": "number", "maximum": -Infinity}}}',
    '{"x": 1e400}',
    "NaN",
]
JSON_FIELDS = {"parameters", "rubric", "termination", "questions", "tools_import"}


def _texts(field: forms.Field) -> st.SearchStrategy[str]:
    limit = getattr(field, "max_length", None) or 1000
    return st.one_of(
        st.sampled_from(MARKUP + CONTROL + NON_FINITE_TEXT + JSON_NON_FINITE),
        st.just("x" * (limit + 1)),
        st.text(max_size=50),
    )


def _is_name(name: str) -> bool:
    return name == "name" or name.endswith("_name")


def _numeric(field: forms.Field) -> bool:
    return isinstance(field, forms.IntegerField | forms.FloatField | forms.DecimalField)


def _cases() -> list[tuple[type[forms.BaseForm], str]]:
    out = []
    for cls in FORMS:
        for name, field in cls.base_fields.items():
            if _numeric(field) or isinstance(field, forms.CharField):
                out.append((cls, name))
    return out


def _case_id(case) -> str:
    cls, name = case
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}.{name}"


CASES = [pytest.param(case, id=_case_id(case)) for case in _cases()]


def test_every_form_module_is_covered():
    """A form added to studio.forms is found (so the property below feeds it too)."""
    names = {c.__name__ for c in FORMS}
    assert {"WorldImportForm", "BasicsForm", "ToolForm", "QueueForm", "PerturbationForm"} <= names
    assert {"SimulateForm", "ArenaForm", "CampaignForm"} <= names
    assert len({p.values[0][0] for p in CASES}) >= 30


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
@settings(
    max_examples=25,
    database=None,  # no .hypothesis folder in the work tree
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_form_refuses_or_bounds_hostile_input(case, form_env, data):
    cls, name = case
    if _needs_a_file(cls):
        pytest.skip(f"{cls.__name__} takes an uploaded file: its file is checked by its view")
    field = cls.base_fields[name]
    value = data.draw(NUMBERS if _numeric(field) else _texts(field), label=name)
    form = _make(cls, {name: value}, form_env)
    form.is_valid()  # must not raise, whatever the other fields hold
    errors = form.errors.get(name)
    if errors:
        assert all(str(e).strip() for e in errors)  # a message, not an empty error
        return
    if name not in form.cleaned_data:
        return  # refused by the form as a whole (its clean names the problem)
    cleaned = form.cleaned_data[name]
    if _numeric(field):
        if cleaned is None:
            assert value.strip() == "" or not field.required
            return
        assert math.isfinite(cleaned), f"{name}={value!r} cleaned to {cleaned!r}"
        # bounded: a form may bound a field itself or in its clean (SimulateForm's request
        # names the limit), but nothing past what a database integer holds gets through
        assert abs(cleaned) <= MAX_ID, f"{name}={value!r} cleaned to an unbounded {cleaned!r}"
        return
    text = cleaned if isinstance(cleaned, str) else json.dumps(cleaned)
    if field.max_length is not None and isinstance(cleaned, str):
        assert len(cleaned) <= field.max_length  # refused over the limit, never cut
    if name in JSON_FIELDS and value in JSON_NON_FINITE:
        pytest.fail(f"{_case_id(case)} took {value!r}")
    if _is_name(name):
        assert "<" not in text and ">" not in text, f"{_case_id(case)} took {value!r}"
        assert not W.CONTROL.search(text), f"{_case_id(case)} took {value!r}"


# ---- worlds: NaN anywhere is refused naming its path ---------------------------------------

VALID_WORLD = {
    "name": "Counter Co",
    "domain": "mcp",
    "description": "A counter.",
    "knowledge": ["The counter starts at 0."],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add n",
                "parameters": {
                    "type": "object",
                    "properties": {"n": {"type": "number", "minimum": 0, "maximum": 10}},
                    "required": ["n"],
                },
            },
        }
    ],
    "state_keys": [{"name": "total", "description": "the sum"}],
    "rubric": {"episode": [{"name": "ten", "kind": "state", "key": "total", "equals": 10}]},
    "tasks": [{"id": "to-ten", "instruction": "Reach ten.", "max_steps": 5}],
}


def _slots(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in `value` a JSON value sits (dict entries, list items), as key paths."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*path, k))
            out.extend(_slots(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*path, i))
            out.extend(_slots(v, (*path, i)))
    return out


SLOTS = _slots(VALID_WORLD)


def _with(world: dict, path: tuple, number: float) -> dict:
    copy = json.loads(json.dumps(world))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = number
    return copy


@settings(max_examples=200, deadline=None, database=None)
@given(
    path=st.sampled_from(SLOTS),
    number=st.sampled_from([math.nan, math.inf, -math.inf]),
    as_text=st.booleans(),
    incoming=st.booleans(),
)
def test_parse_world_refuses_nan_anywhere_naming_the_path(path, number, as_text, incoming):
    world = _with(VALID_WORLD, path, number)
    try:
        data = W.loads(json.dumps(world)) if as_text else world  # a file, or parsed data
        W.parse_world(data, incoming=incoming)
    except W.WorldError as exc:
        message = str(exc)
    else:
        pytest.fail(f"a world with {number} at {path} was accepted")
    assert "only finite numbers are allowed" in message
    assert W.number_word(number) in message
    last = str(path[-1])
    assert (f"[{last}]" if isinstance(path[-1], int) else last) in message


def test_the_valid_world_is_valid():
    assert W.parse_world(VALID_WORLD, incoming=True).tool_names == ["add"]


NAN_TOOL = (
    '{"name": "Counter Co", "domain": "mcp", "tools": [{"name": "add", "inputSchema": '
    '{"type": "object", "properties": {"n": {"type": "number", "maximum": NaN}}}}]}'
)
NAN_MESSAGE = "tools[0].inputSchema.properties.n.maximum is NaN (tool &#x27;add&#x27;)"


@pytest.mark.django_db
def test_world_import_page_refuses_a_nan_tool_schema_with_the_path(researcher_client, project):
    upload = SimpleUploadedFile("w.json", NAN_TOOL.encode(), content_type="application/json")
    page = researcher_client.post(
        reverse("world_import", args=[project.pk]), {"file": upload}, follow=True
    )
    assert page.status_code == 200
    text = page.content.decode()
    assert NAN_MESSAGE in text and "only finite numbers are allowed" in text
    assert not World.objects.exists()


def _editor(**changes) -> dict:
    data = {"world-name": "Counter Co", "world-domain": "mcp", "tools_import": ""}
    for prefix in ("knowledge", "files", "tools", "corpus", "screens", "demonstrations"):
        data[f"{prefix}-TOTAL_FORMS"] = "1"
        data[f"{prefix}-INITIAL_FORMS"] = "0"
    data.update({"tools-0-name": "add", "tools-0-parameters": '{"type": "object"}'})
    data.update(changes)
    return data


@pytest.mark.django_db
def test_both_editor_paths_and_the_preview_refuse_a_nan_tool_schema(researcher_client, project):
    nan = '{"type": "object", "properties": {"n": {"type": "number", "maximum": NaN}}}'
    create = researcher_client.post(
        reverse("world_create", args=[project.pk]), _editor(**{"tools-0-parameters": nan})
    )
    assert create.status_code == 400  # the editor's answer to any error: never 500
    assert "Parameters.properties.n.maximum is NaN: only finite numbers are allowed" in (
        create.content.decode()
    )
    assert not World.objects.exists()
    ok = researcher_client.post(reverse("world_create", args=[project.pk]), _editor())
    assert ok.status_code == 302
    world = World.objects.get()
    edit = researcher_client.post(
        reverse("world_edit", args=[world.pk]), _editor(**{"tools-0-parameters": nan})
    )
    assert edit.status_code == 400
    assert "is NaN: only finite numbers are allowed" in edit.content.decode()
    imported = researcher_client.post(
        reverse("world_edit", args=[world.pk]),
        _editor(tools_import=NAN_TOOL.split('"tools": ')[1][:-1]),
    )
    assert imported.status_code == 400
    assert "Tools to import[0].inputSchema.properties.n.maximum is NaN (tool &#x27;add&#x27;)" in (
        imported.content.decode()
    )
    preview = researcher_client.post(
        reverse("world_preview", args=[project.pk]), _editor(**{"tools-0-parameters": nan})
    )
    assert preview.status_code == 200 and "is NaN" in preview.content.decode()
    assert world.versions.count() == 1


@pytest.mark.django_db
def test_a_tool_named_with_markup_is_refused_naming_the_tool(researcher_client, project):
    url = reverse("world_create", args=[project.pk])
    page = researcher_client.post(url, _editor(**{"tools-0-name": "<b>bad name</b>"}))
    assert page.status_code == 400
    text = page.content.decode()
    assert "Tool name &#x27;&lt;b&gt;bad name&lt;/b&gt;&#x27; must be letters, digits" in text
    assert "<b>bad name</b>" not in text
    world = {**VALID_WORLD, "tools": [{"name": "<b>bad name</b>", "inputSchema": {}}]}
    with pytest.raises(W.WorldError, match=r"tools\[0\]: tool name '<b>bad name</b>' must be"):
        W.parse_world(world, incoming=True)
    plain = {k: v for k, v in VALID_WORLD.items() if k != "rubric"}
    for bad in ({"name": "<i>World</i>"}, {"state_keys": [{"name": "a\nb"}]}):
        with pytest.raises(W.WorldError, match="plain text|control character"):
            W.parse_world({**plain, **bad}, incoming=True)
    # a screen's name may say where it is; a tag in it is still refused
    where = {**plain, "domain": "android", "screens": [{"name": "Settings > Wi-Fi"}]}
    assert W.parse_world(where, incoming=True).screens[0].name == "Settings > Wi-Fi"
    with pytest.raises(W.WorldError, match=r"screens\[0\]\.name: .*plain text"):
        W.parse_world({**where, "screens": [{"name": "<b>Home</b>"}]}, incoming=True)
    assert not World.objects.exists()


def test_worlds_import_command_exits_1_with_one_line(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(NAN_TOOL)
    with pytest.raises(CommandError, match=r"is NaN \(tool 'add'\): only finite numbers"):
        call_command("worlds", "import", str(path), "--project", "P", stdout=StringIO())
    env = {**os.environ, "DEBUG": "1", "STUDIO_DATA_DIR": str(tmp_path / "var")}
    env.pop("DATABASE_URL", None)  # the file is refused before any database is opened
    done = subprocess.run(
        [sys.executable, "manage.py", "worlds", "import", str(path), "--project", "P"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "tools[0].inputSchema.properties.n.maximum is NaN" in lines[0]


# ---- replay, perturbations and queues -------------------------------------------------------


@pytest.mark.django_db
def test_replay_refuses_max_steps_minus_5(researcher_client, project):
    from studio.forms.branching import SimulateForm

    _, branch = make_trajectory(project)
    fork = ForkFacts(step_count=5, recorded_action="ls", domain="terminal")
    world = project.endpoints.filter(role="world").first()
    form = SimulateForm(
        {"mode": "replay", "max_steps": "-5", "n": "1", "temperature": "0.6", "top_p": "1",
         "max_tokens": "100", "action_format": "auto", "world_endpoint": str(world.pk)},
        fork_index=0, fork=fork, project=project,
    )  # fmt: skip
    assert not form.is_valid()
    assert "max_steps" in form.errors
    from inference.simulation.request import InvalidRequest, SimulationRequest
    from studio.services.simulation import simulation_defaults

    with pytest.raises(InvalidRequest) as caught:  # the API's path, without the form
        SimulationRequest.build(
            {"mode": "replay", "fork_index": 0, "max_steps": -5},
            fork=fork,
            defaults=simulation_defaults(project),
        )
    assert "max_steps" in caught.value.errors
    page = researcher_client.post(
        reverse("branch_fork", args=[branch.pk, 0]),
        {"mode": "replay", "max_steps": "-5", "action": "ls", "action_format": "auto", "n": "1",
         "temperature": "0.6", "top_p": "1", "max_tokens": "100", "world_endpoint": str(world.pk)},
    )  # fmt: skip
    assert page.status_code == 400
    assert "greater than or equal to 1" in page.content.decode()


def test_perturbation_parameters_refuse_non_finite_numbers():
    from inference import perturbations as P

    for raw in (math.inf, -math.inf, math.nan, "inf", "nan", "9" * 5000):
        with pytest.raises(P.PerturbationError, match="timeout.seconds"):
            P.build("timeout", {"seconds": raw}, P.DETERMINISTIC)
    with pytest.raises(P.PerturbationError, match="only finite numbers"):
        P.build("tool_error", {"message": math.nan}, P.DETERMINISTIC)


@pytest.mark.django_db
def test_a_queue_name_is_unique_per_project_ignoring_case(researcher_client, project):
    from studio.forms.queues import QueueForm

    make_trajectory(project)
    user = project.users["researcher"]
    first = queue_service.create_queue(project, user, queue_service.QueueData(name="Review"))
    assert first.name == "Review"
    with pytest.raises(queue_service.DuplicateQueueName, match="'Review'"):
        queue_service.create_queue(project, user, queue_service.QueueData(name="review"))
    form = QueueForm(
        {"name": "REVIEW", "annotators_per_item": "1", "claim_minutes": "30", "limit": "10"},
        project=project,
    )
    assert not form.is_valid()
    assert "already has a queue named 'Review'" in form.errors["name"][0]
    page = researcher_client.post(
        reverse("queue_new", args=[project.pk]),
        {"name": "rEvIeW", "annotators_per_item": "1", "claim_minutes": "30", "limit": "10"},
    )
    assert page.status_code == 400 and "already has a queue named" in page.content.decode()
    assert AnnotationQueue.objects.filter(project=project, name__iexact="review").count() == 1
    make_trajectory(project.other, key="k2")  # another project may have its own "Review"
    assert queue_service.create_queue(project.other, user, queue_service.QueueData(name="Review"))


@pytest.mark.django_db
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_perturbation_form_parameters_refuse_hostile_numbers(project, data):
    """The form's parameter fields are made per kind in __init__ (not in base_fields): each
    number parameter refuses what is not a bounded whole number, on its own field."""
    from inference import perturbations as P
    from studio.forms.perturbations import PerturbationForm, param_field_name

    numeric = [(k.name, p) for k in P.KINDS.values() for p in k.params if p.kind is not str]
    kind, param = data.draw(st.sampled_from(numeric), label="parameter")
    value = data.draw(NUMBERS, label="value")
    field = param_field_name(kind, param.name)
    form = PerturbationForm(
        {"name": "p", "kind": kind, "mode": P.DETERMINISTIC, field: value}, project=project
    )
    if form.is_valid():
        number = form.cleaned_data["built"].params[param.name]
        assert math.isfinite(number) and param.low <= number <= param.high
    else:
        assert f"{kind}.{param.name}" in form.errors[field][0].lower()


@pytest.mark.django_db
def test_a_campaign_tasks_file_with_nan_is_refused_naming_the_task(project):
    from studio.forms.campaigns import CampaignForm

    line = json.dumps(
        {
            "instruction": "Reach ten.",
            "rubric": {"episode": [{"name": "a", "kind": "state", "key": "k", "equals": 1}]},
        }
    ).replace('"equals": 1', '"equals": NaN')
    upload = SimpleUploadedFile("tasks.jsonl", f"{line}\n".encode())
    form = CampaignForm({"name": "c", "source": "file"}, {"tasks_file": upload}, project=project)
    assert not form.is_valid()
    assert form.errors["tasks_file"] == [
        "tasks.jsonl, task 1: rubric.episode[0].equals is NaN: only finite numbers are allowed."
    ]
