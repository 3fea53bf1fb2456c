"""Fine-tunes without a worker: the form's messages, the split fixed at creation (held-out
never overlaps train; the same for the same seed), who may start and see runs, pages that
never write, the Models page's lineage and the adapter's download."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

from studio.forms.finetunes import FineTuneForm
from studio.models import EndpointRole, FineTuneRun, JobStatus, ModelEndpoint, Step
from studio.services import finetunes as service
from studio.services.datasets import SelectionData, create_version
from tests.support.branching import make_trajectory

pytestmark = pytest.mark.django_db

ROWS = [("ls", "README.md  src"), ("cat README.md", "# Demo"), ("pwd", "/home/user")]


def make_version(project, *, trained: int = 2, extra: int = 6, name: str = "steps"):
    """`trained` trajectories whose steps make a dataset version, and `extra` recorded
    trajectories that no item comes from (the held-out pool)."""
    trajectories = [
        make_trajectory(project, steps=ROWS, title=f"t{i}", key=f"k{i}")[0]
        for i in range(trained + extra)
    ]
    steps = Step.objects.filter(branch__trajectory__in=trajectories[:trained]).order_by("pk")
    version = create_version(
        project, None, SelectionData(name=name, steps=tuple(s.pk for s in steps))
    )
    return version, trajectories


def form_data(version, **changes):
    data = {
        "name": "first",
        "dataset_version": version.pk,
        "base": "tiny",
        "base_path": "",
        "method": "lora",
        "lora_rank": 8,
        "lora_alpha": 16,
        "lora_targets": "",
        "epochs": 1,
        "learning_rate": 2e-4,
        "max_length": 2048,
        "max_steps": "",
        "seed": 3,
        "heldout": 20,
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"name": "<b>x</b>"}, "name", "<"),
        ({"lora_rank": 0}, "lora_rank", "greater than or equal to 1"),
        ({"lora_rank": 257}, "lora_rank", "less than or equal to 256"),
        ({"epochs": "nan"}, "epochs", "finite"),
        ({"learning_rate": 2}, "learning_rate", "less than or equal to 1"),
        ({"max_length": 8}, "max_length", "greater than or equal to 16"),
        ({"lora_targets": "q_proj, x.y"}, "lora_targets", "'x.y' is not a module name"),
        ({"base": "path", "base_path": ""}, "base_path", "Type the model folder"),
        ({"base": "path", "base_path": "models/x"}, "base_path", "An absolute path"),
        ({"heldout": -1}, "heldout", "greater than or equal to 0"),
        ({"dataset_version": 999999}, "dataset_version", "Choose a dataset version"),
    ],
)
def test_the_form_names_the_field_that_is_wrong(project, changes, field, words):
    version, _ = make_version(project, extra=0)
    form = FineTuneForm(form_data(version, **changes), project=project)
    assert not form.is_valid()
    assert words in " ".join(form.errors[field]), form.errors


def test_the_form_offers_the_projects_hf_world_models_as_bases(project):
    version, _ = make_version(project, extra=0)
    hf = ModelEndpoint.objects.create(
        project=project, name="qwen", role=EndpointRole.WORLD, kind="hf", model="/m/qwen"
    )
    form = FineTuneForm(form_data(version, base=f"endpoint-{hf.pk}"), project=project)
    assert form.is_valid(), form.errors
    data = form.data_object()
    assert data.base_endpoint == hf and service.base_path(data) == "/m/qwen"
    other = ModelEndpoint.objects.create(
        project=project.other, name="theirs", role=EndpointRole.WORLD, kind="hf", model="/m/t"
    )
    refused = FineTuneForm(form_data(version, base=f"endpoint-{other.pk}"), project=project)
    assert not refused.is_valid() and "base" in refused.errors


def test_the_split_never_trains_on_a_held_out_trajectory_and_is_fixed_by_its_seed(project):
    version, trajectories = make_version(project, trained=2, extra=8)
    train_ids = sorted(t.pk for t in trajectories[:2])

    def start(seed, heldout=3):
        form = FineTuneForm(form_data(version, seed=seed, heldout=heldout), project=project)
        assert form.is_valid(), form.errors
        return service.start_finetune(project, project.users["researcher"], form.data_object())

    a, b, c = start(5), start(5), start(6)
    assert a.train_trajectory_ids == train_ids
    assert len(a.heldout_trajectory_ids) == 3
    assert not set(a.heldout_trajectory_ids) & set(a.train_trajectory_ids)
    assert set(a.heldout_trajectory_ids) <= {t.pk for t in trajectories[2:]}
    assert a.heldout_trajectory_ids == b.heldout_trajectory_ids == sorted(a.heldout_trajectory_ids)
    # another seed draws another set (8 choose 3: the same by chance is 1 in 56)
    assert c.heldout_trajectory_ids != a.heldout_trajectory_ids
    # more asked than there are: every candidate, still none trained on
    everything = start(5, heldout=50)
    assert everything.heldout_trajectory_ids == sorted(t.pk for t in trajectories[2:])
    # lineage: the base endpoint made once (tiny, in the data dir), the trainer's settings,
    # the gpu queue, its own output folder, a code version
    assert a.base_endpoint == b.base_endpoint and a.base_endpoint.kind == "hf"
    assert a.base_model == str(service.tiny_model_path())
    assert a.settings["lora_rank"] == 8 and a.settings["seed"] == 5
    assert a.queue.endswith("gpu") and f"/finetunes/{a.pk}-" in a.output_dir
    assert a.code_version.startswith("0.1.0")


def test_annotators_see_runs_but_cannot_start_cancel_or_resume_and_outsiders_get_404(
    client, project
):
    version, _ = make_version(project, extra=1)
    run = service.start_finetune(
        project,
        project.users["researcher"],
        service.FineTuneData(name="r", dataset_version=version, base="tiny"),
    )
    client.force_login(project.users["annotator"])
    assert client.get(reverse("finetune_list", args=[project.pk])).status_code == 200
    page = client.get(reverse("finetune_page", args=[run.pk]))
    assert page.status_code == 200 and b"finetune-cancel" not in page.content
    assert client.get(reverse("finetune_new", args=[project.pk])).status_code == 403
    posted = client.post(reverse("finetune_new", args=[project.pk]), form_data(version))
    assert posted.status_code == 403 and FineTuneRun.objects.count() == 1
    assert client.post(reverse("finetune_cancel", args=[run.pk])).status_code == 403
    client.force_login(project.outsider)
    for name in ("finetune_page", "finetune_adapter"):
        assert client.get(reverse(name, args=[run.pk])).status_code == 404
    assert client.post(reverse("finetune_cancel", args=[run.pk])).status_code == 404
    assert client.get(reverse("finetune_list", args=[project.pk])).status_code == 404
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED and not run.cancel_requested


def test_a_researcher_starts_one_from_the_dataset_page_and_gets_pages_that_never_write(
    client, project, django_capture_on_commit_callbacks
):
    version, _ = make_version(project, extra=2)
    client.force_login(project.users["researcher"])
    detail = client.get(reverse("dataset_detail", args=[version.dataset_id]))
    new_url = reverse("finetune_new", args=[project.pk]) + f"?version={version.pk}"
    assert new_url.encode() in detail.content
    form_page = client.get(new_url)
    assert form_page.status_code == 200
    assert f'<option value="{version.pk}" selected>'.encode() in form_page.content
    with django_capture_on_commit_callbacks(execute=False) as sent:
        response = client.post(reverse("finetune_new", args=[project.pk]), form_data(version))
    run = FineTuneRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("finetune_page", args=[run.pk])
    assert len(sent) == 1  # its message goes out once the row commits
    before = FineTuneRun.objects.values().get(pk=run.pk)
    page = client.get(reverse("finetune_page", args=[run.pk]))
    part = client.get(reverse("finetune_page", args=[run.pk]), headers={"HX-Request": "true"})
    listing = client.get(reverse("finetune_list", args=[project.pk]))
    assert page.status_code == part.status_code == listing.status_code == 200
    assert b"No worker is consuming queue" in page.content  # no gpu worker runs here
    assert b"finetune-cancel" in page.content and b"Evaluate" in page.content
    assert b'id="finetune-train-count">2<' in page.content
    assert FineTuneRun.objects.values().get(pk=run.pk) == before
    # Cancel a queued run: it ends at once; Resume queues it again
    client.post(reverse("finetune_cancel", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == JobStatus.CANCELLED
    with django_capture_on_commit_callbacks(execute=False) as sent:
        client.post(reverse("finetune_resume", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED and len(sent) == 1


def test_a_finished_run_shows_its_curve_model_and_serving_lines_and_zips_its_adapter(
    client, project, tmp_path
):
    version, _ = make_version(project, extra=0)
    run = service.start_finetune(
        project,
        project.users["researcher"],
        service.FineTuneData(name="shop <model>", dataset_version=version, base="tiny"),
    )
    adapter = tmp_path / "adapter"
    (adapter / "sub").mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "sub" / "weights.bin").write_bytes(b"\x00" * 1000)
    endpoint = service.register_model(run, str(adapter))
    assert service.register_model(run, str(adapter)) == endpoint  # registered once
    FineTuneRun.objects.filter(pk=run.pk).update(
        status=JobStatus.SUCCEEDED,
        phase="done",
        progress=1.0,
        step=3,
        total_steps=3,
        loss_history=[[1, 2.5, 1e-3], [2, 2.0, 5e-4], [3, 1.5, 1e-4]],
        first_loss=2.5,
        final_loss=1.5,
    )
    assert endpoint.kind == "hf" and endpoint.role == "world" and endpoint.model == str(adapter)
    client.force_login(project.users["annotator"])
    part = client.get(reverse("finetune_page", args=[run.pk]), headers={"HX-Request": "true"})
    assert part.status_code == 286  # finished: htmx stops polling
    html = part.content.decode()
    assert 'data-points="3"' in html and "1.5000" in html
    assert "--enable-lora --lora-modules shop-model=" in html and "--lora-paths" in html
    assert "<model>" not in html and "shop &lt;model&gt;" in html
    models = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert f'href="{reverse("finetune_page", args=[run.pk])}"' in models
    assert f"{version.dataset.name} v{version.number}" in models
    assert reverse("finetune_adapter", args=[run.pk]) in models
    download = client.get(reverse("finetune_adapter", args=[run.pk]))
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))).namelist()
    assert sorted(n.split("/", 1)[1] for n in names) == ["adapter_config.json", "sub/weights.bin"]
