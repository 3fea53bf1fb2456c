"""`python manage.py load_demo`: the demo users, the "Demo" project, the sample trajectories
and the rewarded demo worlds (tasks with success criteria, a submit action and checks).

With $STUDIO_DEMO_MODELS_URL set (scripts/dev.sh does), the project also gets the scripted
demo agent, world, judge and embeddings endpoints (`manage.py demo_models`: stand-ins, not
models).

Idempotent: users and memberships are created only when missing (existing passwords are left
alone), and the importers skip trajectories already in the project, so a second run adds
nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from studio.demo_data.scripted_models import (
    AGENT_MODEL,
    EMBEDDING_MODEL,
    JUDGE_MODEL,
    WORLD_MODEL,
)
from studio.importers.base import ImportFailure
from studio.models import EndpointRole, Membership, ModelEndpoint, Project, Role
from studio.services.endpoints import seed_endpoints
from studio.services.imports import do_import_file

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo_data"
DEMO_PROJECT = "Demo"
DEMO_PASSWORD = "demo-password"
# Where `manage.py demo_models` serves the scripted stand-ins (scripts/dev.sh sets it).
DEMO_MODELS_ENV = "STUDIO_DEMO_MODELS_URL"
SCRIPTED_ENDPOINTS = [
    ("Scripted demo agent", EndpointRole.AGENT, AGENT_MODEL),
    ("Scripted demo world", EndpointRole.WORLD, WORLD_MODEL),
    ("Scripted demo judge", EndpointRole.JUDGE, JUDGE_MODEL),
    ("Scripted demo embeddings", EndpointRole.EMBEDDING, EMBEDDING_MODEL),
]
DEMO_USERS = [
    ("admin", Role.ADMIN),
    ("researcher", Role.RESEARCHER),
    ("annotator", Role.ANNOTATOR),
]


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def demo_files() -> list[Path]:
    return sorted(p for p in DEMO_DIR.iterdir() if p.suffix in (".json", ".jsonl"))


class Command(BaseCommand):
    help = (
        "Create the demo users (admin, researcher, annotator; password demo-password), the "
        '"Demo" project and import the sample trajectories of all seven domains. Safe to re-run.'
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--project", default=DEMO_PROJECT, help=f"project name (default {DEMO_PROJECT!r})"
        )

    def handle(self, *args, **options):
        files = demo_files()
        if not files:
            raise CommandError(f"no demo files found in {DEMO_DIR}")
        with transaction.atomic():
            project, created = Project.objects.get_or_create(
                name=options["project"],
                defaults={"description": "Sample trajectories of all seven world-model domains."},
            )
            self.say(f"project {project.name!r}: {'created' if created else 'exists'}")
            users = self.ensure_users(project)
            for endpoint in seed_endpoints(project):
                self.say(
                    f"model endpoint {endpoint.name!r} ({endpoint.get_role_display().lower()})"
                )
            self.ensure_scripted_endpoints(project)
        total_t = total_s = total_skipped = 0
        for path in files:
            try:
                # indexed for search as written: found the moment dev.sh prints its URL
                result = do_import_file(
                    project=project,
                    path=path,
                    user=users["admin"],
                    display_name=path.name,
                    defer_search_index=False,
                )
            except ImportFailure as exc:
                raise CommandError(f"demo file {path.name} did not import: {exc}") from exc
            total_t += result.trajectories_created
            total_s += result.steps_created
            total_skipped += result.trajectories_skipped
            line = (
                f"  {path.name} ({result.detected_format}): "
                f"{plural(result.trajectories_created, 'trajectory', 'trajectories')}, "
                f"{plural(result.steps_created, 'step', 'steps')} imported"
            )
            if result.trajectories_skipped:
                line += f", {result.trajectories_skipped} already there"
            self.say(line)
        self.load_worlds(project, users["admin"])
        self.stdout.write(
            self.style.SUCCESS(
                f"demo data: imported {plural(total_t, 'trajectory', 'trajectories')}, "
                f"{plural(total_s, 'step', 'steps')} "
                f"({total_skipped} already present) into project {project.name!r} (id {project.pk})"
            )
        )

    def load_worlds(self, project: Project, user) -> None:
        """The demo worlds, as world files import them: a world already holding one is left
        as it is (no new version)."""
        from studio.demo_data.worlds_text import REWARDED_WORLDS
        from studio.services.worlds import import_world

        for data in REWARDED_WORLDS:
            saved = import_world(project, data, user=user)
            state = "imported" if saved.created else "unchanged"
            tasks = ", ".join(t.id for t in saved.version.spec().tasks)
            self.say(
                f"  world {saved.world.name!r} v{saved.version.number}: {state} (tasks: {tasks})"
            )

    def ensure_scripted_endpoints(self, project: Project) -> None:
        """With $STUDIO_DEMO_MODELS_URL (scripts/dev.sh sets it to `manage.py demo_models`),
        the scripted demo agent, world, judge and embeddings as endpoints, when missing: each is its role's
        default only where the role has none (an episode in a world is never answered by
        the retrieval baseline, so it takes the scripted world when no other world model
        exists). One already there keeps its settings; its URL follows the variable."""
        url = os.environ.get(DEMO_MODELS_ENV, "").strip().rstrip("/")
        if not url:
            return
        if not url.startswith(("http://", "https://")):
            raise CommandError(f"${DEMO_MODELS_ENV} must be an http:// URL, got {url!r}")
        for name, role, model in SCRIPTED_ENDPOINTS:
            endpoint = project.endpoints.filter(name=name).first()
            if endpoint is None:
                has_default = project.endpoints.filter(role=role, is_default=True).exists()
                ModelEndpoint.objects.create(
                    project=project,
                    name=name,
                    role=role,
                    kind="openai",
                    base_url=url,
                    model=model,
                    is_default=not has_default,
                )
                self.say(f"model endpoint {name!r} ({model} at {url}: scripted, not a model)")
            elif endpoint.kind == "openai" and endpoint.model == model and endpoint.base_url != url:
                ModelEndpoint.objects.filter(pk=endpoint.pk).update(base_url=url)
                self.say(f"model endpoint {name!r}: now at {url}")

    def ensure_users(self, project: Project) -> dict:
        User = get_user_model()
        users = {}
        for username, role in DEMO_USERS:
            user = User.objects.filter(username=username).first()
            if user is None:
                user = User.objects.create_user(username=username, password=DEMO_PASSWORD)
                # The demo admin may also use Django's admin site.
                if role == Role.ADMIN:
                    user.is_staff = user.is_superuser = True
                    user.save(update_fields=["is_staff", "is_superuser"])
                self.say(f"user {username!r}: created (password {DEMO_PASSWORD!r})")
            else:
                self.say(f"user {username!r}: exists (password unchanged)")
            membership, made = Membership.objects.get_or_create(
                project=project, user=user, defaults={"role": role}
            )
            if made:
                self.say(f"  {username} joined {project.name!r} as {role.value}")
            elif membership.role != role:
                self.say(f"  {username} keeps role {membership.role} in {project.name!r}")
            users[username] = user
        return users

    def say(self, text: str) -> None:
        self.stdout.write(text)
