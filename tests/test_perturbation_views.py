"""The perturbation library and its use in the branch editor, through the Django client:
who may change it, form errors that name the parameter, presets, the editor's rules and
sweeps as the job stores them, badges, and the library filter."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inference import perturbations as P
from studio.models import Branch, Perturbation, SimulationJob, Step
from studio.services.perturbations import add_presets
from studio.services.simulation import build_request, request_input_of
from tests.support.branching import make_trajectory
from tests.test_branching_views import editor_post

pytestmark = pytest.mark.django_db


def entry(project, name="Cut", kind="truncated", params=None, mode="deterministic"):
    return Perturbation.objects.create(
        project=project, name=name, kind=kind, params=params or {"chars": 12}, mode=mode
    )


def test_researchers_add_perturbations_and_errors_name_the_parameter(researcher_client, project):
    url = reverse("perturbation_create", args=[project.pk])
    bad = researcher_client.post(
        url, {"name": "Cut", "kind": "truncated", "mode": "deterministic", "p_truncated_chars": "x"}
    )
    assert bad.status_code == 400
    assert "Truncated.chars must be a whole number, got &#x27;x&#x27;." in bad.content.decode()
    assert not Perturbation.objects.exists()
    custom = researcher_client.post(
        url, {"name": "Odd", "kind": "custom", "mode": "deterministic", "p_custom_instruction": "x"}
    )
    assert custom.status_code == 400 and "no deterministic form" in custom.content.decode()
    ok = researcher_client.post(
        url, {"name": "Cut", "kind": "truncated", "mode": "deterministic", "p_truncated_chars": "40",
              "p_timeout_seconds": "999"},  # another kind's field: ignored
    )  # fmt: skip
    assert ok.status_code == 302
    row = Perturbation.objects.get()
    assert (row.kind, row.params, row.mode) == ("truncated", {"chars": 40}, "deterministic")
    page = researcher_client.get(reverse("perturbation_list", args=[project.pk])).content.decode()
    assert "truncated:chars=40" in page and "cut off after about 40 characters" in page
    dup = researcher_client.post(
        url, {"name": "Cut", "kind": "empty_result", "mode": "deterministic"}
    )
    assert "already has a perturbation named &#x27;Cut&#x27;" in dup.content.decode()


def test_annotators_read_the_library_but_cannot_change_it(annotator_client, project):
    row = entry(project)
    assert annotator_client.get(reverse("perturbation_list", args=[project.pk])).status_code == 200
    assert (
        annotator_client.get(reverse("perturbation_create", args=[project.pk])).status_code == 403
    )
    assert annotator_client.post(reverse("perturbation_delete", args=[row.pk])).status_code == 403
    assert (
        annotator_client.post(
            reverse("perturbation_presets", args=[project.pk]), {"domain": "web"}
        ).status_code
        == 403
    )
    assert Perturbation.objects.count() == 1


def test_outsiders_get_404(outsider_client, project):
    row = entry(project)
    assert outsider_client.get(reverse("perturbation_list", args=[project.pk])).status_code == 404
    assert outsider_client.get(reverse("perturbation_edit", args=[row.pk])).status_code == 404


def test_presets_are_added_once(researcher_client, project):
    url = reverse("perturbation_presets", args=[project.pk])
    first = researcher_client.post(url, {"domain": "web"}, follow=True).content.decode()
    names = set(Perturbation.objects.values_list("name", flat=True))
    assert names == {p.name for p in P.PRESETS["web"]}
    assert f"Added {len(names)} Web presets" in first
    again = researcher_client.post(url, {"domain": "web"}, follow=True).content.decode()
    assert "Added 0 Web presets" in again and "already in the library" in again
    assert Perturbation.objects.count() == len(names)


def test_editor_perturbs_the_fork_step_and_the_job_keeps_a_copy(researcher_client, project):
    t, root = make_trajectory(project)
    cut = entry(project)
    url = reverse("branch_fork", args=[root.pk, 2])
    response = researcher_client.post(url, editor_post(project, perturbation=str(cut.pk)))
    assert response.status_code == 302, response.content.decode()[:2000]
    job = SimulationJob.objects.get()
    assert job.perturbations == [
        {"kind": "truncated", "params": {"chars": 12}, "mode": "deterministic", "name": "Cut",
         "first_step": 2, "last_step": 2, "tool": "", "probability": 1.0}
    ]  # fmt: skip
    names = list(Branch.objects.filter(job=job).values_list("name", flat=True))
    assert all(name.endswith("· Cut") for name in names)
    cut.params = {"chars": 99}
    cut.save()  # editing the entry later changes nothing the job ran
    rebuilt = build_request(root, request_input_of(job))
    assert rebuilt.perturbations[0].perturbation.params == {"chars": 12}
    page = researcher_client.get(reverse("simulation_job", args=[job.pk])).content.decode()
    assert "Cut (deterministic) · step 2" in page


def test_editor_rules_with_a_probability_keep_their_seed(researcher_client, project):
    t, root = make_trajectory(project)
    cut = entry(project)
    post = editor_post(
        project, mode="replay", seed="", rule_perturbation=str(cut.pk), rule_probability="0.5"
    )
    response = researcher_client.post(reverse("branch_fork", args=[root.pk, 1]), post)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = SimulationJob.objects.get()
    (rule,) = job.perturbations
    assert (rule["first_step"], rule["last_step"], rule["probability"]) == (2, None, 0.5)
    seed = job.params["perturbation_seed"]
    assert isinstance(seed, int)
    assert build_request(root, request_input_of(job)).perturbation_seed == seed
    # no name claims a perturbation that only happens by chance
    assert not any("Cut" in b.name for b in Branch.objects.filter(job=job))


def test_editor_errors_land_on_the_perturbation_fields(researcher_client, project):
    t, root = make_trajectory(project)
    told = entry(project, "Told", "custom", {"instruction": "the disk is full"}, "prompted")
    cut = entry(project)
    url = reverse("branch_fork", args=[root.pk, 2])
    page = researcher_client.post(url, editor_post(project, perturbation=str(told.pk)))
    assert page.status_code == 400
    assert "cannot follow a prompted perturbation" in page.content.decode()
    both = researcher_client.post(
        url, editor_post(project, perturbation=str(cut.pk), sweep=[str(cut.pk), str(told.pk)])
    )
    assert "with one perturbation or sweep several, not both" in both.content.decode()
    one = researcher_client.post(url, editor_post(project, sweep=[str(cut.pk)]))
    assert "a sweep compares 2 to 8 perturbations, got 1" in one.content.decode()
    never = researcher_client.post(url, editor_post(project, rule_perturbation=str(cut.pk)))
    assert "it starts at step 3, but next observation simulates only step 2" in (
        never.content.decode()
    )  # a later-steps rule in next mode would be shown perturbing nothing
    stray = researcher_client.post(url, editor_post(project, rule_probability="0.5"))
    assert "Choose the perturbation these rule fields are for." in stray.content.decode()
    assert not SimulationJob.objects.exists()


def test_a_sweep_runs_n_futures_per_perturbation(researcher_client, project):
    t, root = make_trajectory(project)
    add_presets(project, "terminal")
    full, missing = (Perturbation.objects.get(name=n) for n in ("Disk full", "Command not found"))
    post = editor_post(project, n="2", sweep=[str(full.pk), str(missing.pk)])
    response = researcher_client.post(reverse("branch_fork", args=[root.pk, 2]), post)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = SimulationJob.objects.get()
    assert job.n == 4
    names = list(
        Branch.objects.filter(job=job).order_by("sample_index").values_list("name", flat=True)
    )
    assert [n.rsplit("· ", 1)[1] for n in names] == [
        "Command not found", "Command not found", "Disk full", "Disk full"
    ]  # fmt: skip
    rebuilt = build_request(root, request_input_of(job))
    assert rebuilt.n == 4 and rebuilt.samples_per_perturbation == 2
    too_many = editor_post(project, n="40", sweep=[str(full.pk), str(missing.pk)])
    page = researcher_client.post(reverse("branch_fork", args=[root.pk, 2]), too_many)
    assert "2 x 40 = 80 futures, more than 64" in page.content.decode()


def test_badges_and_the_library_filter(researcher_client, project):
    t, root = make_trajectory(project, key="perturbed")
    plain, _ = make_trajectory(project, title="Plain", key="plain")
    child = Branch.objects.create(
        trajectory=t, parent=root, fork_index=2, name="x", origin="edited"
    )
    Step.objects.create(
        branch=child, index=2, action="cat README.md", observation="# Demo" + P.TRUNCATION_MARKER,
        provenance="replayed", observation_source="perturbed",
        meta={"perturbation": {"kind": "truncated", "label": "Cut", "mode": "deterministic",
                               "changed": True}},
    )  # fmt: skip
    page = researcher_client.get(
        reverse("trajectory_steps", args=[t.pk]) + f"?branch={child.pk}&start=2"
    ).content.decode()
    assert "perturbed: Cut" in page
    lib = reverse("library", args=[project.pk])
    any_hit = researcher_client.get(lib, {"perturbation": "*"}).content.decode()
    assert t.title in any_hit and "Plain" not in any_hit
    entry(project)  # the library's names are choices too
    by_name = researcher_client.get(lib, {"perturbation": "Cut"}).content.decode()
    assert t.title in by_name and "Plain" not in by_name


def test_an_exported_branch_carries_its_perturbations_and_imports_back(
    researcher_client, project, tmp_path
):
    import json

    from studio.models import Project
    from studio.services.imports import do_import_file

    t, root = make_trajectory(project, key="export")
    child = Branch.objects.create(
        trajectory=t, parent=root, fork_index=2, name="cut", origin="simulated"
    )
    Step.objects.create(
        branch=child, index=2, action="python -m pytest -q", observation="3 pas" + P.TRUNCATION_MARKER,
        provenance="replayed", observation_source="perturbed",
        meta={"perturbation": {"kind": "truncated", "label": "Cut", "mode": "deterministic",
                               "changed": True}},
    )  # fmt: skip
    response = researcher_client.get(reverse("branch_export", args=[child.pk]))
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    doc = json.loads(b"".join(response.streaming_content))
    (item,) = doc["trajectories"]
    assert doc["format"] == "agentworld-studio/v1"
    assert [s["provenance"] for s in item["steps"]] == ["recorded", "recorded", "replayed"]
    assert item["steps"][2]["meta"]["perturbation"]["label"] == "Cut"
    assert item["steps"][2]["observation_source"] == "perturbed"
    assert item["metadata"]["studio_branch"]["name"] == "cut"
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    other = Project.objects.create(name="Elsewhere")
    result = do_import_file(project=other, path=path)
    assert result.trajectories_created == 1
    imported = other.trajectories.get()
    steps = list(imported.root_branch.steps.order_by("index"))
    assert steps[2].meta["perturbation"]["label"] == "Cut"
    assert outsider_status(project, child) == 404


def outsider_status(project, branch) -> int:
    from django.test import Client

    client = Client()
    client.force_login(project.outsider)
    return client.get(reverse("branch_export", args=[branch.pk])).status_code


def test_an_empty_library_offers_the_domains_presets_where_perturbations_are_chosen(
    researcher_client, project
):
    """The playground and the branch editor of a project without perturbations offer the
    trajectory's domain's presets in one click, and come back to the page with them listed;
    a `next` off this site is not followed."""
    trajectory, root = make_trajectory(project, domain="terminal", key="presets-here")
    playground = reverse("playground", args=[root.pk])
    editor = reverse("branch_fork", args=[root.pk, 1])
    for page in (playground, editor):
        html = researcher_client.get(page).content.decode()
        assert 'id="presets-add"' in html and "Add the presets for Terminal" in html
        assert 'name="domain" value="terminal"' in html
    url = reverse("perturbation_presets", args=[project.pk])
    back = researcher_client.post(url, {"domain": "terminal", "next": playground})
    assert back.status_code == 302 and back["Location"] == playground
    assert Perturbation.objects.count() == len(P.PRESETS["terminal"])
    html = researcher_client.get(playground).content.decode()
    assert 'id="presets-add"' not in html
    for preset in P.PRESETS["terminal"]:
        assert f">{preset.name}</option>" in html  # now in "Perturb this step"
    away = researcher_client.post(url, {"domain": "web", "next": "https://elsewhere.example/"})
    assert away["Location"] == reverse("perturbation_list", args=[project.pk])
