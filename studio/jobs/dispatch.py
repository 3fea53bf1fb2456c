"""Sending a job's message again from inside a job body (an evaluation, a judge job or a
behaviour search whose task time is nearly up hands the rest to a new message of itself), by
the task's name.

The job bodies never import `studio.tasks`: the tasks import the bodies, and the bodies
importing the tasks back made the cycle evaluations <-> judging <-> tasks. The task names
live here, and `studio.tasks` registers its tasks under them."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.utils import timezone

from studio.models import JobStatus

log = logging.getLogger(__name__)

EVALUATION_TASK = "studio.run_evaluation"
JUDGE_TASK = "studio.run_judge_job"
CAMPAIGN_TASK = "studio.run_campaign"
EPISODE_STEP_TASK = "studio.run_episode_step"
BEHAVIOUR_TASK = "studio.run_behaviour_search"


def send_again(model: Any, pk: int, previous: str, task_name: str) -> bool:
    """A queued job's next message, with a new message id recorded on the row first, only
    if the row still names `previous` (another sender may have re-sent it meanwhile).
    False when it was not sent (the sweeper sends it once the broker is back)."""
    from celery import current_app  # the studio's app, never imported from here

    message_id = uuid.uuid4().hex
    rows = model.objects.filter(pk=pk, status=JobStatus.QUEUED, message_id=previous)
    if not rows.update(message_id=message_id, dispatched_at=timezone.now()):
        return False
    queue = model.objects.values_list("queue", flat=True).get(pk=pk)
    try:
        current_app.send_task(task_name, args=[pk], queue=queue, task_id=message_id)
    except Exception:  # the broker is down: the sweeper sends it again once it is back
        log.exception("could not send the message of %s %s", model.__name__, pk)
        return False
    return True
