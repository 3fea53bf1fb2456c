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


def test_annotations_made_in_queues_go_to_their_queues():
    """Before 0016 an annotation had no queue; one completed in two queues is now in each."""
    old = migrate([("studio", "0016_per_queue_annotations_skips_guidelines_sample_sets")])
    User = old.get_model("auth", "User")
    Project = old.get_model("studio", "Project")
    Trajectory = old.get_model("studio", "Trajectory")
    Branch = old.get_model("studio", "Branch")
    Step = old.get_model("studio", "Step")
    Queue = old.get_model("studio", "AnnotationQueue")
    Item = old.get_model("studio", "QueueItem")
    Claim = old.get_model("studio", "QueueClaim")
    Annotation = old.get_model("studio", "StepAnnotation")
    Version = old.get_model("studio", "AnnotationVersion")
    from django.utils import timezone

    now = timezone.now()
    ann = User.objects.create(username="ann")
    bob = User.objects.create(username="bob")
    project = Project.objects.create(name="queues before")
    t = Trajectory.objects.create(
        project=project, domain="terminal", title="t", source_format="x", source_key="k"
    )
    root = Branch.objects.create(trajectory=t, name="recorded", lineage=[])
    one, two, three = (
        Step.objects.create(branch=root, index=i, action="ls", observation="o") for i in range(3)
    )
    first = Queue.objects.create(project=project, name="first")
    second = Queue.objects.create(project=project, name="second")
    for queue in (first, second):
        item = Item.objects.create(queue=queue, step=one, position=0)
        Claim.objects.create(item=item, user=ann, expires_at=now, done_at=now)
    item = Item.objects.create(queue=first, step=two, position=1)
    Claim.objects.create(item=item, user=bob, expires_at=now, done_at=None)  # not completed
    both = Annotation.objects.create(step=one, author=ann, verdict="accept", ratings={"format": 4})
    Version.objects.create(annotation=both, number=1, state={"verdict": "accept"})
    Annotation.objects.create(step=two, author=bob, verdict="reject")
    Annotation.objects.create(step=three, author=ann, verdict="reject")

    latest = migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    Annotation = latest.get_model("studio", "StepAnnotation")
    rows = sorted(
        Annotation.objects.values_list("step__index", "author__username", "queue__name", "verdict"),
        key=lambda r: (r[0], r[1], r[2] or ""),
    )
    assert rows == [
        (0, "ann", "first", "accept"),
        (0, "ann", "second", "accept"),
        (1, "bob", None, "reject"),
        (2, "ann", None, "reject"),
    ]
    copy = Annotation.objects.get(queue__name="second")
    assert copy.ratings == {"format": 4}
    assert list(copy.versions.values_list("number", "state")) == [(1, {"verdict": "accept"})]
