"""Step annotations: what an annotator may give (and the message naming what is wrong), one
annotation per annotator and step with its history of versions, several annotators on one
step, a correction shown as a diff against the model's observation, and access."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import AnnotationVersion, StepAnnotation
from studio.services.annotations import AnnotationData, AnnotationError, save_annotation
from tests.support.jobs import make_trajectory

GOOD = {
    "rating_format": "5", "rating_factuality": "4", "rating_consistency": "4",
    "rating_realism": "", "rating_quality": "3", "verdict": "needs_fix",
    "tags": "off-by-one, json , off-by-one", "comment": "  count is wrong  ",
}  # fmt: skip


def test_what_an_annotator_gives_is_checked_naming_the_field():
    data = AnnotationData.build(GOOD, observation="3 files")
    assert data.ratings == {"format": 5, "factuality": 4, "consistency": 4, "quality": 3}
    assert (data.verdict, data.tags, data.comment) == (
        "needs_fix",
        ("off-by-one", "json"),
        "count is wrong",
    )
    # the editor starts from the observation: sending it back unchanged is no correction
    assert (
        AnnotationData.build({"corrected_observation": "3 files"}, "3 files").corrected_observation
        == ""
    )
    assert (
        AnnotationData.build({"corrected_observation": "4 files"}, "3 files").corrected_observation
        == "4 files"
    )
    with pytest.raises(AnnotationError) as err:
        AnnotationData.build({"rating_realism": "7", "verdict": "maybe", "rating_format": "x"})
    assert err.value.errors == {
        "rating_format": "the format rating must be a whole number 1-5",
        "rating_realism": "the realism rating must be 1-5, got 7",
        "verdict": "verdict must be one of accept, reject, needs_fix",
    }
    with pytest.raises(AnnotationError, match="at most 20 tags"):
        AnnotationData.build({"tags": ",".join(f"t{i}" for i in range(21))})


@pytest.mark.django_db
def test_each_annotator_has_one_annotation_per_step_with_its_history(project):
    step = make_trajectory(project).root_branch.steps.get(index=1)
    annotator, researcher = project.users["annotator"], project.users["researcher"]
    first, changed = save_annotation(step, annotator, AnnotationData.build(GOOD, step.observation))
    assert changed and first.versions.count() == 1
    again, changed = save_annotation(step, annotator, AnnotationData.build(GOOD, step.observation))
    assert again.pk == first.pk and not changed and first.versions.count() == 1  # nothing new
    edited = {**GOOD, "verdict": "accept", "corrected_observation": "fixed"}
    save_annotation(step, annotator, AnnotationData.build(edited, step.observation))
    versions = list(AnnotationVersion.objects.filter(annotation=first).order_by("number"))
    assert [v.number for v in versions] == [1, 2]
    assert versions[0].state["verdict"] == "needs_fix" and versions[1].state["verdict"] == "accept"
    save_annotation(step, researcher, AnnotationData.build({"rating_format": "2"}, ""))
    assert StepAnnotation.objects.filter(step=step).count() == 2  # several annotators, one each
    with pytest.raises(AnnotationError, match="nothing to save"):
        save_annotation(step.branch.steps.get(index=0), annotator, AnnotationData())


@pytest.mark.django_db
def test_the_page_saves_shows_others_and_the_correction_diff_and_stays_in_the_project(
    client, project, make_user
):
    trajectory = make_trajectory(project)
    step = trajectory.root_branch.steps.get(index=1)
    url = reverse("step_annotate", args=[step.pk])
    client.force_login(project.users["researcher"])
    client.post(url, {"rating_format": "2", "comment": "too short"})
    client.force_login(project.users["annotator"])  # annotators annotate
    page = client.get(url).content.decode()
    assert "researcher" in page and "too short" in page  # the other annotator's work
    bad = client.post(url, {**GOOD, "rating_quality": "9"})
    assert (
        bad.status_code == 400 and "the quality rating must be 1-5, got 9" in bad.content.decode()
    )
    assert not StepAnnotation.objects.filter(author=project.users["annotator"]).exists()
    saved = client.post(
        url, {**GOOD, "corrected_observation": step.observation + "\nmore", "then": "next"}
    )
    following = trajectory.root_branch.steps.get(index=2)
    next_url = reverse("step_annotate", args=[following.pk])
    assert saved.status_code == 302 and saved["Location"].startswith(next_url + "?branch=")
    page = client.get(url).content.decode()
    assert 'id="correction-diff"' in page and "<ins>" in page and "version 1" in page
    listing = client.get(reverse("trajectory", args=[trajectory.pk])).content.decode()
    assert url in listing  # every step offers Annotate
    client.force_login(make_user("stranger"))
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_a_save_from_a_stale_page_is_refused_and_crlf_is_no_correction(client, project):
    step = make_trajectory(project).root_branch.steps.get(index=1)
    url = reverse("step_annotate", args=[step.pk])
    client.force_login(project.users["annotator"])
    # the browser sends the untouched editor back with CRLF line ends: no correction
    crlf = step.observation.replace("\n", "\r\n")
    client.post(url, {"rating_format": "3", "corrected_observation": crlf, "seen_version": "0"})
    note = StepAnnotation.objects.get(step=step)
    assert note.corrected_observation == "" and note.versions.count() == 1
    page = client.get(url).content.decode()
    assert 'name="seen_version" value="1"' in page and ">corrected<" not in page
    client.post(url, {"rating_format": "4", "seen_version": "1"})  # another tab saved version 2
    stale = client.post(url, {"rating_format": "5", "seen_version": "1"})
    assert stale.status_code == 409 and "another tab or window" in stale.content.decode()
    note.refresh_from_db()
    assert note.ratings == {"format": 4} and note.versions.count() == 2
    bad = client.post(url, {"rating_quality": "9", "corrected_observation": crlf})
    assert bad.status_code == 400 and ">corrected<" not in bad.content.decode()
    last = step.branch.steps.order_by("-index").first()
    done = client.post(
        reverse("step_annotate", args=[last.pk]),
        {"rating_format": "2", "then": "next"},
        follow=True,
    )
    assert "This is the last step of the branch." in done.content.decode()


@pytest.mark.django_db
def test_next_follows_the_branch_the_annotator_came_from(client, project):
    """On a child branch, an inherited step's next one is the child's own, not the parent's."""
    from tests.support.branching import make_child
    from tests.support.branching import make_trajectory as make_branching

    trajectory, root = make_branching(project)
    child = make_child(root, 2, ["the child's own observation"])
    inherited = root.steps.get(index=1)  # shown on the child too
    own = child.steps.get(index=2)
    client.force_login(project.users["annotator"])
    url = reverse("step_annotate", args=[inherited.pk]) + f"?branch={child.pk}"
    saved = client.post(url, {"rating_format": "4", "then": "next", "branch": str(child.pk)})
    assert saved["Location"] == reverse("step_annotate", args=[own.pk]) + f"?branch={child.pk}"
    on_root = client.post(
        reverse("step_annotate", args=[inherited.pk]), {"rating_format": "5", "then": "next"}
    )
    assert on_root["Location"].startswith(
        reverse("step_annotate", args=[root.steps.get(index=2).pk])
    )
