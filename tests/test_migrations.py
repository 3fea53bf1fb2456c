"""Existing rows are migrated: the old provenance "simulated" (the recorded action with a
simulated observation) becomes "replayed", and every simulated step records where its
observation came from."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("studio", "0002_job_messages_and_live_progress")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_provenance_is_split_into_action_and_observation_sources():
    old = migrate(BEFORE)
    Project = old.get_model("studio", "Project")
    Trajectory = old.get_model("studio", "Trajectory")
    Branch = old.get_model("studio", "Branch")
    Step = old.get_model("studio", "Step")
    project = Project.objects.create(name="before")
    t = Trajectory.objects.create(
        project=project, domain="terminal", title="t", source_format="x", source_key="k"
    )
    root = Branch.objects.create(trajectory=t, name="recorded", lineage=[])
    child = Branch.objects.create(trajectory=t, parent=root, fork_index=1, name="c", lineage=[])
    Step.objects.create(branch=root, index=0, action="ls", provenance="recorded")
    for i, (prov, meta) in enumerate(
        [("simulated", {}), ("edited", {}), ("agent", {}), ("agent", {"final_answer": True})]
    ):
        Step.objects.create(branch=child, index=i + 1, action="x", provenance=prov, meta=meta)
    latest = migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    Step = latest.get_model("studio", "Step")
    rows = list(Step.objects.order_by("index").values_list("provenance", "observation_source"))
    assert rows == [
        ("recorded", "recorded"),
        ("replayed", "simulated"),
        ("edited", "simulated"),
        ("agent", "simulated"),
        ("agent", "none"),
    ]
    # the project that existed got the environment's models
    Endpoint = latest.get_model("studio", "ModelEndpoint")
    assert Endpoint.objects.filter(project__name="before", kind="retrieval").exists()
