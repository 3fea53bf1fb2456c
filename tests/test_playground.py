"""The playground through the Django client: each action is a one-future job forked at the
playground's step, undo plays from one step earlier, hand-over opens the rollout editor."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import Branch, Perturbation, SimulationJob
from tests.support.branching import make_child, make_trajectory

pytestmark = pytest.mark.django_db


def play_post(project, action: str, **extra) -> dict:
    world = project.endpoints.get(kind="retrieval")
    return {"action": action, "action_format": "auto", "world_endpoint": str(world.pk), **extra}


def test_an_action_becomes_a_one_future_job_at_the_end_of_the_branch(researcher_client, project):
    t, root = make_trajectory(project)
    url = reverse("playground", args=[root.pk])
    page = researcher_client.get(url).content.decode()
    assert "Action at step 5" in page and "Play" in page
    response = researcher_client.post(url + "?at=5", play_post(project, "make test"))
    assert response.status_code == 302
    job = SimulationJob.objects.get()
    assert (job.fork_index, job.n, job.mode, job.action) == (5, 1, "next", "make test")
    assert response["Location"].endswith(f"?at=5&job={job.pk}")
    child = Branch.objects.get(job=job)
    assert child.parent_id == root.pk and child.fork_index == 5
    pending = researcher_client.get(response["Location"]).content.decode()
    assert 'id="play-pending"' in pending and "make test" in pending


def test_undo_plays_one_step_earlier_without_losing_anything(researcher_client, project):
    t, root = make_trajectory(project)
    url = reverse("playground", args=[root.pk])
    page = researcher_client.get(url + "?at=4").content.decode()
    assert "the next action replaces step 4" in page
    assert f'href="{url}?at=3"' in page  # undo again
    researcher_client.post(url + "?at=4", play_post(project, "echo again"))
    job = SimulationJob.objects.get()
    assert job.fork_index == 4 and job.action == "echo again"
    assert root.steps.count() == 5  # the branch keeps its steps
    assert researcher_client.get(url + "?at=9").status_code == 404


def test_a_perturbation_for_the_next_step_and_errors_on_the_form(researcher_client, project):
    t, root = make_trajectory(project)
    cut = Perturbation.objects.create(
        project=project, name="Told", kind="custom", params={"instruction": "x"}, mode="prompted"
    )
    url = reverse("playground", args=[root.pk])
    page = researcher_client.post(url, play_post(project, "ls", perturbation=str(cut.pk)))
    assert (
        page.status_code == 400 and "cannot follow a prompted perturbation" in page.content.decode()
    )
    empty = researcher_client.post(url, play_post(project, "   "))
    assert empty.status_code == 400 and "the action is empty" in empty.content.decode()
    assert not SimulationJob.objects.exists()


def test_the_pending_step_moves_to_the_new_branch_when_done(researcher_client, project):
    from studio.models import JobStatus

    t, root = make_trajectory(project)
    researcher_client.post(reverse("playground", args=[root.pk]), play_post(project, "ls -a"))
    job = SimulationJob.objects.get()
    child = Branch.objects.get(job=job)
    status = researcher_client.get(
        reverse("playground_job", args=[job.pk]), headers={"HX-Request": "true"}
    )
    assert status.status_code == 200 and "Queued" in status.content.decode()
    SimulationJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    done = researcher_client.get(
        reverse("playground_job", args=[job.pk]), headers={"HX-Request": "true"}
    )
    assert done["HX-Redirect"] == reverse("playground", args=[child.pk])


def test_hand_over_opens_the_editor_in_rollout_mode(researcher_client, project):
    t, root = make_trajectory(project)
    make_child(root, 2, ["x"])
    page = researcher_client.get(reverse("playground", args=[root.pk])).content.decode()
    assert reverse("branch_fork", args=[root.pk, 5]) + "?mode=rollout" in page
    editor = researcher_client.get(reverse("branch_fork", args=[root.pk, 5]) + "?mode=rollout")
    assert '<option value="rollout" selected>' in editor.content.decode()


def test_annotators_cannot_play(annotator_client, project):
    t, root = make_trajectory(project)
    assert annotator_client.get(reverse("playground", args=[root.pk])).status_code == 403
