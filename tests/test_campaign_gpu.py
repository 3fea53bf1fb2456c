"""A campaign whose world model lives in the gpu worker's process (the tiny qwen3_5_moe model,
on CPU): its steps go to the gpu queue and the campaign waits on their rows, while the agent
is a scripted text agent on the fake OpenAI-compatible server."""

from __future__ import annotations

import pytest

from inference.worlds import parse_world
from studio.jobs.campaigns import run_campaign
from studio.models import JobStatus, SimulationJob, SlotStatus, Step
from studio.services.campaigns import CampaignData, create_campaign
from studio.services.endpoints import EndpointData, save_endpoint
from studio.services.worlds import save_world
from tests.support.fake_openai import fake_openai_server
from tests.support.tiny_model import tiny_model_path  # noqa: F401
from tests.support.worker import running_worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.torch,
    pytest.mark.usefixtures("isolated_queues"),
]

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}


def test_a_campaign_with_an_in_process_world_model_plays_through_the_gpu_queue(
    project,
    tiny_model_path,  # noqa: F811
    tmp_path,
):
    world_model = save_endpoint(
        project,
        EndpointData(name="tiny", role="world", kind="hf", model=tiny_model_path, max_tokens=8),
    ).endpoint
    world = save_world(project, parse_world(WORLD)).world

    def agent_reply(body, index):
        if len(body["messages"]) == 2:
            return "<action>ls</action>"
        return "<final_answer>looked</final_answer>"

    log = tmp_path / "worker.log"
    with (
        fake_openai_server(agent_reply) as agent_srv,
        running_worker(("gpu",), pool="threads", concurrency=2, log_path=log),
    ):
        agent = save_endpoint(
            project,
            EndpointData(name="agent", role="agent", kind="openai", base_url=agent_srv, model="a"),
        ).endpoint
        campaign = create_campaign(
            project,
            project.users["researcher"],
            CampaignData(
                name="on the gpu",
                world=world,
                source="typed",
                tasks=({"id": "look", "instruction": "Look around."},),
                agent=agent,
                world_model=world_model,
                episodes_per_task=2,
                max_steps=3,
                seed=5,
                concurrency=2,
            ),
        )
        run_campaign(campaign.pk, "")
    campaign.refresh_from_db()
    assert campaign.status == JobStatus.SUCCEEDED, campaign.error
    for slot in campaign.episodes.all():
        assert slot.status == SlotStatus.DONE, slot.error
        assert (slot.end_cause, slot.steps, slot.success) == ("final_answer", 1, None)
        step = Step.objects.get(branch__trajectory_id=slot.trajectory_id)
        assert step.meta["backend"] == "hf" and step.action == "ls"
    jobs = SimulationJob.objects.filter(
        trajectory__in=[s.trajectory_id for s in campaign.episodes.all()]
    )
    assert jobs.count() == 2 and all(j.queue.endswith("gpu") and j.worker for j in jobs)
    assert campaign.world_tokens_out > 0
