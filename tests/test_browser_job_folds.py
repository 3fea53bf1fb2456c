"""The job page refreshes every 500 ms while a job runs; what the reader opened stays open."""

import pytest
from django.utils import timezone

from studio.models import Step
from studio.models.trajectories import BranchStatus
from tests.support.branching import make_child, make_job, make_trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_open_thinking_stays_open_across_progress_refreshes(page, live_server, login, project):
    _traj, root = make_trajectory(project)
    job = make_job(root, 1, n=1, status="running")
    child = make_child(
        root, 1, ["README.md  setup.py"], job=job, status=BranchStatus.RUNNING, name="sim #1"
    )
    Step.objects.filter(branch=child).update(thinking="The listing should show README.md.")
    type(job).objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now(),
        phase="decoding",
        live={"0": {"phase": "decoding", "tokens_out": 3, "tokens_per_s": 1.0, "text": "<think>"}},
    )

    login(page, "researcher")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    thinking = page.locator(f"#job-branch-{child.pk} details.thinking")
    thinking.locator("summary").click()
    assert thinking.evaluate("d => d.open")
    for _ in range(2):  # two refreshes later (every 500 ms) it is still open
        with page.expect_response(lambda r: f"/jobs/{job.pk}/" in r.url):
            pass
    assert page.locator(f"#job-branch-{child.pk} details.thinking").evaluate("d => d.open")
