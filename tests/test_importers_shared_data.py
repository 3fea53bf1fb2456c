"""Every file in ../shared/data imports, with the right format, domain and counts."""

from __future__ import annotations

import json

import pytest

from studio.importers.registry import KNOWN_SUFFIXES
from studio.models import Branch, Project, Step, Trajectory
from studio.services.imports import ImportFailure, do_import_file

A = "android/android-world-agents/"
TB = "mcp/toolbench/"
SW = "swe/swe-agent/"
CTF = "terminal/swe-agent-ctf/"
WV = "web/webvoyager/"

# path -> (format, domain, trajectories, steps)
EXPECTED = {
    A + "FilesDeleteFile_base_gpt-4o-mini_7d52a840.json": ("androidworld", "android", 1, 8),
    A + "results_4.1_mini__SystemBrightnessMin_base_gpt-4.1-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        14,
    ),
    A + "results_gpt_o3_mini__MarkorCreateFolder_base_o3-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        1,
    ),
    A + "results_gpt_o3_mini__SaveCopyOfReceiptTaskEval_base_o3-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        14,
    ),
    A + "results_gpt_o3_mini__SimpleCalendarDeleteEventsOnRelativeDay_base_o3-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        8,
    ),
    A + "results_gpt_o3_mini__SystemBrightnessMin_base_o3-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        3,
    ),
    A + "results_o4_mini__ContactsAddContact_base_o4-mini_trial1.json": (
        "androidworld",
        "android",
        1,
        9,
    ),
    A + "results_seeact__ContactsAddContact_base_gpt-4o-mini_48e64bf7.json": (
        "androidworld",
        "android",
        1,
        7,
    ),
    A + "results_seeact__MarkorMoveNote_reflective_gpt-4.1-mini_16489e32.json": (
        "androidworld",
        "android",
        1,
        9,
    ),
    A + "results_seeact_function_calling__MarkorMoveNote_base_gpt-4.1-mini_8b0f1fc8.json": (
        "androidworld",
        "android",
        1,
        9,
    ),
    "mcp/tau-bench/gpt-4o-airline.json": ("openai-chat", "mcp", 200, 1164),
    TB + "G1_answer__10_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 2),
    TB + "G1_answer__11_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G1_answer__57_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G1_answer__59_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 4),
    TB + "G1_answer__69_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 5),
    TB + "G2_answer__102_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G2_answer__10_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G2_answer__119_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 2),
    TB + "G2_answer__127_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 2),
    TB + "G2_answer__52_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 2),
    TB + "G3_answer__13_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 4),
    TB + "G3_answer__15_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G3_answer__21_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G3_answer__3_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 3),
    TB + "G3_answer__8_ChatGPT_DFS_woFilter_w2.json": ("toolbench", "mcp", 1, 5),
    "search/fireact/hotpotqa_dev_ft-gpt-3.5-turbo-0613_serpapi.json": (
        "fireact",
        "search",
        465,
        1241,
    ),
    "swe/mini-swe-agent/github_issue.traj.json": ("mini-swe-agent", "swe", 1, 10),
    "swe/openhands/multi_swe_bench_examples_output.jsonl": ("openhands", "swe", 3, 103),
    "swe/openhands/runtime_trajs_basic.json": ("openhands", "swe", 1, 1),
    "swe/openhands/runtime_trajs_basic_gui_mode.json": ("openhands", "swe", 1, 4),
    "swe/openhands/runtime_trajs_wrong_initial_state.json": ("openhands", "swe", 1, 3),
    SW + "function_calling_simple.traj": ("swe-agent", "swe", 1, 5),
    SW + "gpt4__swe-agent-test-repo__default_from_url__6e44b9__sweagenttestrepo-1c2844.traj": (
        "swe-agent",
        "swe",
        1,
        5,
    ),
    SW + "gpt4__swe-agent__test-repo__default_from_url__swe-agent__test-repo-i1.traj": (
        "swe-agent",
        "swe",
        1,
        5,
    ),
    SW + "gpt4__swe-bench-dev-easy_first_only__default__pydicom__pydicom-1458.traj": (
        "swe-agent",
        "swe",
        1,
        12,
    ),
    SW + "human_thought__swe-bench-HumanEvalFix-python__lcb__humanevalfix-python-0.traj": (
        "swe-agent",
        "swe",
        1,
        5,
    ),
    SW + "replay_default__marshmallow-code__marshmallow-1867.traj": ("swe-agent", "swe", 1, 14),
    SW + "replay_function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj": (
        "swe-agent",
        "swe",
        1,
        11,
    ),
    SW + "replay_xml_sys-env_window100__marshmallow-code__marshmallow-1867.traj": (
        "swe-agent",
        "swe",
        1,
        11,
    ),
    CTF + "crypto__BabyEncryption.traj": ("swe-agent", "terminal", 1, 16),
    CTF + "crypto__BabyTimeCapsule.traj": ("swe-agent", "terminal", 1, 9),
    CTF + "crypto__eps.traj": ("swe-agent", "terminal", 1, 14),
    CTF + "crypto__katy.traj": ("swe-agent", "terminal", 1, 18),
    CTF + "forensics__flash.traj": ("swe-agent", "terminal", 1, 4),
    CTF + "misc__networking_1.traj": ("swe-agent", "terminal", 1, 4),
    CTF + "pwn__warmup.traj": ("swe-agent", "terminal", 1, 7),
    CTF + "rev__rock.traj": ("swe-agent", "terminal", 1, 12),
    CTF + "web__i_got_id_demo.traj": ("swe-agent", "terminal", 1, 21),
    "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json": ("inspect", "web", 1, 4),
    WV + "taskAllrecipes--4__interact_messages.json": ("webvoyager", "web", 1, 6),
    WV + "taskAmazon--0__interact_messages.json": ("webvoyager", "web", 1, 3),
    WV + "taskApple--17__interact_messages.json": ("webvoyager", "web", 1, 6),
    WV + "taskArXiv--11__interact_messages.json": ("webvoyager", "web", 1, 7),
    WV + "taskBBC_News--9__interact_messages.json": ("webvoyager", "web", 1, 3),
    WV + "taskBooking--1__interact_messages.json": ("webvoyager", "web", 1, 9),
    WV + "taskCambridge_Dictionary--29__interact_messages.json": ("webvoyager", "web", 1, 12),
    WV + "taskCoursera--16__interact_messages.json": ("webvoyager", "web", 1, 5),
    WV + "taskESPN--11__interact_messages.json": ("webvoyager", "web", 1, 5),
    WV + "taskGitHub--0__interact_messages.json": ("webvoyager", "web", 1, 5),
    WV + "taskGoogle_Flights--8__interact_messages.json": ("webvoyager", "web", 1, 11),
    WV + "taskGoogle_Map--4__interact_messages.json": ("webvoyager", "web", 1, 4),
    WV + "taskGoogle_Search--3__interact_messages.json": ("webvoyager", "web", 1, 5),
    WV + "taskHuggingface--3__interact_messages.json": ("webvoyager", "web", 1, 6),
    WV + "taskWolfram_Alpha--6__interact_messages.json": ("webvoyager", "web", 1, 3),
}


