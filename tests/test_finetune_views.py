"""Fine-tunes without a worker: the form's messages, the split fixed at creation (held-out
never overlaps train; the same for the same seed), who may start and see runs, pages that
never write, the Models page's lineage and the adapter's download."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.urls import reverse

from studio.forms.finetunes import FineTuneForm
from studio.models import EndpointRole, FineTuneRun, JobStatus, ModelEndpoint, Step
from studio.presenters import finetune_charts as present
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
    assert b"finetune-cancel" in page.content and b'id="finetune-evaluate"' in page.content
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


# ---- after QA: names, warnings, the pages' words, failures that Resume cannot get past ------


def test_default_names_are_unique_in_the_project_down_to_the_serving_module_name(
    client, project, tmp_path
):
    version, _ = make_version(project, extra=0, name="Shop")
    client.force_login(project.users["researcher"])
    url = reverse("finetune_new", args=[project.pk]) + f"?version={version.pk}"
    names, endpoints = [], []
    for i in range(3):
        page = client.get(url)
        name = page.context["form"].initial["name"]
        run = service.start_finetune(
            project,
            project.users["researcher"],
            service.FineTuneData(name=name, dataset_version=version, base="tiny"),
        )
        (tmp_path / str(i)).mkdir()
        endpoints.append(service.register_model(run, str(tmp_path / str(i))))
        names.append(name)
    assert names == ["Shop v1 fine-tune", "Shop v1 fine-tune (2)", "Shop v1 fine-tune (3)"]
    # the model each registers is named as its run; the vLLM/SGLang module name after it
    assert [e.name for e in endpoints] == names
    modules = set()
    for run in FineTuneRun.objects.filter(project=project).select_related("endpoint"):
        vllm = present.serve_commands(run)["vllm"]
        modules.add(vllm.split("--lora-modules ", 1)[1].split("=", 1)[0])
    assert modules == {"Shop-v1-fine-tune", "Shop-v1-fine-tune-2", "Shop-v1-fine-tune-3"}


def test_nothing_held_out_is_warned_of_at_creation_and_on_the_split_row(client, project):
    version, _ = make_version(project, extra=0)  # every recorded trajectory is trained on
    client.force_login(project.users["researcher"])
    response = client.post(
        reverse("finetune_new", args=[project.pk]), form_data(version), follow=True
    )
    html = response.content.decode()
    run = FineTuneRun.objects.get()
    assert run.heldout_trajectory_ids == []
    warning = "No recorded trajectory is left out of training, so the held-out comparison"
    assert f'<li class="msg-warning">{warning}' in html
    assert 'id="finetune-nothing-held-out"' in html
    # with recorded trajectories it does not train on, neither
    for i in range(2):
        make_trajectory(project, steps=ROWS, title=f"x{i}", key=f"x{i}")
    response = client.post(
        reverse("finetune_new", args=[project.pk]),
        form_data(version, name="second"),
        follow=True,
    )
    html = response.content.decode()
    assert warning not in html and 'id="finetune-heldout-count">2<' in html


def test_the_run_page_words_follow_the_run(client, project):
    """The phase only while it says more than the status; Training in steps or epochs; the
    Base column by name; the live part's last answer tells the evaluation section."""
    version, _ = make_version(project, extra=1)
    run = service.start_finetune(
        project,
        project.users["researcher"],
        service.FineTuneData(name="r", dataset_version=version, base="tiny", max_steps=5),
    )
    other = service.start_finetune(
        project,
        project.users["researcher"],
        service.FineTuneData(name="e", dataset_version=version, base="tiny", epochs=2),
    )
    client.force_login(project.users["annotator"])
    page_url = reverse("finetune_page", args=[run.pk])
    FineTuneRun.objects.filter(pk=run.pk).update(status=JobStatus.RUNNING, phase="training")
    html = client.get(page_url).content.decode()
    assert 'id="finetune-phase">training<' in html
    assert 'id="finetune-training">at most 5 optimizer steps ·' in html
    # while it runs, the evaluation section waits for the live part's last answer
    assert 'hx-trigger="finetune-ended from:body"' in html
    assert reverse("finetune_evaluations", args=[run.pk]) in html
    part = client.get(page_url, headers={"HX-Request": "true"})
    assert part.status_code == 200 and "HX-Trigger" not in part
    FineTuneRun.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED, phase="done")
    part = client.get(page_url, headers={"HX-Request": "true"})
    assert part.status_code == 286 and "finetune-ended" in json.loads(part["HX-Trigger"])
    assert 'id="finetune-phase"' not in part.content.decode()  # "Done", not "Done phase done"
    html = client.get(page_url).content.decode()
    assert "finetune-ended from:body" not in html  # nothing left to wait for
    FineTuneRun.objects.filter(pk=other.pk).update(status=JobStatus.FAILED, phase="failed")
    html = client.get(reverse("finetune_page", args=[other.pk])).content.decode()
    assert 'id="finetune-phase"' not in html
    assert 'id="finetune-training">2 epochs ·' in html
    listing = client.get(reverse("finetune_list", args=[project.pk])).content.decode()
    assert f'<span title="{service.tiny_model_path()}">{run.base_endpoint.name}</span>' in listing


