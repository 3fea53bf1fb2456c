"""A rollout campaign end to end on a real Celery worker: enqueued as the campaign page
enqueues it, played by the worker against a scripted agent and a world model on fake
OpenAI-compatible servers (127.0.0.1), in the demo's rewarded Northwind calendar world;
then cancelled while an episode is in flight (the ended slots kept) and resumed (the rest
played in new episodes)."""

from __future__ import annotations

import pytest
from django.db import transaction

from studio.models import Campaign, JobStatus, SlotStatus
from studio.services.campaigns import (
    campaign_trajectories,
    cancel_campaign,
    results,
    resume_campaign,
    world_tasks,
)
from studio.tasks import enqueue_campaign
from tests.support.campaigns import (
    WORLD_ANSWER,
    ScriptedAgent,
    calendar_world,
    endpoints,
    make_campaign,
)
from tests.support.fake_openai import fake_openai_server
from tests.support.worker import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _ended(campaign):
    return (
        Campaign.objects.filter(pk=campaign.pk)
        .exclude(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
        .first()
    )


def test_a_campaign_runs_on_a_worker_and_cancel_and_resume_keep_what_ended(project, default_worker):
    world = calendar_world(project)
    script = ScriptedAgent()
    with (
        fake_openai_server(script) as agent_srv,
        fake_openai_server(lambda b, i: WORLD_ANSWER) as world_srv,
    ):
        agent, world_model = endpoints(project, agent_srv, world_srv)
        with transaction.atomic():
            campaign = make_campaign(
                project, project.users["researcher"], world, agent, world_model
            )
            enqueue_campaign(campaign)
        done = wait_for(lambda: _ended(campaign), timeout=120)
        assert done.status == JobStatus.SUCCEEDED, done.error
        assert done.worker and done.progress == 1.0 and done.episodes_done == 4
        slots = list(done.episodes.all())
        assert all(s.status == SlotStatus.DONE and s.end_cause == "submit" for s in slots)
        assert {s.task_id: s.success for s in slots} == {"count-thursday": True, "move-sync": False}
        assert {s.task_id: s.reward for s in slots}["count-thursday"] == 1.0
        trajectories = list(campaign_trajectories(done))
        assert len(trajectories) == 4
        for t in trajectories:
            assert t.metadata["campaign"]["id"] == campaign.pk
            assert t.metadata["episode"]["client"] == "campaign"
            assert t.tags.filter(name=f"campaign:{campaign.pk}").exists()
        assert results(done).overall["success_rate"] == 0.5

        # a second campaign, cancelled while its second episode waits on the agent
        script.hold_at = len(agent_srv.requests) + 2
        with transaction.atomic():
            second = make_campaign(
                project,
                project.users["researcher"],
                world,
                agent,
                world_model,
                tasks=tuple(world_tasks(world, ["count-thursday"])),
                episodes_per_task=3,
                concurrency=1,
            )
            enqueue_campaign(second)
        assert script.arrived.wait(timeout=60)
        cancel_campaign(second)
        wait_for(lambda: Campaign.objects.filter(pk=second.pk, phase="cancelling").exists())
        script.release.set()
        cancelled = wait_for(lambda: _ended(second), timeout=60)
        assert cancelled.status == JobStatus.CANCELLED
        statuses = list(cancelled.episodes.values_list("status", flat=True))
        assert statuses == [SlotStatus.DONE, SlotStatus.CANCELLED, SlotStatus.PENDING]
        kept = cancelled.episodes.get(status=SlotStatus.DONE)

        script.hold_at = None
        with transaction.atomic():
            assert resume_campaign(cancelled)
            enqueue_campaign(cancelled)
        resumed = wait_for(lambda: _ended(second), timeout=120)
        assert resumed.status == JobStatus.SUCCEEDED, resumed.error
        slots = list(resumed.episodes.all())
        assert all(s.status == SlotStatus.DONE and s.success for s in slots)
        assert slots[0].trajectory_id == kept.trajectory_id  # not played again
        assert campaign_trajectories(resumed).count() == 4  # the cancelled one stays
