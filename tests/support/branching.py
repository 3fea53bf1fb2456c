"""Trajectories, branches and jobs for the branching tests, written straight to the database
(the state a worker leaves behind), so views can be tested without running one."""

from __future__ import annotations

from studio.models import Branch, SimulationJob, Step, Trajectory
from studio.models.trajectories import BranchStatus

TERMINAL_STEPS = [
    ("ls", "README.md  setup.py  src"),
    ("cat README.md", "# Demo\nA small demo project.\nRun make test."),
    ("python -m pytest -q", "3 passed in 0.12s"),
    ("git status", "On branch main\nnothing to commit, working tree clean"),
    ("echo done", "done"),
]

MCP_STEPS = [
    ('{"name": "get_weather", "arguments": {"city": "Lyon"}}', '{"temp_c": 14, "sky": "rain"}'),
    ('{"name": "get_time", "arguments": {}}', '{"time": "10:02"}'),
]


def make_trajectory(project, *, domain="terminal", steps=None, title="Demo trajectory", key="k1"):
    steps = steps if steps is not None else TERMINAL_STEPS
    traj = Trajectory.objects.create(
        project=project,
        domain=domain,
        title=title,
        task_instruction="Check the project.",
        source_format="agentworld-studio/v1",
        source_key=key,
        step_count=len(steps),
    )
    root = Branch.objects.create(trajectory=traj, name="recorded")
    Step.objects.bulk_create(
        Step(branch=root, index=i, action=a, observation=o) for i, (a, o) in enumerate(steps)
    )
    return traj, root


def make_child(
    parent,
    fork_index,
    observations,
    *,
    name=None,
    origin="simulated",
    action=None,
    status=BranchStatus.SUCCEEDED,
    job=None,
    sample_index=0,
    parse_status="well_formed",
):
    """A child of `parent` forked at `fork_index` whose own steps carry `observations`."""
    branch = Branch.objects.create(
        trajectory=parent.trajectory,
        parent=parent,
        fork_index=fork_index,
        name=name or f"sim@{fork_index}",
        origin=origin,
        status=status,
        job=job,
        sample_index=sample_index,
    )
    parent_steps = {s.index: s for s in parent.all_steps()}
    Step.objects.bulk_create(
        Step(
            branch=branch,
            index=fork_index + i,
            action=(
                action
                if (i == 0 and action is not None)
                else getattr(parent_steps.get(fork_index + i), "action", f"act{fork_index + i}")
            ),
            observation=obs,
            provenance="replayed",
            observation_source="simulated",
            parse_status=parse_status,
        )
        for i, obs in enumerate(observations)
    )
    return branch


def make_job(branch, fork_index, *, n=2, status="running", backend="retrieval", user=None):
    return SimulationJob.objects.create(
        requester=user,
        trajectory=branch.trajectory,
        branch=branch,
        fork_index=fork_index,
        action="ls -la",
        n=n,
        status=status,
        backend=backend,
        params={"temperature": 0.7, "top_p": 0.95, "max_tokens": 64, "seed": None},
    )