def test_the_form_says_how_a_long_row_is_fitted(client, project):
    version, _ = make_version(project, extra=0)
    client.force_login(project.users["researcher"])
    html = client.get(reverse("finetune_new", args=[project.pk])).content.decode()
    assert "the earliest turns of its history are left out" in html
    assert "longer rows are cut" not in html


# ---- the job in this process, its trainer stood in for ------------------------------------


def _run(project, version, tmp_path, **changes):
    data = service.FineTuneData(
        name="job", dataset_version=version, base=str(tmp_path / "base"), **changes
    )
    return service.start_finetune(project, project.users["researcher"], data)


def _fake_train(monkeypatch, body):
    import inference.finetune

    monkeypatch.setattr(inference.finetune, "train", body)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "problem, change",
    [
        ("deleted", "another dataset version"),
        (
            "3 row(s) would train nothing: the prompt alone fills max_length=16 tokens (row 1)",
            "a larger max length",
        ),
        ("max_length: no row fits in 16 tokens", "a larger max length"),
        ("cannot load the base model '/x': no config", "another base model"),
    ],
)
def test_a_failure_of_the_settings_or_data_offers_a_new_fine_tune_not_resume(
    client, project, tmp_path, monkeypatch, problem, change
):
    from inference.finetune import FineTuneInputError
    from studio.jobs.finetunes import run_finetune

    version, _ = make_version(project, extra=1)
    run = _run(project, version, tmp_path)

    def refuses(rows, config, out_dir, **kwargs):
        if problem.startswith("max_length:"):  # as the trainer says it, naming its field
            raise FineTuneInputError(problem, "max_length")
        raise ValueError(problem)

    _fake_train(monkeypatch, refuses)
    if problem == "deleted":
        version.delete()
    run_finetune(run.pk, "shell-test")
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED and run.phase == service.NOT_TRAINABLE
    assert "Resume would fail the same way: start a new fine-tune with " + change in run.error
    assert not service.resumable(run)
    client.force_login(project.users["researcher"])
    html = client.get(reverse("finetune_page", args=[run.pk])).content.decode()
    assert "finetune-resume" not in html and 'id="finetune-start-new"' in html
    assert "Resume goes on" not in html
    response = client.post(reverse("finetune_resume", args=[run.pk]), follow=True)
    assert "failed on its settings or data" in response.content.decode()
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("trained_first", [False, True])
def test_other_failures_and_errors_after_the_first_step_can_be_resumed(
    client, project, tmp_path, monkeypatch, trained_first
):
    from inference.finetune import TrainProgress
    from studio.jobs.finetunes import run_finetune

    version, _ = make_version(project, extra=1)
    run = _run(project, version, tmp_path)

    def breaks(rows, config, out_dir, *, on_progress, **kwargs):
        if trained_first:  # it trained a step: the settings were not the cause
            on_progress(TrainProgress(1, 4, 0.25, 2.0, 1e-3, 50, 0.1))
            raise ValueError("a tensor went wrong")
        raise RuntimeError("CUDA out of memory")

    _fake_train(monkeypatch, breaks)
    run_finetune(run.pk, "shell-test")
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED and run.phase == "failed", run.error
    assert "Resume goes on from its last checkpoint" in run.error
    client.force_login(project.users["researcher"])
    html = client.get(reverse("finetune_page", args=[run.pk])).content.decode()
    assert 'id="finetune-resume"' in html and "finetune-start-new" not in html
    client.post(reverse("finetune_resume", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED


@pytest.mark.django_db(transaction=True)
def test_a_resumed_run_says_so_and_its_first_loss_from_its_first_step_then_its_fit(
    client, project, tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from inference.finetune import TrainProgress
    from studio.jobs.finetunes import run_finetune
    from tests.support.worker import wait_for

    version, _ = make_version(project, extra=1)
    run = _run(project, version, tmp_path, max_steps=4)
    # it was stopped at step 2 once (a cancel, then Resume): its checkpoint and curve
    checkpoint = tmp_path / "out"
    FineTuneRun.objects.filter(pk=run.pk).update(
        output_dir=str(checkpoint),
        loss_history=[[1, 3.0, 1e-3], [2, 2.5, 1e-3]],
        settings={**run.settings, service.RESUMES_KEY: [1]},  # and once before that
    )
    (checkpoint / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (checkpoint / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    client.force_login(project.users["researcher"])
    page_url = reverse("finetune_page", args=[run.pk])
    seen = {}

    def trains(rows, config, out_dir, *, on_progress, **kwargs):
        on_progress(TrainProgress(3, 4, 0.75, 2.0, 1e-3, 90, 1.0))
        # the row says it while it trains, not at the end
        row = wait_for(
            lambda: FineTuneRun.objects.filter(
                pk=run.pk, first_loss__isnull=False, resumed_from_step=2, phase="training"
            ).first()
        )
        seen["settings"] = row.settings
        seen["page"] = client.get(page_url).content.decode()
        on_progress(TrainProgress(4, 4, 1.0, 1.5, 1e-3, 120, 2.0))
        adapter = checkpoint / "adapter"
        adapter.mkdir()
        return SimpleNamespace(
            result_dir=str(adapter),
            steps=4,
            total_steps=4,
            tokens_seen=120,
            train_s=2.0,
            first_loss=2.0,
            final_loss=1.5,
            losses=[[3, 2.0], [4, 1.5]],
            resumed_from_step=2,
            rows_trimmed=2,
            rows_dropped=[5],
        )

    _fake_train(monkeypatch, trains)
    run_finetune(run.pk, "shell-test")
    live = seen["page"]
    assert 'id="finetune-first-loss">3.0000<' in live  # the run's first loss, not "–"
    assert 'id="finetune-resumed">resumed from step 2<' in live
    assert 'id="finetune-phase">training<' in live
    assert seen["settings"][service.RESUMES_KEY] == [1, 2]
    done = FineTuneRun.objects.get(pk=run.pk)
    assert done.status == JobStatus.SUCCEEDED, done.error
    assert [int(s) for s, *_ in done.loss_history] == [1, 2, 3, 4]
    assert done.first_loss == 3.0 and done.final_loss == 1.5 and done.resumed_from_step == 2
    assert done.settings[service.FIT_KEY] == {"rows_trimmed": 2, "rows_dropped": 1, "dropped": [5]}
    assert done.settings["max_steps"] == 4  # the trainer's own settings kept
    html = client.get(page_url).content.decode()
    assert 'id="finetune-resumes">Resumed from step 1, then resumed from step 2<' in html
    assert (
        "2 rows trimmed to max length 2048" in html
        and "1 row left out (its own turn is longer than 2048 tokens; row 5)" in html
    )
    given = html.split("Everything the trainer was given", 1)[1]
    assert "<th>max_steps</th>" in given and "<th>fit</th>" not in given
    assert "<th>resumed_from</th>" not in given
