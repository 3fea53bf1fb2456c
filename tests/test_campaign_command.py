"""`manage.py campaign`: run plays a campaign in the shell's process with a bar on stderr and
prints its summary; bad input is one line naming what and where; list, show, cancel and
resume."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio.models import Campaign, JobStatus, SlotStatus
from tests.support.campaigns import WORLD_ANSWER, ScriptedAgent, calendar_world, endpoints
from tests.support.fake_openai import fake_openai_server


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("campaign", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_campaign_run_plays_it_in_the_shell_and_prints_the_summary(project, tmp_path, capsys):
    world = calendar_world(project)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "count", "instruction": "How many events are on Thursday? Submit the number.", '
        '"expected": "3", "rubric": {"episode": [{"name": "answer", "kind": "exact", '
        '"target": "final_answer"}]}}\n'
        '{"id": "sync", "instruction": "Move the Search relevance sync and submit its time.", '
        '"expected": "11:45", "rubric": {"episode": [{"name": "answer", "kind": "exact", '
        '"target": "final_answer"}]}}\n'
    )
    with (
        fake_openai_server(ScriptedAgent()) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        endpoints(project, agent_srv, world_srv)
        out, _ = _run(
            "run", "--project", project.name, "--world", world.name, "--tasks", str(tasks),
            "--agent-model", "scripted agent", "--world-model", "fake world",
            "--episodes", "2", "--max-steps", "4", "--seed", "3", "--concurrency", "2",
        )  # fmt: skip
    campaign = Campaign.objects.get()
    assert campaign.status == JobStatus.SUCCEEDED and campaign.source == "file"
    assert list(campaign.episodes.values_list("status", flat=True)) == [SlotStatus.DONE] * 4
    assert "campaign 1 " in out or f"campaign {campaign.pk} " in out
    assert "success 50% of 4 scored" in out
    assert "count: success 100% of 2 scored" in out and "sync: success 0% of 2 scored" in out
    assert "agent model scripted agent (agent-m)" in out and "cost unknown" in out
    assert "4/4" in capsys.readouterr().err  # the bar, on stderr
    listed, _ = _run("list", "--project", project.name)
    assert f"{campaign.pk}\tsucceeded\t4/4" in listed
    shown, _ = _run("show", str(campaign.pk))
    assert "success 50% of 4 scored" in shown
    with pytest.raises(CommandError, match="already ended"):
        _run("cancel", str(campaign.pk))
    with pytest.raises(CommandError, match="only a cancelled or failed"):
        _run("resume", str(campaign.pk))


@pytest.mark.django_db
def test_bad_input_is_one_line_naming_what_and_where(project, tmp_path):
    world = calendar_world(project)
    endpoints(project, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"instruction": "one"}\n{"expected": "3"}\n')
    base = [
        "run",
        "--project",
        project.name,
        "--world",
        world.name,
        "--agent-model",
        "scripted agent",
    ]
    cases = {
        ("--tasks", str(bad)): "tasks.jsonl line 2: field 'instruction' is required",
        ("--tasks", str(tmp_path / "missing.jsonl")): "--tasks: cannot read",
        ("--task-ids", "nope"): "has no task 'nope'",
        ("--perturbation", "Nope"): "--perturbation: no perturbation 'Nope'",
        ("--episodes", "0"): "episodes per task",
    }
    for extra, message in cases.items():
        with pytest.raises(CommandError) as caught:
            _run(*base, *extra)
        assert message in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(CommandError, match="no agent model named 'other'"):
        _run("run", "--project", project.name, "--world", world.name, "--agent-model", "other")
    with pytest.raises(CommandError, match="--project: no project named 'Nope'"):
        _run("list", "--project", "Nope")
    assert not Campaign.objects.exists()
