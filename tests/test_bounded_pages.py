"""Pages stay small whatever the data: a trajectory with a 30 MB observation, a large action
and a large task gives an annotation page, a step's fragments and a trajectory page of under
2 MB each, which say how much they show and link to *Show all*; Show all streams the whole
text, byte for byte, to members of the project only; a correction of an observation the page
cuts is never made from its shown start."""

from __future__ import annotations

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse

from studio.models import StepAnnotation
from studio.rendering.bounded import FIELD_CHARS
from tests.support.browser import shot
from tests.support.ui import make_trajectory

PAGE_LIMIT = 2 * 1024 * 1024
# Built once: markup and non-ASCII in it, so escaping and UTF-8 are both tested.
LINE = "<b>row</b> & naïve café \u2603 <script>alert(1)</script>\n"
BIG_OBSERVATION = "BEGIN\n" + LINE * (30_000_000 // len(LINE)) + "TAIL-OF-OBSERVATION"
BIG_ACTION = "echo " + "a" * 600_000 + " TAIL-OF-ACTION"
BIG_TASK = "Task start. " + "do the thing; " * 250_000 + "TAIL-OF-TASK"
BIG_THINKING = "thinking " * 50_000 + "TAIL-OF-THINKING"


@pytest.fixture
def big(project):
    traj = make_trajectory(
        project,
        title="Huge run",
        task_instruction=BIG_TASK,
        step_factory=lambda i: {
            "action": BIG_ACTION if i == 1 else f"echo {i}",
            "observation": BIG_OBSERVATION if i == 1 else f"output {i}",
            "thinking": BIG_THINKING if i == 1 else "",
            "raw_output": BIG_THINKING if i == 1 else "",
            "parse_status": "well_formed" if i == 1 else "",
            "observation_source": "simulated" if i == 1 else "recorded",
        },
        n_steps=3,
    )
    return traj, traj.branches.get(parent__isnull=True).steps.get(index=1)


def _editor(html: str) -> str:
    """What the correction editor starts from."""
    return html.split('id="corrected-observation"', 1)[1].split(">", 1)[1].split("</textarea>")[0]


def _streamed(response) -> bytes:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content)


def _total(n: int, shown: int = FIELD_CHARS) -> str:
    return f"Showing the first {shown:,} of {n:,} characters."