# ToolBench keeps its whole depth-first search: (explored branches, steps of all branches).
TB_EXPLORED = {
    TB + "G1_answer__57_ChatGPT_DFS_woFilter_w2.json": (3, 8),
    TB + "G1_answer__69_ChatGPT_DFS_woFilter_w2.json": (7, 19),
    TB + "G2_answer__10_ChatGPT_DFS_woFilter_w2.json": (11, 22),
    TB + "G2_answer__119_ChatGPT_DFS_woFilter_w2.json": (4, 9),
    TB + "G2_answer__127_ChatGPT_DFS_woFilter_w2.json": (2, 4),
    TB + "G2_answer__52_ChatGPT_DFS_woFilter_w2.json": (12, 20),
    TB + "G3_answer__13_ChatGPT_DFS_woFilter_w2.json": (36, 62),
    TB + "G3_answer__15_ChatGPT_DFS_woFilter_w2.json": (19, 38),
    TB + "G3_answer__3_ChatGPT_DFS_woFilter_w2.json": (17, 34),
    TB + "G3_answer__8_ChatGPT_DFS_woFilter_w2.json": (15, 41),
}


@pytest.fixture
def project(db):
    # A bare project: no users to hash passwords for, so the 66 imports stay quick.
    return Project.objects.create(name="Imported")


