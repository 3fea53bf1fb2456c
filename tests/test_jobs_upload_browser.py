"""The upload form in headless Chromium: upload progress bar, then the import job's progress
and result, through a real worker."""

from __future__ import annotations

import json

import pytest

from studio.models import ImportJob, JobStatus, Trajectory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.worker,
]

RECORD_PROGRESS = """
window.__uploadProgress = [];
document.addEventListener("htmx:xhr:progress", function () {
  var bar = document.querySelector("#import-form .upload-progress .progress");
  if (bar) window.__uploadProgress.push(Number(bar.getAttribute("aria-valuenow")));
});
"""


def big_native_file(path, steps: int = 600) -> int:
    data = {
        "format": "agentworld-studio/v1",
        "trajectories": [
            {
                "title": "Shell session with long outputs",
                "domain": "terminal",
                "task_instruction": "Inspect the build logs.",
                "steps": [
                    {"action": f"cat build-{i}.log", "observation": f"line {i} " * 400}
                    for i in range(steps)
                ],
            }
        ],
    }
    path.write_text(json.dumps(data))
    return path.stat().st_size


def test_upload_shows_progress_and_result(
    page,
    login,
    live_server,
    project,
    tmp_path,
    default_worker,
):
    size = big_native_file(tmp_path / "build-logs.json")
    assert size > 2_000_000
    login(page, "researcher")
    page.goto(f"{live_server.url}/projects/{project.pk}/import/")
    page.evaluate(RECORD_PROGRESS)
    page.set_input_files("input[name=file]", str(tmp_path / "build-logs.json"))
    page.click("#import-form button[type=submit]")
    result = page.wait_for_selector(".import-result", timeout=90_000)
    assert "Imported 1 trajectory with 600 steps" in " ".join(result.inner_text().split())
    progress = page.evaluate("window.__uploadProgress")
    assert progress and progress[-1] == 100 and progress == sorted(progress)
    job = ImportJob.objects.get()
    assert page.url.endswith(f"/imports/{job.pk}/")  # pushed: reload shows the job page
    assert job.status == JobStatus.SUCCEEDED and job.size_bytes == size
    assert Trajectory.objects.get().step_count == 600
    page.click("text=Open the library")
    page.wait_for_url(f"{live_server.url}/projects/{project.pk}/")


@pytest.mark.django_db(transaction=True)
def test_a_file_over_the_limit_is_refused_in_the_page_before_it_is_sent(
    page, login, live_server, project, tmp_path, settings
):
    """The server refuses such a body too (studio.body_limits), but a browser still sending
    it when the 413 comes may show a reset connection: the page says it first."""
    settings.STUDIO_MAX_UPLOAD_BYTES = 1024 * 1024
    size = big_native_file(tmp_path / "build-logs.json")
    assert size > settings.STUDIO_MAX_UPLOAD_BYTES
    sent = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    login(page, "researcher")
    sent.clear()
    page.goto(f"{live_server.url}/projects/{project.pk}/import/")
    page.set_input_files("input[name=file]", str(tmp_path / "build-logs.json"))
    page.click("#import-form button[type=submit]")
    refusal = page.wait_for_selector(".upload-refusal")
    assert " ".join(refusal.inner_text().split()) == (  # filesizeformat's no-break space
        "build-logs.json is larger than the upload limit of 1.0 MB a file "
        "(STUDIO_MAX_UPLOAD_MB); nothing was sent."
    )
    assert sent == [] and not ImportJob.objects.exists()
