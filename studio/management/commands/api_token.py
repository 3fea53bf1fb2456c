"""`python manage.py api_token create|list|revoke`: the project's API tokens from the shell.

api_token create --project P --name N    (prints the token: it is shown only once)
api_token list --project P
api_token revoke --project P --name N"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.models import ApiToken, Project


class Command(BaseCommand):
    help = "Create, list and revoke a project's API tokens (the episode API's credentials)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{create,list,revoke}")
        for name in ("create", "list", "revoke"):
            cmd = sub.add_parser(name)
            cmd.add_argument("--project", required=True)
            if name != "list":
                cmd.add_argument("--name", required=True)

    def handle(self, *args, **options):
        from studio.services.tokens import create_token, revoke

        project = Project.objects.filter(name=options["project"]).first()
        if project is None:
            raise CommandError(f"no project named {options['project']!r}")
        if options["action"] == "create":
            try:
                _, token = create_token(project, options["name"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(token)
            return
        if options["action"] == "list":
            for row in ApiToken.objects.filter(project=project):
                state = "active" if row.is_active else "revoked"
                self.stdout.write(f"{row.pk}\t{row.name}\t{row.prefix}…\t{state}")
            return
        rows = ApiToken.objects.filter(project=project, name=options["name"], revoked_at=None)
        if not rows.exists():
            raise CommandError(f"project {project.name!r} has no active token {options['name']!r}")
        revoked = list(rows)
        for row in revoked:
            revoke(row)
        self.stdout.write(f"revoked {len(revoked)} token(s) named {options['name']!r}")
