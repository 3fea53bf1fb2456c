"""The perturbation library of a project: every member reads it; researchers and admins
add (by hand or a domain's presets), edit and delete entries."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from inference import perturbations as perturbing
from studio.access import get_perturbation_for_user, get_project_for_user
from studio.forms.perturbations import PerturbationForm
from studio.http import HtmxHttpRequest, back_url
from studio.models import Domain, Perturbation
from studio.services import perturbations as service


def _entries(project) -> list[dict]:
    rows = []
    for entry in Perturbation.objects.filter(project=project):
        try:
            built = entry.as_perturbation()
            spec, problem = perturbing.spec_of(built), ""
            instruction = perturbing.instruction(built)
        except perturbing.PerturbationError as exc:
            spec, problem, instruction = entry.kind, str(exc), ""
        rows.append({"e": entry, "spec": spec, "problem": problem, "instruction": instruction})
    return rows


def perturbation_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    return render(
        request,
        "perturbations/list.html",
        {
            "project": project,
            "membership": membership,
            "rows": _entries(project),
            "can_edit": membership.can_edit,
            "domains": Domain.choices,
            "presets": perturbing.PRESETS,
        },
    )


def _form_page(request, project, membership, form, entry, status=200) -> HttpResponse:
    return render(
        request,
        "perturbations/form.html",
        {"project": project, "membership": membership, "form": form, "entry": entry},
        status=status,
    )


@require_http_methods(["GET", "POST"])
def perturbation_create(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    form = PerturbationForm(request.POST or None, project=project)
    if request.method == "POST" and form.is_valid():
        entry = service.save_perturbation(
            project,
            form.cleaned_data["built"],
            description=form.cleaned_data["description"],
            user=request.user,
        )
        messages.success(request, f"Added perturbation {entry.name!r}.")
        return redirect("perturbation_list", project_id=project.pk)
    return _form_page(request, project, membership, form, None, 400 if form.errors else 200)


@require_http_methods(["GET", "POST"])
def perturbation_edit(request: HtmxHttpRequest, perturbation_id: int) -> HttpResponse:
    entry, membership = get_perturbation_for_user(request, perturbation_id, edit=True)
    project = entry.project
    form = PerturbationForm(request.POST or None, project=project, instance=entry)
    if request.method == "POST" and form.is_valid():
        service.save_perturbation(
            project,
            form.cleaned_data["built"],
            description=form.cleaned_data["description"],
            instance=entry,
        )
        messages.success(
            request, f"Saved {entry.name!r}; jobs that ran it keep the version they ran."
        )
        return redirect("perturbation_list", project_id=project.pk)
    return _form_page(request, project, membership, form, entry, 400 if form.errors else 200)


@require_POST
def perturbation_delete(request: HtmxHttpRequest, perturbation_id: int) -> HttpResponse:
    entry, _ = get_perturbation_for_user(request, perturbation_id, edit=True)
    project_id, name = entry.project_id, entry.name
    entry.delete()
    messages.success(request, f"Deleted {name!r}; steps it perturbed keep its record.")
    return redirect("perturbation_list", project_id=project_id)


@require_POST
def perturbation_presets(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    domain = request.POST.get("domain", "")
    if domain not in perturbing.PRESETS:
        messages.error(request, f"No presets for domain {domain!r}.")
        return redirect("perturbation_list", project_id=project.pk)
    added, skipped = service.add_presets(project, domain, user=request.user)
    label = dict(Domain.choices).get(domain, domain)
    text = f"Added {len(added)} {label} preset{'s' if len(added) != 1 else ''}"
    if skipped:
        text += f" ({skipped} already in the library, left as they are)"
    messages.success(request, text + ".")
    # added from the editor or the playground: back there, the new entries in its list
    return redirect(back_url(request, reverse("perturbation_list", args=[project.pk])))


urlpatterns = [
    path("projects/<int:project_id>/perturbations/", perturbation_list, name="perturbation_list"),
    path(
        "projects/<int:project_id>/perturbations/new/",
        perturbation_create,
        name="perturbation_create",
    ),
    path(
        "projects/<int:project_id>/perturbations/presets/",
        perturbation_presets,
        name="perturbation_presets",
    ),
    path("perturbations/<int:perturbation_id>/edit/", perturbation_edit, name="perturbation_edit"),
    path(
        "perturbations/<int:perturbation_id>/delete/",
        perturbation_delete,
        name="perturbation_delete",
    ),
]
