"""Fictional worlds of a project: the list, the visual editor with its live prompt preview,
import and export of world files, versions, and starting a trajectory in a world. Every
member reads; researchers and admins change."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from inference import worlds as worlding
from studio.access import get_project_for_user, get_world_for_user
from studio.forms.worlds import StartTrajectoryForm, WorldEditor, WorldImportForm
from studio.http import HtmxHttpRequest, whole_number
from studio.models import BranchOrigin, World, WorldVersion
from studio.presenters.worlds import file_tree
from studio.services import worlds as service

MAX_WORLD_FILE_BYTES = 20 * 1024 * 1024


def world_list(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id)
    rows = []
    for world in World.objects.filter(project=project).prefetch_related("versions"):
        latest = world.latest
        rows.append({"world": world, "latest": latest})
    return render(
        request,
        "worlds/list.html",
        {
            "project": project,
            "membership": membership,
            "rows": rows,
            "can_edit": membership.can_edit,
            "import_form": WorldImportForm(),
            "start_form": StartTrajectoryForm(),
        },
    )


def _editor_page(request, project, membership, editor, world, status=200) -> HttpResponse:
    versions = list(world.versions.order_by("-number")[:20]) if world is not None else []
    return render(
        request,
        "worlds/editor.html",
        {
            "project": project,
            "membership": membership,
            "editor": editor,
            "world": world,
            "versions": versions,
            "preview": _preview(editor) if request.method == "GET" and world is not None else None,
            "file_tree": file_tree(editor.file_rows()),
        },
        status=status,
    )


def _preview(editor: WorldEditor) -> dict:
    if editor.spec is None and not editor.is_valid():
        return {"errors": editor.errors + editor.field_messages()}
    assert editor.spec is not None
    return {"composed": worlding.compose(editor.spec), "spec": editor.spec}


@require_http_methods(["GET", "POST"])
def world_create(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    editor = WorldEditor(
        request.POST if request.method == "POST" else None,
        project=project,
        initial={"basics": {"domain": request.GET.get("domain") or "mcp"}},
    )
    if request.method == "POST" and editor.is_valid():
        assert editor.spec is not None
        saved = service.save_world(project, editor.spec, user=request.user)
        messages.success(request, f"Created world {saved.world.name!r} (version 1).")
        return redirect("world_edit", world_id=saved.world.pk)
    return _editor_page(request, project, membership, editor, None, 400 if editor.errors else 200)


@require_http_methods(["GET", "POST"])
def world_edit(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    world, membership = get_world_for_user(request, world_id, edit=request.method == "POST")
    project = world.project
    if request.method == "POST":
        editor = WorldEditor(request.POST, project=project, world=world)
        if editor.is_valid():
            assert editor.spec is not None
            saved = service.save_world(project, editor.spec, world=world, user=request.user)
            if saved.created:
                messages.success(
                    request, f"Saved {world.name!r} as version {saved.version.number}."
                )
            else:
                messages.info(request, "Nothing changed: no new version was written.")
            return redirect("world_edit", world_id=world.pk)
        return _editor_page(request, project, membership, editor, world, 400)
    latest = world.latest
    if latest is None:
        raise Http404("This world has no version yet.")
    version = _version_param(world, request.GET.get("version")) or latest
    editor = WorldEditor.for_spec(version.spec(), project=project, world=world)
    editor.spec = version.spec()
    response = _editor_page(request, project, membership, editor, world)
    return response


def _version_param(world: World, raw: str | None) -> WorldVersion | None:
    if not raw:
        return None
    number = whole_number(raw)
    if number is None:
        raise Http404(f"version must be a number, got {raw!r}")
    version = world.versions.filter(number=number).first()
    if version is None:
        raise Http404(f"{world.name!r} has no version {raw}")
    return version


@require_POST
def world_preview(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    """The composed system prompt of the editor's current content, its size and warnings;
    nothing is written (the editor posts here as the user types)."""
    project, membership = get_project_for_user(request, project_id)
    world = None
    if request.POST.get("world_id", "").isdigit():
        world = World.objects.filter(project=project, pk=int(request.POST["world_id"])).first()
    editor = WorldEditor(request.POST, project=project, world=world)
    return render(request, "worlds/editor.html#preview", {"preview": _preview(editor)})


@require_http_methods(["GET", "POST"])
def world_delete(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    """GET: what deleting the world removes and what it keeps, and a button to confirm
    (nothing is written); POST: delete it."""
    world, membership = get_world_for_user(request, world_id, edit=True)
    if request.method == "GET":
        return render(
            request,
            "worlds/delete.html",
            {
                "project": world.project,
                "membership": membership,
                "world": world,
                **service.deletion_summary(world),
            },
        )
    project_id, name = world.project_id, world.name
    world.delete()
    messages.success(
        request,
        f"Deleted world {name!r} and its versions; trajectories started in it keep their "
        "steps, and steps simulated in it keep its name and version.",
    )
    return redirect("world_list", project_id=project_id)


def world_export(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    world, _ = get_world_for_user(request, world_id)
    version = _version_param(world, request.GET.get("version")) or world.latest
    if version is None:
        raise Http404("This world has no version yet.")
    response = HttpResponse(service.export_text(version), content_type="application/json")
    slug = "".join(c if c.isalnum() else "-" for c in world.name.lower()).strip("-") or "world"
    response["Content-Disposition"] = f'attachment; filename="{slug}-v{version.number}.json"'
    return response


@require_POST
def world_import(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project, membership = get_project_for_user(request, project_id, edit=True)
    form = WorldImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a world file to import.")
        return redirect("world_list", project_id=project.pk)
    upload = form.cleaned_data["file"]
    if upload.size > MAX_WORLD_FILE_BYTES:
        messages.error(request, f"{upload.name}: larger than {MAX_WORLD_FILE_BYTES // 2**20} MB.")
        return redirect("world_list", project_id=project.pk)
    try:
        # NaN / Infinity (json.loads takes them) are refused by parse_world, naming their
        # path and the tool: WorldError
        data = worlding.loads(upload.read().decode("utf-8"), check=False)
        saved = service.import_world(project, data, user=request.user)
    except UnicodeDecodeError:
        messages.error(request, f"{upload.name}: not UTF-8 text.")
    except json.JSONDecodeError as exc:
        messages.error(
            request, f"{upload.name}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
        )
    except RecursionError:
        messages.error(
            request, f"{upload.name}: its JSON is nested too deeply. Nothing was imported."
        )
    except worlding.WorldError as exc:
        messages.error(request, f"{upload.name}: {exc}. Nothing was imported.")
    else:
        verb = "Imported" if saved.version.number == 1 else "Updated"
        if not saved.created:
            messages.info(request, f"{upload.name}: {saved.world.name!r} already holds this.")
        else:
            messages.success(
                request, f"{verb} world {saved.world.name!r} (version {saved.version.number})."
            )
    return redirect("world_list", project_id=project.pk)


@require_POST
def world_start(request: HtmxHttpRequest, world_id: int) -> HttpResponse:
    """A new trajectory in the world from a task instruction; its first step opens in the
    editor (or the playground)."""
    world, _ = get_world_for_user(request, world_id, edit=True)
    form = StartTrajectoryForm(request.POST)
    version = world.latest
    instruction = (
        form.instruction(version.spec()) if version is not None and form.is_valid() else None
    )
    if instruction is None:
        problems = [str(e) for errors in form.errors.values() for e in errors]
        messages.error(
            request, " ".join(problems) or "Write the task the agent is given in this world."
        )
        return redirect("world_list", project_id=world.project_id)
    assert version is not None
    trajectory = service.start_trajectory(
        version, instruction, user=request.user, origin=BranchOrigin.PLAYED
    )
    root = trajectory.branches.get()
    messages.success(
        request,
        f"Started {trajectory.title!r} in {world.name!r} v{version.number}: take the first step.",
    )
    target = request.POST.get("then")
    if target == "playground":
        return redirect("playground", branch_id=root.pk)
    return redirect(reverse("branch_fork", args=[root.pk, 0]))


urlpatterns = [
    path("projects/<int:project_id>/worlds/", world_list, name="world_list"),
    path("projects/<int:project_id>/worlds/new/", world_create, name="world_create"),
    path("projects/<int:project_id>/worlds/preview/", world_preview, name="world_preview"),
    path("projects/<int:project_id>/worlds/import/", world_import, name="world_import"),
    path("worlds/<int:world_id>/edit/", world_edit, name="world_edit"),
    path("worlds/<int:world_id>/delete/", world_delete, name="world_delete"),
    path("worlds/<int:world_id>/export/", world_export, name="world_export"),
    path("worlds/<int:world_id>/start/", world_start, name="world_start"),
]