@pytest.mark.django_db
def test_the_annotation_page_of_a_huge_observation_stays_small_and_says_so(annotator_client, big):
    traj, step = big
    response = annotator_client.get(reverse("step_annotate", args=[step.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert len(response.content) < PAGE_LIMIT, len(response.content)
    assert _total(len(BIG_OBSERVATION)) in html
    assert _total(len(BIG_ACTION)) in html
    assert _total(len(BIG_TASK)) in html
    assert reverse("step_text", args=[step.pk, "observation"]) in html
    assert reverse("trajectory_text", args=[traj.pk, "task"]) in html
    assert "TAIL-OF-OBSERVATION" not in html and "TAIL-OF-TASK" not in html
    assert "<script>alert(1)" not in html  # the text is escaped
    # the editor does not start from the observation (it would be on the page twice): it is
    # empty, and the page says what is typed there replaces the whole observation
    editor = _editor(html)
    assert "row" not in editor
    assert "replaces the whole observation" in html
    assert "Load the whole observation" not in html  # more than a correction can hold


@pytest.mark.django_db
def test_the_trajectory_page_and_the_step_fragments_stay_small(researcher_client, big):
    traj, step = big
    page = researcher_client.get(reverse("trajectory", args=[traj.pk]))
    assert page.status_code == 200
    assert len(page.content) < PAGE_LIMIT, len(page.content)
    html = page.content.decode()
    assert _total(len(BIG_TASK)) in html and "TAIL-OF-TASK" not in html
    # a window of steps shows less of each step's texts than a page of one step
    assert _total(len(BIG_ACTION), 20_000) in html and "TAIL-OF-ACTION" not in html
    assert _total(len(BIG_THINKING), 20_000) in html and "TAIL-OF-THINKING" not in html
    assert reverse("step_text", args=[step.pk, "action"]) in html
    # "Load full observation" and "Raw model output" bring at most a page's worth
    fragments = (
        ("step_observation", "observation", BIG_OBSERVATION),
        ("step_raw_output", "raw_output", BIG_THINKING),
    )
    for name, field, text in fragments:
        fragment = researcher_client.get(reverse(name, args=[step.pk]), HTTP_HX_REQUEST="true")
        assert fragment.status_code == 200
        assert len(fragment.content) < PAGE_LIMIT, (name, len(fragment.content))
        assert _total(len(text)) in fragment.content.decode()
        assert reverse("step_text", args=[step.pk, field]) in fragment.content.decode()


@pytest.mark.django_db
def test_show_all_streams_the_whole_text_as_plain_text(annotator_client, big):
    traj, step = big
    response = annotator_client.get(reverse("step_text", args=[step.pk, "observation"]))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"].startswith("inline;")
    assert _streamed(response) == BIG_OBSERVATION.encode("utf-8")
    for field, text in (("action", BIG_ACTION), ("thinking", BIG_THINKING)):
        got = annotator_client.get(reverse("step_text", args=[step.pk, field]))
        assert _streamed(got) == text.encode()
    task = annotator_client.get(reverse("trajectory_text", args=[traj.pk, "task"]))
    assert _streamed(task) == BIG_TASK.encode()
    assert annotator_client.get(reverse("step_text", args=[step.pk, "meta"])).status_code == 404
    assert annotator_client.post(reverse("step_text", args=[step.pk, "action"])).status_code == 405


@pytest.mark.django_db
def test_show_all_is_for_members_of_the_project_only(outsider_client, big):
    traj, step = big
    assert (
        outsider_client.get(reverse("step_text", args=[step.pk, "observation"])).status_code == 404
    )
    assert (
        outsider_client.get(reverse("trajectory_text", args=[traj.pk, "task"])).status_code == 404
    )


@pytest.mark.django_db
def test_a_correction_of_a_cut_observation_never_drops_its_rest(annotator_client, big):
    _, step = big
    url = reverse("step_annotate", args=[step.pk])
    # the editor was sent empty: saving the rest of the form leaves the observation whole
    saved = annotator_client.post(url, {"rating_format": "4", "corrected_observation": ""})
    assert saved.status_code == 302
    annotation = StepAnnotation.objects.get(step=step)
    assert annotation.ratings == {"format": 4} and annotation.corrected_observation == ""
    # a start longer than a correction holds is refused, with nothing written
    refused = annotator_client.post(
        url, {"rating_format": "4", "corrected_observation": BIG_OBSERVATION[: FIELD_CHARS + 1]}
    )
    assert refused.status_code == 400
    assert StepAnnotation.objects.get(step=step).corrected_observation == ""


@pytest.mark.django_db
def test_an_observation_a_correction_can_hold_is_loaded_whole_into_the_editor(
    annotator_client, project, settings
):
    settings.STUDIO_PAGE_FIELD_CHARS = 1000
    observation = "".join(f"line {k}\n" for k in range(1000))  # ~9,000 characters
    traj = make_trajectory(project, steps=[("ls", observation)])
    step = traj.branches.get(parent__isnull=True).steps.get()
    url = reverse("step_annotate", args=[step.pk])
    html = annotator_client.get(url).content.decode()
    assert f"Showing the first 1,000 of {len(observation):,} characters." in html
    editor = _editor(html)
    assert "line 5" not in editor  # not on the page twice
    load = reverse("step_text", args=[step.pk, "observation"])
    assert f'id="correction-load" data-url="{load}"' in html
    # what the button loads is the whole observation: sent back unchanged, no correction;
    # changed at its end, the correction is the whole text with the change
    whole = _streamed(annotator_client.get(load)).decode()
    assert whole == observation
    annotator_client.post(url, {"verdict": "accept", "corrected_observation": whole})
    assert StepAnnotation.objects.get(step=step).corrected_observation == ""
    fixed = whole.replace("line 999", "line 1000")
    annotator_client.post(url, {"verdict": "accept", "corrected_observation": fixed})
    assert StepAnnotation.objects.get(step=step).corrected_observation == fixed
    # the page now starts the editor from the saved correction (what the annotator wrote)
    again = annotator_client.get(url).content.decode()
    assert "line 1000" in _editor(again)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_huge_observation_reads_as_its_start_with_show_all(
    page, login, live_server, big
):
    traj, step = big
    login(page, "annotator")
    page.goto(f"{live_server.url}{reverse('step_annotate', args=[step.pk])}")
    note = page.locator("#step-observation .bounded-note")
    assert note.inner_text().startswith(_total(len(BIG_OBSERVATION)))
    # the markup in it is text: no element was made of it
    assert page.locator("#step-observation b").count() == 0
    assert "<b>row</b>" in page.locator("#step-observation pre").inner_text()[:200]
    page.locator("#correction summary").click()
    assert page.locator("#corrected-observation").input_value() == ""
    assert page.locator("#correction-cut").is_visible()
    shot(page, "bounded-annotation-page")
    link = note.locator("a.show-all")
    assert link.get_attribute("target") == "_blank"
    url = link.get_attribute("href")
    assert url == reverse("step_text", args=[step.pk, "observation"])
    # what the link opens is the whole text, as the browser's session gets it
    whole = page.request.get(f"{live_server.url}{url}")
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert whole.body() == BIG_OBSERVATION.encode()
    # the trajectory page: the step's action shows its start, which unfolds in place
    page.goto(f"{live_server.url}{reverse('trajectory', args=[traj.pk])}")
    action = page.locator(f"#step-{step.index} .step-action")
    assert action.locator(".bounded-note").inner_text().startswith(_total(len(BIG_ACTION), 20_000))
    action.locator(".fold-toggle").click()
    assert action.locator("[data-fold]").evaluate("el => el.classList.contains('open')")
    shot(page, "bounded-trajectory-page")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_editor_loads_the_whole_observation_when_asked(
    page, login, live_server, project, settings
):
    settings.STUDIO_PAGE_FIELD_CHARS = 1000
    observation = "".join(f"line {k}\n" for k in range(1000))
    traj = make_trajectory(project, steps=[("ls", observation)])
    step = traj.branches.get(parent__isnull=True).steps.get()
    login(page, "annotator")
    page.goto(f"{live_server.url}{reverse('step_annotate', args=[step.pk])}")
    page.locator("#correction summary").click()
    assert page.locator("#corrected-observation").input_value() == ""
    page.locator("#correction-load").click()
    # A function, not an expression: Playwright polls an expression with eval, which the
    # page's Content-Security-Policy refuses whenever the first check is false.
    page.wait_for_function(
        "() => document.getElementById('corrected-observation').value.length > 1000"
    )
    assert page.locator("#corrected-observation").input_value() == observation
    assert "Loaded" in page.locator("#correction-load").inner_text()
    page.locator("#corrected-observation").press("Control+End")
    page.keyboard.type("line 1000")
    with page.expect_navigation():
        page.locator("#annotation-save").click()
    assert "Saved." in page.locator(".messages").inner_text()
    assert StepAnnotation.objects.get(step=step).corrected_observation == observation + "line 1000"