def test_every_shared_file_is_covered(shared_data):
    found = {
        str(p.relative_to(shared_data))
        for p in shared_data.rglob("*")
        if p.is_file() and p.suffix in KNOWN_SUFFIXES
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_shared_file_imports(db, project, shared_data, rel):
    fmt, domain, n_traj, n_steps = EXPECTED[rel]
    n_explored, all_steps = TB_EXPLORED.get(rel, (0, n_steps))
    result = do_import_file(project=project, path=shared_data / rel)
    assert result.detected_format == fmt
    assert (result.trajectories_created, result.steps_created) == (n_traj, all_steps)
    trajectories = Trajectory.objects.filter(project=project)
    assert trajectories.count() == n_traj
    assert set(trajectories.values_list("domain", flat=True)) == {domain}
    steps = Step.objects.filter(branch__trajectory__project=project)
    assert steps.filter(branch__parent=None).count() == n_steps
    assert steps.count() == all_steps
    explored = Branch.objects.filter(trajectory__project=project, parent__isnull=False)
    assert explored.count() == n_explored
    for t in trajectories:
        root = Branch.objects.get(trajectory=t, parent=None)
        assert (root.name, root.origin, root.lineage) == ("recorded", "recorded", [[root.pk, 0]])
        assert t.step_count == root.steps.count()
        assert t.title and t.source_format == fmt and len(t.source_key) == 64


def steps_of(project, **filters):
    t = Trajectory.objects.get(project=project, **filters)
    return t, list(t.root_branch.all_steps())


def test_tau_bench_tool_call_and_result(db, project, shared_data):
    do_import_file(project=project, path=shared_data / "mcp/tau-bench/gpt-4o-airline.json")
    t, steps = steps_of(project, metadata__task_id=0, metadata__trial=0)
    assert json.loads(steps[0].action) == {
        "name": "get_user_details",
        "arguments": {"user_id": "mia_li_3668"},
    }
    assert steps[0].meta["tool_name"] == "get_user_details"
    assert steps[0].meta["call_id"] == "call_oIHazX6yQrB8hUwl4cRilFKj"
    assert json.loads(steps[0].observation)["address"]["city"] == "Austin"
    # ids are reused in this log: the second search call still gets its own result
    assert json.loads(steps[2].action)["name"] == "search_onestop_flight"
    assert steps[2].observation.startswith('[[{"flight_number": "HAT057"')
    assert t.task_instruction.startswith("You are mia_li_3668.")
    assert t.metadata["reward"] == 0.0


def test_toolbench_keeps_the_explored_search_tree_as_branches(db, project, shared_data):
    name = "G1_answer__57_ChatGPT_DFS_woFilter_w2.json"
    do_import_file(project=project, path=shared_data / TB / name)
    t = Trajectory.objects.get(project=project)
    root = t.root_branch
    recorded = [json.loads(s.action)["name"] for s in root.all_steps()]
    assert recorded == ["products_for_seo_api", "news_for_seo_api", "search_b_for_seo_api"]
    gave_up, pruned, pruned_again = Branch.objects.filter(trajectory=t, parent__isnull=False)
    assert (gave_up.parent_id, gave_up.fork_index, gave_up.name) == (
        root.pk,
        2,
        "explored path 2 · gave up",
    )
    steps = list(gave_up.all_steps())
    # the first two steps are the recorded ones, the third the path the agent gave up on
    assert [s.branch_id for s in steps] == [root.pk, root.pk, gave_up.pk]
    assert json.loads(steps[2].action) == {
        "name": "search_for_seo_api",
        "arguments": {"query": "iPhone 14 news"},
    }
    assert (pruned.parent_id, pruned.fork_index) == (gave_up.pk, 3)
    assert (pruned_again.parent_id, pruned_again.fork_index) == (pruned.pk, 4)
    assert [s.branch_id for s in pruned_again.all_steps()] == [
        root.pk,
        root.pk,
        gave_up.pk,
        pruned.pk,
        pruned_again.pk,
    ]
    assert all(b.origin == "recorded" for b in (gave_up, pruned, pruned_again))
    assert all(s.provenance == "recorded" for s in pruned_again.all_steps())
    # importing it again adds nothing
    again = do_import_file(project=project, path=shared_data / TB / name)
    assert (again.trajectories_created, again.trajectories_skipped) == (0, 1)
    assert Branch.objects.filter(trajectory__project=project).count() == 4


def test_toolbench_chain_tools_and_tree_walk(db, project, shared_data):
    do_import_file(
        project=project, path=shared_data / TB / "G1_answer__10_ChatGPT_DFS_woFilter_w2.json"
    )
    do_import_file(
        project=project, path=shared_data / TB / "G3_answer__8_ChatGPT_DFS_woFilter_w2.json"
    )
    t, steps = steps_of(project, source_file="G1_answer__10_ChatGPT_DFS_woFilter_w2.json")
    assert json.loads(steps[1].action) == {
        "name": "transitaire_for_transitaires",
        "arguments": {"is_id": "ACT_AGENCE_CALEDONIENNE_DE_TRANSIT"},
    }
    assert "'codePostal': '98800'" in steps[1].observation
    assert [tool["name"] for tool in t.tools][:1] == ["transitaire_for_transitaires"]
    assert "Gondrand" in t.task_instruction and "Gondrand" in t.metadata["final_answer"]
    # no train_messages: the tree is walked
    t, steps = steps_of(project, source_file="G3_answer__8_ChatGPT_DFS_woFilter_w2.json")
    assert json.loads(steps[0].action)["arguments"]["genre"] == "Comedy"
    assert "genre must be an integer" in steps[0].observation
    assert all(json.loads(s.action)["name"] != "Finish" for s in steps)


def test_fireact_thought_action_observation(db, project, shared_data):
    do_import_file(
        project=project,
        path=shared_data / "search/fireact/hotpotqa_dev_ft-gpt-3.5-turbo-0613_serpapi.json",
    )
    t, steps = steps_of(project, metadata__id="6238")
    assert steps[0].action == "finish[Seth MacFarlane]"
    assert steps[0].observation == "Episode finished, reward = True"
    assert steps[0].thinking.startswith("Wendy Schaal does the voice of Francine")
    assert (
        t.task_instruction == "Who created the show with Wendy Schaal doing the voice of Francine?"
    )
    search = Step.objects.filter(branch__trajectory__project=project, meta__tool_name="search")
    assert search.count() == 775  # search[...] actions (plus 465 finish[...] and one click[...])
    assert not search.filter(observation__startswith="Observation:").exists()


def test_swe_agent_and_ctf(db, project, shared_data):
    do_import_file(project=project, path=shared_data / CTF / "pwn__warmup.traj")
    do_import_file(project=project, path=shared_data / SW / "function_calling_simple.traj")
    t, steps = steps_of(project, domain="terminal")
    assert steps[0].action == "disassemble warmup"
    assert steps[0].observation.startswith("Function main not found!")
    assert steps[0].thinking == "Let me disassemble the provided binary."
    assert json.loads(steps[0].state)["open_file"] == "n/a"
    assert t.metadata["submission"].strip() == "FLAG{LET_US_BEGIN_CSAW_2016}"
    # the history-only file
    t, steps = steps_of(project, domain="swe")
    assert steps[1].action == 'open "tests/missing_colon.py"'
    assert steps[1].observation.startswith("[File: tests/missing_colon.py (10 lines total)]")
    assert steps[1].meta == {"tool_name": "open", "call_id": "call_upNLxh7rBcDH9w5XiNdoAS0I"}


def test_swe_agent_demonstrations_are_not_the_task(db, project, shared_data):
    name = "gpt4__swe-bench-dev-easy_first_only__default__pydicom__pydicom-1458.traj"
    do_import_file(project=project, path=shared_data / SW / name)
    t = Trajectory.objects.get(project=project)
    # the first user message is a demonstration (is_demo); the task is the real instance's
    # problem statement, not the demo's, and not the surrounding instructions
    assert t.task_instruction.startswith(
        "Pixel Representation attribute should be optional for pixel data handler"
    )
    assert "DEMONSTRATION" not in t.task_instruction
    assert "INSTRUCTIONS:" not in t.task_instruction and "\r\n" not in t.task_instruction
    assert t.metadata["agent_task_prompt"].startswith("We're currently solving the following")


def test_mini_swe_agent_command_and_output(db, project, shared_data):
    do_import_file(project=project, path=shared_data / "swe/mini-swe-agent/github_issue.traj.json")
    t, steps = steps_of(project)
    assert steps[1].action == "ls -la"
    assert steps[1].observation.startswith("<returncode>0</returncode>\n<output>\ntotal 44")
    assert steps[1].thinking.startswith("I need to find the correct path")
    assert t.task_instruction.startswith("Please solve this issue: GitHub Issue: SyntaxError")


def test_openhands_pairs_observations_by_cause(db, project, shared_data):
    do_import_file(
        project=project, path=shared_data / "swe/openhands/runtime_trajs_basic_gui_mode.json"
    )
    do_import_file(
        project=project, path=shared_data / "swe/openhands/multi_swe_bench_examples_output.jsonl"
    )
    t, steps = steps_of(project, source_file="runtime_trajs_basic_gui_mode.json")
    assert steps[0].action == "mkdir -p /workspace/todo-app"
    assert (
        steps[0].observation == "Command `mkdir -p /workspace/todo-app` executed with exit code 0."
    )
    edit = json.loads(steps[1].action)
    assert edit["name"] == "edit" and edit["arguments"]["path"] == "/workspace/todo-app/index.html"
    assert steps[1].observation.startswith("--- /workspace/todo-app/index.html")
    assert steps[3].observation == "Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ..."
    t, steps = steps_of(project, metadata__instance_id="ponylang__ponyc-4595")
    assert steps[0].action == "ls -l /workspace/ponylang__ponyc__0.1"
    assert steps[0].observation.startswith("total 300")
    assert t.metadata["git_patch"].startswith("diff --git")


def test_androidworld_screens(db, project, shared_data):
    do_import_file(
        project=project, path=shared_data / A / "FilesDeleteFile_base_gpt-4o-mini_7d52a840.json"
    )
    t, steps = steps_of(project)
    assert steps[0].action == '{"action_type": "open_app", "app_name": "Files"}'
    assert steps[0].thinking.startswith('To delete the file "backup_helpful_nest.mp3"')
    assert steps[0].observation.splitlines()[1] == (
        '[1] ImageButton desc="Show roots" (clickable) bounds=(0,128)-(147,254)'
    )
    assert "nexuslauncher" in steps[0].state  # the home screen the action was taken on
    assert steps[1].state == steps[0].observation
    assert t.task_instruction.startswith("Delete the file backup_helpful_nest.mp3")
    assert t.metadata["success"] is True


def test_webvoyager_and_inspect(db, project, shared_data):
    do_import_file(project=project, path=shared_data / WV / "taskGitHub--0__interact_messages.json")
    do_import_file(
        project=project,
        path=shared_data / "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json",
    )
    t, steps = steps_of(project, source_format="webvoyager")
    assert steps[1].action == "Type [0]; climate change data visualization"
    assert '[5]: <button> "climate change data visualization"' in steps[1].observation
    assert steps[-1].action.startswith("ANSWER; resource-watch/resource-watch")
    assert t.task_instruction.startswith("Search for an open-source project related to")
    t, steps = steps_of(project, source_format="inspect")
    assert json.loads(steps[1].action) == {
        "name": "web_browser_click",
        "arguments": {"element_id": 151},
    }
    assert '[810] link "Work"' in steps[1].observation
    assert "web_browser_go" in [tool["name"] for tool in t.tools]


def _set(doc, path: tuple, value):
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


# Real files with one part given the wrong JSON type: (file, path in it, value, the error
# expected, or None when the part is optional and the file still imports).
MALFORMED = [
    (SW + "function_calling_simple.traj", ("history", 1), 7, "at history[1]: expected a JSON"),
    (SW + "function_calling_simple.traj", ("history", 4, "tool_calls"), {"a": 1}, None),
    (SW + "function_calling_simple.traj", ("history", 4, "tool_calls"), True, None),
    (SW + "function_calling_simple.traj", ("history", 4, "tool_calls", 0, "function"), "x", None),
    # a file without train_messages: its steps come from the search tree
    (TB + "G1_answer__69_ChatGPT_DFS_woFilter_w2.json", ("tree", "tree", "children"), 1, None),
    (
        TB + "G1_answer__69_ChatGPT_DFS_woFilter_w2.json",
        ("tree", "tree", "children"),
        {"a": 1},
        None,
    ),
    (
        "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json",
        ("samples", 0),
        None,
        "at samples[0]: expected a JSON object",
    ),
    (
        "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json",
        ("samples", 0, "events"),
        1,
        None,
    ),
    ("swe/openhands/runtime_trajs_basic_gui_mode.json", (-1, "extras", "metadata"), "x", None),
]


@pytest.mark.parametrize(("rel", "where", "value", "error"), MALFORMED)
def test_wrong_json_types_give_a_named_error_or_import(
    db, project, shared_data, tmp_path, rel, where, value, error
):
    doc = json.loads((shared_data / rel).read_text())
    if rel.startswith("swe/openhands"):
        where = (next(i for i, e in enumerate(doc) if e.get("observation") == "run"), *where[1:])
    _set(doc, where, value)
    path = tmp_path / rel.rsplit("/", 1)[-1]
    path.write_text(json.dumps(doc))
    if error is None:
        assert do_import_file(project=project, path=path).trajectories_created == 1
    else:
        with pytest.raises(ImportFailure) as err:
            do_import_file(project=project, path=path)
        assert str(err.value).startswith(f"{path.name} {error}")
        assert not Trajectory.objects.exists()


ANDROID_2 = "results_gpt_o3_mini__MarkorCreateFolder_base_o3-mini_trial1.json"
TOOLBENCH_2 = "G1_answer__69_ChatGPT_DFS_woFilter_w2.json"


@pytest.mark.parametrize(
    ("files", "fmt", "steps"),
    [
        ((A + "FilesDeleteFile_base_gpt-4o-mini_7d52a840.json", A + ANDROID_2), "androidworld", 9),
        ((TB + "G1_answer__10_ChatGPT_DFS_woFilter_w2.json", TB + TOOLBENCH_2), "toolbench", 21),
        ((CTF + "forensics__flash.traj", CTF + "misc__networking_1.traj"), "swe-agent", 8),
    ],
)
def test_json_array_of_several_trajectories(db, project, shared_data, tmp_path, files, fmt, steps):
    """Several trajectories of one format saved as one JSON list are detected and imported
    like the separate files; a bad one is named by its record."""
    docs = [json.loads((shared_data / rel).read_text()) for rel in files]
    path = tmp_path / "several.json"
    path.write_text(json.dumps(docs))
    result = do_import_file(project=project, path=path)
    assert (result.detected_format, result.trajectories_created, result.steps_created) == (
        fmt,
        2,
        steps,
    )
    docs[1] = []
    path.write_text(json.dumps(docs))
    with pytest.raises(ImportFailure, match=r"^several.json record 1: expected a JSON object"):
        do_import_file(project=project, path=path)
