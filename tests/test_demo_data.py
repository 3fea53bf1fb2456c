"""The demo data and `manage.py load_demo`: every domain present and rendered by its renderer,
AgentWorldBench samples that rebuild byte-identical prompts, an idempotent loader."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from inference.prompts import reference_messages
from inference.simulation.runner import run_simulation
from inference.simulation.sink import MemorySink
from studio.demo_data.build_demo_data import main as build_demo_files
from studio.jobs.simulation import world_context
from studio.management.commands.load_demo import DEMO_DIR, DEMO_PASSWORD, demo_files
from studio.models import DOMAINS, Membership, Project, Step, Trajectory
from studio.rendering import detect_kind
from studio.rendering.ansi import has_ansi
from studio.services.imports import do_import_file
from studio.services.simulation import build_request
from tests.support.fake_backends import ScriptedBackend

# What each domain's demo must show off: the renderer kinds its observations exercise.
EXPECTED_KINDS = {
    "mcp": {"json"},
    "search": {"search"},
    "terminal": {"terminal"},
    "swe": {"terminal", "diff"},
    "android": {"android"},
    "web": {"html", "ax_tree"},
    "os": {"terminal"},
}


def _load_all(project) -> list:
    return [do_import_file(project=project, path=p, display_name=p.name) for p in demo_files()]


def test_demo_files_match_their_source(tmp_path):
    """The shipped files are exactly what build_demo_data.py writes (edit the source, not them)."""
    build_demo_files(tmp_path)
    built = sorted(p.name for p in tmp_path.iterdir())
    assert built == [p.name for p in demo_files()]
    for name in built:
        assert (tmp_path / name).read_bytes() == (DEMO_DIR / name).read_bytes(), name


@pytest.mark.django_db
def test_demo_covers_all_domains_with_small_realistic_trajectories():
    project = Project.objects.create(name="demo check")
    results = _load_all(project)
    assert sum(r.trajectories_skipped for r in results) == 0
    formats = {r.detected_format for r in results}
    assert formats == {"agentworld-studio/v1", "agentworldbench"}

    trajectories = list(Trajectory.objects.filter(project=project).prefetch_related("tags"))
    by_domain: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_domain.setdefault(t.domain, []).append(t)
        assert 5 <= t.step_count <= 12, (t.title, t.step_count)
        assert t.system_prompt and t.task_instruction, t.title
        assert "<predicted_observation>" in t.system_prompt
        if t.source_format == "agentworld-studio/v1":
            assert t.tags.exists(), f"{t.title} has no tags"
    assert sorted(by_domain) == sorted(DOMAINS)
    assert sum(1 for ts in by_domain.values() if len(ts) >= 2) >= 3
    assert sum(1 for t in trajectories if t.source_format == "agentworldbench") >= 3
    # MCP trajectories carry tool schemas and name the tool of every step.
    for t in by_domain["mcp"]:
        names = {tool["name"] for tool in t.tools}
        assert names and all("inputSchema" in tool for tool in t.tools)
        for step in Step.objects.filter(branch__trajectory=t):
            call = json.loads(step.action)
            assert call["name"] in names and step.meta["tool_name"] == call["name"]
            json.loads(step.observation)  # every tool result is JSON


@pytest.mark.django_db
def test_each_domain_exercises_its_renderer():
    project = Project.objects.create(name="demo renderers")
    _load_all(project)
    for domain, expected in EXPECTED_KINDS.items():
        steps = Step.objects.filter(
            branch__trajectory__project=project, branch__trajectory__domain=domain
        )
        kinds = {detect_kind(domain, s.observation, s.meta)[0] for s in steps}
        assert expected <= kinds, (domain, kinds)
    terminal = Step.objects.filter(
        branch__trajectory__project=project, branch__trajectory__domain="terminal"
    )
    assert sum(1 for s in terminal if has_ansi(s.observation)) >= 3


@pytest.mark.django_db
def test_agentworldbench_demo_rebuilds_the_files_prompts_byte_for_byte():
    project = Project.objects.create(name="demo prompts")
    awb_files = [p for p in demo_files() if p.suffix == ".jsonl"]
    assert len(awb_files) >= 3
    for path in awb_files:
        do_import_file(project=project, path=path, display_name=path.name)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert len({row["id"] for row in rows}) == 1
        trajectory = Trajectory.objects.get(project=project, source_file=path.name)
        steps = list(trajectory.root_branch.all_steps())
        assert len(steps) == len(rows) == rows[0]["total_turns"]
        assert trajectory.system_prompt == rows[0]["system_str"]
        for row in rows:
            k = row["turn_idx"]
            recorded = steps[k - 1]
            assert "**Environment Observation:**" not in recorded.observation
            assert "### Turn" not in recorded.action
            # the prompt the runner sends for that step, with the recorded action
            branch = trajectory.root_branch
            backend = ScriptedBackend()
            request = build_request(branch, {"fork_index": k - 1})
            run_simulation(request, world_context(branch, k - 1), backend, MemorySink())
            assert backend.requests[0].messages == reference_messages(row), (path.name, k)


@pytest.mark.django_db
def test_load_demo_creates_users_roles_and_is_idempotent():
    out = StringIO()
    call_command("load_demo", stdout=out)
    text = out.getvalue()
    project = Project.objects.get(name="Demo")
    assert "user 'admin': created" in text and f"project {project.name!r}: created" in text
    counts = (Trajectory.objects.filter(project=project).count(), Step.objects.count())
    assert counts[0] >= 10 and f"imported {counts[0]} trajectories" in text

    User = get_user_model()
    for username in ("admin", "researcher", "annotator"):
        user = User.objects.get(username=username)
        assert user.check_password(DEMO_PASSWORD)
        assert Membership.objects.get(project=project, user=user).role == username

    again = StringIO()
    call_command("load_demo", stdout=again)
    assert (Trajectory.objects.filter(project=project).count(), Step.objects.count()) == counts
    assert User.objects.filter(username__in=["admin", "researcher", "annotator"]).count() == 3
    assert Membership.objects.filter(project=project).count() == 3
    assert "imported 0 trajectories, 0 steps" in again.getvalue()
    assert f"({counts[0]} already present)" in again.getvalue()


@pytest.mark.django_db
def test_load_demo_leaves_an_existing_users_password_alone():
    get_user_model().objects.create_user(username="researcher", password="my-own-password-1")
    call_command("load_demo", stdout=StringIO())
    user = get_user_model().objects.get(username="researcher")
    assert user.check_password("my-own-password-1")
    assert Membership.objects.get(project__name="Demo", user=user).role == "researcher"


def _long_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if len(line.strip()) >= 60}


def test_demo_text_is_not_copied_from_shared_data(shared_data: Path):
    """Our samples are written for the project: no long line of them occurs in ../shared/data."""
    ours: set[str] = set()
    for path in demo_files():
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                row = json.loads(line)
                for text in [*row["prompt"], *row["response"]]:
                    ours |= _long_lines(text)
        else:
            for t in json.loads(path.read_text())["trajectories"]:
                for s in t["steps"]:
                    ours |= _long_lines(s["observation"]) | _long_lines(s["action"])
    assert len(ours) > 50
    for path in shared_data.rglob("*"):
        if path.is_file() and path.suffix in {".json", ".jsonl", ".traj", ".md", ".txt"}:
            text = path.read_text(errors="replace")
            copied = [line for line in ours if line in text]
            assert not copied, f"{path.name} contains demo text: {copied[:2]}"
