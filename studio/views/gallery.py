"""The demo gallery: one scenario per domain, the same action simulated plain and perturbed,
side by side. Offline, prompted perturbations show samples written for the demo (labelled
so); deterministic ones, and everything once a world model is configured, run live."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from studio.access import get_project_for_user
from studio.demo_data.scenarios import SCENARIOS, scenario
from studio.http import HtmxHttpRequest
from studio.services import gallery as service
from studio.tasks import enqueue_simulation


def gallery(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    states = service.gallery_states(project, SCENARIOS)
    return render(
        request,
        "gallery/gallery.html",
        {
            "project": project,
            "membership": membership,
            "states": states,
            "can_edit": membership.can_edit,
            "offline": not service.has_neural_world_model(project),
            # world models there are, though not the default: the page says to make one so
            "other_world_models": list(
                project.endpoints.filter(role="world").exclude(kind="retrieval")
            ),
        },
    )


def gallery_card(request: HtmxHttpRequest, project_id: int, key: str) -> HttpResponse:
    """One scenario's card, polled while its runs go on; reading never writes."""
    project, membership = get_project_for_user(request, project_id)
    s = scenario(key)
    if s is None:
        raise Http404(f"No scenario {key!r}")
    state = service.scenario_state(project, s)
    response = render(
        request,
        "gallery/gallery.html#card",
        {"project": project, "st": state, "can_edit": membership.can_edit},
    )
    if not state.running:
        return HttpResponseStopPolling(response.content)
    return response


@require_POST
def gallery_run(request: HtmxHttpRequest, project_id: int, key: str) -> HttpResponse:
    project, _ = get_project_for_user(request, project_id, edit=True)
    s = scenario(key)
    if s is None:
        raise Http404(f"No scenario {key!r}")
    try:
        jobs = service.run_scenario(project, s, user=request.user)
    except service.ScenarioError as exc:
        messages.error(request, f"{s.title}: {exc}.")
    else:
        for job in jobs:
            enqueue_simulation(job)
        messages.success(
            request, f"Running {s.title!r} ({len(jobs)} job{'s' if len(jobs) != 1 else ''})."
        )
    return redirect(reverse("gallery", args=[project.pk]) + f"#scenario-{s.key}")


urlpatterns = [
    path("projects/<int:project_id>/gallery/", gallery, name="gallery"),
    path("projects/<int:project_id>/gallery/<slug:key>/", gallery_card, name="gallery_card"),
    path("projects/<int:project_id>/gallery/<slug:key>/run/", gallery_run, name="gallery_run"),
]
