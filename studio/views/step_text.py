"""*Show all*: one step field or trajectory text, whole, streamed as plain text.

Pages render at most STUDIO_PAGE_FIELD_CHARS characters of a field
(`studio.rendering.bounded`) and link here for the rest. The text is sent as
`text/plain; charset=utf-8` with `X-Content-Type-Options: nosniff`, so a browser shows it
as text and never runs or draws what it holds (HTML in an observation included), inline,
in chunks as it is written. The same access rules as the pages that link here (404 outside
the user's projects). Blind review hides judge scores and other people's annotations
(`studio.services.blinding`), never the step itself, which the annotator sees on the page:
a step field shows nothing a blind queue hides. GET only; nothing is written."""

from __future__ import annotations

from collections.abc import Iterator

from django.http import Http404, StreamingHttpResponse
from django.urls import path
from django.views.decorators.http import require_GET

from studio.access import get_step_for_user, get_trajectory_for_user
from studio.http import HtmxHttpRequest, streaming_response

# The step fields a page may cut, by the name in the address.
STEP_FIELDS = ("action", "observation", "thinking", "state", "raw_output", "raw_prompt")
# The trajectory's texts: the address's name -> the model field.
TRAJECTORY_FIELDS = {"task": "task_instruction", "system_prompt": "system_prompt"}
CHUNK_CHARS = 1 << 16


def _chunks(text: str) -> Iterator[bytes]:
    for start in range(0, len(text), CHUNK_CHARS):
        yield text[start : start + CHUNK_CHARS].encode("utf-8")


def _plain(request: HtmxHttpRequest, text: str, filename: str) -> StreamingHttpResponse:
    response = streaming_response(request, _chunks(text), "text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = f'inline; filename="{filename}"'
    # the text of a step can change (an edit, a rerun): never served from a stale cache
    response["Cache-Control"] = "private, no-cache"
    return response


@require_GET
def step_text(request: HtmxHttpRequest, step_id: int, field: str) -> StreamingHttpResponse:
    if field not in STEP_FIELDS:
        raise Http404(f"a step has no field {field!r}: one of {', '.join(STEP_FIELDS)}")
    step, _ = get_step_for_user(request, step_id)
    return _plain(request, getattr(step, field) or "", f"step-{step.pk}-{field}.txt")


@require_GET
def trajectory_text(
    request: HtmxHttpRequest, trajectory_id: int, field: str
) -> StreamingHttpResponse:
    if field not in TRAJECTORY_FIELDS:
        raise Http404(f"a trajectory has no text {field!r}: one of {', '.join(TRAJECTORY_FIELDS)}")
    trajectory, _ = get_trajectory_for_user(request, trajectory_id)
    text = getattr(trajectory, TRAJECTORY_FIELDS[field]) or ""
    return _plain(request, text, f"trajectory-{trajectory.pk}-{field}.txt")


urlpatterns = [
    path("steps/<int:step_id>/text/<str:field>/", step_text, name="step_text"),
    path(
        "trajectories/<int:trajectory_id>/text/<str:field>/",
        trajectory_text,
        name="trajectory_text",
    ),
]
