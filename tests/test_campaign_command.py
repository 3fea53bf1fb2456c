"""`manage.py campaign`: run plays a campaign in the shell's process with a bar on stderr and
prints its summary; bad input is one line naming what and where; list, show, cancel and
resume."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio.models import Campaign, JobStatus, ModelEndpoint, SlotStatus
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
    lines = out.splitlines()
    assert lines[0] == (
        f"campaign {campaign.pk} 'Northwind calendar: 2 tasks x 2 episodes': 4 episodes "
        "(2 tasks x 2 episodes x 1 arm, seed 3)"
    )
    assert f"campaign {campaign.pk} 'Northwind calendar: 2 tasks x 2 episodes' succeeded" in lines
    assert "  4 episodes: ended 4, failed 0, not played 0" in lines
    assert (
        "  not successes (scored below 1, or an error), by end cause: submitted x2 in arm none"
        in lines
    )
    assert "errors of the failed episodes" not in out
    assert "success 50% of 4 scored" in out
    assert "count: success 100% of 2 scored" in out and "sync: success 0% of 2 scored" in out
    assert "agent model scripted agent (agent-m)" in out and "cost unknown" in out
    assert "4/4" in capsys.readouterr().err  # the bar, on stderr
    listed, _ = _run("list", "--project", project.name)
    assert f"{campaign.pk}\tsucceeded\t4/4" in listed
    shown, _ = _run("show", str(campaign.pk))
    assert "success 50% of 4 scored" in shown
    with pytest.raises(CommandError, match="already ended: it succeeded"):
        _run("cancel", str(campaign.pk))
    with pytest.raises(
        CommandError, match=f"campaign {campaign.pk} succeeded: a campaign resumes once it stopped"
    ):
        _run("resume", str(campaign.pk))


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_episodes_failed_names_their_errors_and_exits_non_zero(project):
    """Every episode failed: the summary says the campaign failed and why, lists the failed
    episodes' distinct errors (at most 5 lines) and the run exits non-zero with one line."""
    world = calendar_world(project)
    with (
        fake_openai_server(lambda b, i: (400, "model not loaded")) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        endpoints(project, agent_srv, world_srv)
        out = io.StringIO()
        with pytest.raises(CommandError) as caught:
            call_command(
                "campaign", "run", "--project", project.name, "--world", world.name,
                "--task-ids", "count-thursday", "--agent-model", "scripted agent",
                "--no-progress", stdout=out, stderr=io.StringIO(),
            )  # fmt: skip
        campaign = Campaign.objects.get()
        assert str(caught.value) == f"campaign {campaign.pk}: 1 of 1 episode failed"
        lines = out.getvalue().splitlines()
        name = "Northwind calendar: 1 task x 1 episode"
        assert lines[0].startswith(f"campaign {campaign.pk} '{name}': 1 episode (1 task x ")
        assert "(1 task x 1 episode x 1 arm, seed" in lines[0]
        assert f"campaign {campaign.pk} '{name}' failed" in lines
        assert "  error: every episode failed; the first error: " in out.getvalue()
        assert "  1 episode: ended 0, failed 1, not played 0" in lines
        assert "by end cause: error x1 in arm none" in out.getvalue()
        at = lines.index("  errors of the failed episodes:")
        assert lines[at + 1].startswith("    1 x ") and "model not loaded" in lines[at + 1]
        assert "agent model 'agent-m'" in lines[at + 1]

        # ten episodes, each failing with its own error: 4 lines and one for the rest
        Campaign.objects.all().delete()
        with fake_openai_server(lambda b, i: (400, f"overloaded, request {i}")) as other:
            ModelEndpoint.objects.filter(name="scripted agent").update(base_url=other)
            out = io.StringIO()
            with pytest.raises(CommandError, match=r": 10 of 10 episodes failed$"):
                call_command(
                    "campaign", "run", "--project", project.name, "--world", world.name,
                    "--agent-model", "scripted agent", "--episodes", "2", "--no-progress",
                    stdout=out, stderr=io.StringIO(),
                )  # fmt: skip
    lines = out.getvalue().splitlines()
    at = lines.index("  errors of the failed episodes:")
    listed = lines[at + 1 : at + 6]
    assert [line.startswith("    1 x ") for line in listed] == [True] * 4 + [False]
    assert listed[4] == "    and 6 more episodes with 6 other errors"
    assert len({line.split("request")[-1] for line in listed[:4]}) == 4


@pytest.mark.django_db(transaction=True)
def test_the_model_clients_retry_notes_stay_out_of_the_bar(project, caplog, capsys):
    """An agent model that answers 500: the OpenAI client retries it, and its "Retrying
    request" notes (INFO) do not break into the bar; the loggers are as they were after."""
    import logging

    world = calendar_world(project)
    caplog.set_level(logging.INFO)
    before = logging.getLogger("openai").level
    with (
        fake_openai_server(lambda b, i: (500, "agent overloaded")) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        endpoints(project, agent_srv, world_srv)
        with pytest.raises(CommandError, match=": 1 of 1 episode failed$"):
            _run(
                "run", "--project", project.name, "--world", world.name,
                "--task-ids", "count-thursday", "--agent-model", "scripted agent",
            )  # fmt: skip
        asked = len(agent_srv.requests)
    assert asked == 3  # the first request and its 2 retries
    notes = [r.getMessage() for r in caplog.records if r.name.startswith(("openai", "httpx"))]
    assert not [n for n in notes if "Retrying request" in n or "HTTP Request" in n], notes
    assert "Retrying request" not in capsys.readouterr().err
    assert logging.getLogger("openai").level == before
    slot = Campaign.objects.get().episodes.get()
    assert slot.status == SlotStatus.FAILED and "agent overloaded" in slot.error


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
    # no --world-model: the only one that reads a world's prompt (the default is the
    # retrieval baseline); with two, none the default, it asks to choose
    from studio.services.endpoints import EndpointData, save_endpoint

    save_endpoint(
        project,
        EndpointData(
            name="Dead world", role="world", kind="openai", base_url="http://127.0.0.1:9/v1"
        ),
    )
    with pytest.raises(CommandError) as caught:
        _run(*base)
    assert str(caught.value) == (
        "--world-model: the project has 2 world models that read a world's prompt (Dead world, "
        "fake world) and none is the default: choose one"
    )
    with pytest.raises(CommandError, match="no agent model named 'other'"):
        _run("run", "--project", project.name, "--world", world.name, "--agent-model", "other")
    with pytest.raises(CommandError, match="--project: no project named 'Nope'"):
        _run("list", "--project", "Nope")
    assert not Campaign.objects.exists()
