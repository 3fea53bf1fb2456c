"""Fictional worlds: the file format and its checks (plain Python), composing the prompt,
versions, the editor and its preview, import/export in the browser's forms and the shell."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inference import worlds as W
from studio.models import Project, SimulationJob, Trajectory, World, WorldVersion
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import import_world, save_world, start_trajectory
from tests.support.branching import make_trajectory
from tests.test_branching_views import editor_post

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WORLD = {
    "name": "Lyon Weather Co",
    "domain": "mcp",
    "description": "A weather service that only knows French cities.",
    "knowledge": ["It has rained in Lyon for 40 days.", "Paris is always 21 C."],
    "files": {"/etc/service.conf": "region=fr\n"},
    "tools": [WEATHER],
}


# ---- the format ---------------------------------------------------------------------------


def test_a_world_file_round_trips_byte_for_byte():
    spec = W.parse_world(WORLD)
    text = W.dumps(spec)
    assert W.dumps(W.parse_world(json.loads(text))) == text
    assert spec.tool_names == ["get_weather"]
    assert json.loads(text)["format"] == W.FORMAT


def test_mcp_tools_list_results_are_read_as_tools():
    mcp = {
        "tools": [{"name": "search_docs", "description": "d", "inputSchema": {"type": "object"}}]
    }
    (tool,) = W.read_tools(mcp)
    assert tool == {
        "type": "function",
        "function": {"name": "search_docs", "description": "d", "parameters": {"type": "object"}},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": {"type": "nope"}}}]},
         r"tools\[0\] \(get_weather\): parameters is not a valid JSON Schema at type"),
        ({"tools": [WEATHER, WEATHER]}, r"tools\[1\] \(get_weather\): two tools are named"),
        ({"tools": [{"function": {"description": "x"}}]}, r"tools\[0\]: a tool needs a name"),
        ({"domain": "moon"}, "domain must be one of mcp"),
        ({"knowledge": "one fact"}, "knowledge must be a list"),
        ({"files": {"a.txt": 3}}, r"files\['a.txt'\] must be text"),
        ({"corpus": [{"url": "x"}]}, r"corpus\[0\]\.title is required"),
        ({"colour": "blue"}, "unknown field 'colour'"),
    ],
)  # fmt: skip
def test_bad_worlds_are_refused_naming_the_field(change, message):
    with pytest.raises(W.WorldError, match=message):
        W.parse_world({**WORLD, **change})


def test_the_composed_prompt_holds_every_part_and_warns_past_the_budget():
    spec = W.parse_world(WORLD)
    composed = W.compose(spec)
    prompt = composed.system_prompt
    for text in ("Lyon Weather Co", "rained in Lyon", "/etc/service.conf", '"get_weather"'):
        assert text in prompt
    assert "<predicted_observation>" in prompt
    assert composed.tokens_estimated and composed.tokens == round(len(prompt) / W.CHARS_PER_TOKEN)
    assert not composed.warnings
    small = W.compose(spec, budget=10)
    assert small.over_budget and "more than the budget of 10" in small.warnings[0]
    counted = W.compose(spec, count_tokens=lambda text: 7)
    assert (counted.tokens, counted.tokens_estimated) == (7, False)
    bare = W.compose(W.parse_world({**WORLD, "tools": []}))
    assert "every tool call will fail" in bare.warnings[0]


# ---- versions -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_change_is_a_version_and_no_change_writes_nothing(project):
    first = save_world(project, W.parse_world(WORLD))
    assert (first.version.number, first.created) == (1, True)
    same = save_world(project, W.parse_world(WORLD), world=first.world)
    assert (same.version.number, same.created) == (1, False)
    changed = import_world(project, {**WORLD, "rules": "No snow."})
    assert (changed.world.pk, changed.version.number) == (first.world.pk, 2)
    assert WorldVersion.objects.count() == 2


@pytest.mark.django_db
def test_a_trajectory_started_in_a_world_has_its_prompt_and_tools(project):
    saved = save_world(project, W.parse_world(WORLD))
    trajectory = start_trajectory(saved.version, "Tell me the weather in Lyon.")
    assert trajectory.domain == "mcp" and trajectory.step_count == 0
    assert "rained in Lyon" in trajectory.system_prompt
    assert trajectory.tools[0]["name"] == "get_weather"
    assert trajectory.metadata["world"] == {"id": saved.world.pk, "name": "Lyon Weather Co",
                                            "version": 1}  # fmt: skip
    assert trajectory.branches.get().all_steps().count() == 0


# ---- the editor ---------------------------------------------------------------------------


def editor_form(**changes) -> dict:
    data = {
        "world-name": "Lyon Weather Co", "world-domain": "mcp",
        "world-description": "A weather service.", "world-rules": "", "world-initial_state": "",
        "tools_import": "",
    }  # fmt: skip
    for prefix in ("knowledge", "files", "tools", "corpus", "screens", "demonstrations"):
        data[f"{prefix}-TOTAL_FORMS"] = "1"
        data[f"{prefix}-INITIAL_FORMS"] = "0"
    data.update(
        {
            "knowledge-0-text": "It rains in Lyon.",
            "files-0-path": "/srv/readme.txt",
            "files-0-content": "hello",
            "tools-0-name": "get_weather",
            "tools-0-description": "weather",
            "tools-0-parameters": json.dumps(WEATHER["function"]["parameters"]),
        }
    )
    data.update(changes)
    return data


@pytest.mark.django_db
def test_the_editor_creates_a_world_and_errors_name_the_part(researcher_client, project):
    url = reverse("world_create", args=[project.pk])
    bad_json = researcher_client.post(url, editor_form(**{"tools-0-parameters": "{oops"}))
    assert bad_json.status_code == 400
    assert "Not valid JSON at line 1, column 2" in bad_json.content.decode()
    bad_schema = researcher_client.post(
        url, editor_form(**{"tools-0-parameters": '{"type": "nope"}'})
    )
    assert "Tools, row 1 (get_weather): parameters is not a valid JSON Schema" in (
        bad_schema.content.decode()
    )
    dup = editor_form(**{"files-TOTAL_FORMS": "2", "files-1-path": "/srv/readme.txt",
                         "files-1-content": "again"})  # fmt: skip
    assert "two files have the same path" in researcher_client.post(url, dup).content.decode()
    assert not World.objects.exists()
    ok = researcher_client.post(url, editor_form())
    assert ok.status_code == 302
    world = World.objects.get()
    data = world.latest.data
    assert data["files"] == {"/srv/readme.txt": "hello"}
    assert data["knowledge"] == ["It rains in Lyon."]
    assert data["tools"][0]["function"]["name"] == "get_weather"
    page = researcher_client.get(reverse("world_edit", args=[world.pk])).content.decode()
    assert "readme.txt" in page and 'href="#files-0"' in page  # the file tree links the row
    # saving again with an imported MCP tools/list result: a second version with both tools
    mcp = json.dumps({"tools": [{"name": "forecast", "inputSchema": {"type": "object"}}]})
    edit = researcher_client.post(reverse("world_edit", args=[world.pk]),
                                  editor_form(tools_import=mcp, **{"world_id": str(world.pk)}))  # fmt: skip
    assert edit.status_code == 302
    assert [t["function"]["name"] for t in world.latest.data["tools"]] == [
        "get_weather",
        "forecast",
    ]
    assert world.latest.number == 2


@pytest.mark.django_db
def test_the_preview_shows_the_prompt_and_its_size_and_writes_nothing(researcher_client, project):
    url = reverse("world_preview", args=[project.pk])
    with CaptureQueriesContext(connection) as queries:
        page = researcher_client.post(url, editor_form(**{"knowledge-0-text": "Snow in June."}))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Snow in June." in text and "characters" in text and "tokens" in text
    assert not [q for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))]
    broken = researcher_client.post(url, editor_form(**{"tools-0-parameters": '{"type": 5}'}))
    assert "is not a valid JSON Schema" in broken.content.decode()


@pytest.mark.django_db
def test_annotators_read_worlds_but_cannot_change_them(annotator_client, project):
    saved = save_world(project, W.parse_world(WORLD))
    assert annotator_client.get(reverse("world_list", args=[project.pk])).status_code == 200
    assert annotator_client.get(reverse("world_edit", args=[saved.world.pk])).status_code == 200
    assert (
        annotator_client.post(
            reverse("world_edit", args=[saved.world.pk]), editor_form()
        ).status_code
        == 403
    )
    assert annotator_client.get(reverse("world_create", args=[project.pk])).status_code == 403
    assert annotator_client.post(reverse("world_delete", args=[saved.world.pk])).status_code == 403


@pytest.mark.django_db
def test_upload_import_errors_name_the_tool_and_export_downloads(researcher_client, project):
    from django.core.files.uploadedfile import SimpleUploadedFile

    url = reverse("world_import", args=[project.pk])
    bad = {**WORLD, "tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": []}}]}
    upload = SimpleUploadedFile("w.json", json.dumps(bad).encode())
    page = researcher_client.post(url, {"file": upload}, follow=True).content.decode()
    assert "w.json: tools[0] (get_weather): parameters must be a JSON Schema object" in page
    assert not World.objects.exists()
    good = SimpleUploadedFile("w.json", json.dumps(WORLD).encode())
    page = researcher_client.post(url, {"file": good}, follow=True).content.decode()
    assert "Imported world &#x27;Lyon Weather Co&#x27; (version 1)" in page
    world = World.objects.get()
    export = researcher_client.get(reverse("world_export", args=[world.pk]))
    assert export["Content-Disposition"] == 'attachment; filename="lyon-weather-co-v1.json"'
    assert W.parse_world(json.loads(export.content)).tool_names == ["get_weather"]


@pytest.mark.django_db
def test_a_fork_in_a_world_records_the_version(researcher_client, project):
    t, root = make_trajectory(project, domain="mcp", steps=[('{"name": "get_weather"}', "{}")] * 2)
    saved = save_world(project, W.parse_world(WORLD))
    action = '{"name": "get_weather", "arguments": {"city": "Lyon"}}'
    # the baseline reads no prompt: simulating "in a world" with it would be a false label
    baseline = editor_post(project, action=action, world=str(saved.world.pk))
    refused = researcher_client.post(reverse("branch_fork", args=[root.pk, 1]), baseline)
    assert refused.status_code == 400 and "never reads a world" in refused.content.decode()
    model = save_endpoint(project, EndpointData(name="lab", role="world", kind="openai",
                                                base_url="http://127.0.0.1:9/v1", model="m"))  # fmt: skip
    post = {**baseline, "world_endpoint": str(model.endpoint.pk)}
    response = researcher_client.post(reverse("branch_fork", args=[root.pk, 1]), post)
    assert response.status_code == 302, response.content.decode()[:3000]
    job = SimulationJob.objects.get()
    assert job.world_version == saved.version
    assert job.params["world"] == {"id": saved.world.pk, "name": "Lyon Weather Co", "version": 1}
    page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "in world <strong>Lyon Weather Co</strong> v1" in page
    # a terminal trajectory is not offered an MCP world
    t2, root2 = make_trajectory(project, key="term")
    editor = researcher_client.get(reverse("branch_fork", args=[root2.pk, 1])).content.decode()
    assert "No terminal world in this project" in editor


# ---- the shell ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_worlds_command_imports_exports_and_lists(tmp_path):
    src = tmp_path / "world.json"
    src.write_text(json.dumps(WORLD))
    out = StringIO()
    call_command("worlds", "import", str(src), "--project", "Fiction", stdout=out)
    assert "'Lyon Weather Co' v1 (new world) in project 'Fiction'" in out.getvalue()
    first = tmp_path / "first.json"
    call_command("worlds", "export", "Lyon Weather Co", "--project", "Fiction", "--out", str(first),
                 stdout=StringIO())  # fmt: skip
    call_command("worlds", "import", str(first), "--project", "Fiction", stdout=out)
    assert "(unchanged)" in out.getvalue()
    second = tmp_path / "second.json"
    call_command("worlds", "export", "Lyon Weather Co", "--project", "Fiction", "--out",
                 str(second), stdout=StringIO())  # fmt: skip
    assert first.read_bytes() == second.read_bytes()  # export -> import -> export is stable
    listing = StringIO()
    call_command("worlds", "list", "--project", "Fiction", stdout=listing)
    world = World.objects.get()
    assert f"{world.pk}\tLyon Weather Co\tmcp\tv1\t/mcp/t/<token>/worlds/{world.pk}/" in (
        listing.getvalue()
    )
    assert Project.objects.get(name="Fiction").endpoints.exists()  # a project like any other
    changed = dict(WORLD, description="Now it snows in Lyon.")
    src.write_text(json.dumps(changed))
    call_command("worlds", "import", str(src), "--project", "Fiction", stdout=out)
    assert "'Lyon Weather Co' v2 (new version) in project 'Fiction'" in out.getvalue()
    src.write_text(json.dumps(WORLD))  # back to v1's content: a third version, v3
    call_command("worlds", "import", str(src), "--project", "Fiction", stdout=out)
    assert "v3 (new version)" in out.getvalue()


@pytest.mark.django_db
def test_worlds_command_refuses_an_invalid_tool_schema_naming_the_tool(tmp_path):
    bad = {**WORLD, "tools": [{**WEATHER, "function": {**WEATHER["function"],
                                                       "parameters": {"type": "nope"}}}]}  # fmt: skip
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(bad))
    with pytest.raises(
        CommandError, match=r"tools\[0\] \(get_weather\): parameters is not a valid"
    ):
        call_command("worlds", "import", str(src), "--project", "Fiction")
    assert not Project.objects.filter(name="Fiction").exists()  # nothing half-written
    with pytest.raises(CommandError, match="no world named 'Nope'"):
        Project.objects.create(name="Empty")
        call_command("worlds", "export", "Nope", "--project", "Empty", "--out", "-")
    assert not Trajectory.objects.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tools": [{"name": "t", "inputSchema": {"$schema": []}}]},
         r"parameters.\$schema must be the URI"),
        ({"name": "x" * 201}, "name is longer than 200"),
    ],
)  # fmt: skip
def test_odd_worlds_are_refused_not_crashed_on(change, message):
    with pytest.raises(W.WorldError, match=message):
        W.parse_world({**WORLD, **change})


@pytest.mark.django_db
def test_a_blank_task_gets_a_default(project):
    saved = save_world(project, W.parse_world(WORLD))
    trajectory = start_trajectory(saved.version, "   ")
    assert trajectory.task_instruction == "An episode in Lyon Weather Co"


@pytest.mark.django_db
def test_deleting_a_world_asks_first_saying_what_goes_and_what_stays(researcher_client, project):
    from studio.models import Step

    saved = save_world(project, W.parse_world(WORLD))
    save_world(
        project, W.parse_world({**WORLD, "description": "Now with Lille."}), world=saved.world
    )
    started = start_trajectory(saved.world.latest, "Is it raining in Lyon?")
    Step.objects.create(branch=started.root_branch, index=0, action="a", observation="b")
    listing = researcher_client.get(reverse("world_list", args=[project.pk])).content.decode()
    confirm_url = reverse("world_delete", args=[saved.world.pk])
    assert f'href="{confirm_url}"' in listing  # a link to the question, not a one-click delete
    page = researcher_client.get(confirm_url).content.decode()
    assert World.objects.filter(pk=saved.world.pk).exists()  # asking deletes nothing
    assert "Delete the world <em>Lyon Weather Co</em>?" in page
    assert 'id="delete-versions">2 versions<' in page and "(the latest is v2)" in page
    assert 'id="delete-trajectories">1 trajectory<' in page and "keep their steps" in page
    assert "no new step can be simulated in them" in page
    response = researcher_client.post(confirm_url)
    assert response.status_code == 302 and not World.objects.exists()
    assert not WorldVersion.objects.exists()
    started.refresh_from_db()
    assert started.root_branch.steps.count() == 1  # kept, with its steps
    done = researcher_client.get(response["Location"]).content.decode()
    assert "trajectories started in it keep their" in done


@pytest.mark.django_db
def test_world_wording_says_each_thing_once(researcher_client, project):
    """No "On in the world in world …": the root of a trajectory started in a world is
    "start", and the pages name the world once."""
    saved = save_world(project, W.parse_world(WORLD))
    started = start_trajectory(saved.version, "Is it raining in Lyon?")
    assert started.root_branch.name == "start"
    for url in (
        reverse("playground", args=[started.root_branch.pk]),
        reverse("trajectory", args=[started.pk]),
        reverse("world_list", args=[project.pk]),
    ):
        page = researcher_client.get(url).content.decode()
        for garbled in ("On in", "in the world in world", "in world in", "world world"):
            assert garbled not in page, (url, garbled)


def test_a_long_task_makes_a_title_cut_at_a_word_with_an_ellipsis():
    from studio.services.worlds import _first_line

    task = "Free at least 10G on /var without deleting the nightly dumps and tell me what\nmore"
    title = _first_line(task + " you removed", 60)
    assert title == "Free at least 10G on /var without deleting the nightly…"
    assert _first_line("A short one\nsecond line", 60) == "A short one"
