"""Rollout campaigns from the shell:

    campaign run --world W (--tasks FILE | --task-ids a,b) --agent-model NAME --episodes 8
                 --project P [--world-model NAME] [--max-steps N] [--perturbation NAME ...]
                 [--seed S] [--concurrency C] [--name NAME] [--background]
    campaign list --project P
    campaign show ID
    campaign cancel ID
    campaign resume ID [--background]

`run` and `resume` play the campaign in this process (`studio.jobs.campaigns.run_campaign`)
with a progress bar on stderr, then print its summary; `--background` hands it to the
workers instead. Bad input exits non-zero with one line saying what and where."""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from studio.models import (
    Campaign,
    CampaignSource,
    EndpointRole,
    ModelEndpoint,
    Perturbation,
    Project,
    World,
)
from studio.presenters.campaigns import CAUSE_WORDS  # the page's words for an end cause
from studio.services.campaigns import plural


def _fmt(value: Any, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    if percent:
        return f"{100 * value:.0f}%"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


class Command(BaseCommand):
    help = "Run, list, show, cancel and resume rollout campaigns."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="make a campaign and play it")
        run.add_argument("--project", required=True, help="project name")
        run.add_argument("--world", required=True, help="world name (or id)")
        tasks = run.add_mutually_exclusive_group()
        tasks.add_argument("--tasks", help="a JSONL file of tasks (default: the world's tasks)")
        tasks.add_argument("--task-ids", help="some of the world's tasks: id,id,...")
        run.add_argument("--agent-model", required=True, help="an agent model's name (Models page)")
        run.add_argument(
            "--world-model",
            default="",
            help="a world model's name (default: the project's default world model when it reads "
            "a world's prompt, else its only one that does)",
        )
        run.add_argument("--episodes", type=int, default=1, help="episodes per task and arm")
        run.add_argument("--max-steps", type=int, default=10)
        run.add_argument(
            "--perturbation", action="append", default=[], metavar="NAME",
            help="a perturbation of the project's library: one more arm (repeatable)",
        )  # fmt: skip
        run.add_argument("--seed", type=int)
        run.add_argument("--concurrency", type=int)
        run.add_argument("--temperature", type=float, default=0.7)
        run.add_argument("--max-tokens", type=int, default=1024)
        run.add_argument("--name", default="")
        run.add_argument("--background", action="store_true", help="hand it to the workers")
        run.add_argument("--no-progress", action="store_true")
        lst = sub.add_parser("list", help="the project's campaigns")
        lst.add_argument("--project", required=True)
        for name in ("show", "cancel"):
            one = sub.add_parser(name)
            one.add_argument("id", type=int)
        resume = sub.add_parser("resume", help="play the slots not done")
        resume.add_argument("id", type=int)
        resume.add_argument("--background", action="store_true")
        resume.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"do_{options['action']}")(options)

    # ---- lookups ------------------------------------------------------------------------------

    def _project(self, name: str) -> Project:
        project = Project.objects.filter(name=name).first()
        if project is None:
            raise CommandError(f"--project: no project named {name!r}")
        return project

    def _campaign(self, pk: int) -> Campaign:
        campaign = Campaign.objects.filter(pk=pk).first()
        if campaign is None:
            raise CommandError(f"no campaign {pk}")
        return campaign

    def _endpoint(self, project: Project, name: str, role: str, flag: str) -> ModelEndpoint:
        found = ModelEndpoint.objects.filter(project=project, role=role, name=name).first()
        if found is None:
            listed = ", ".join(
                ModelEndpoint.objects.filter(project=project, role=role).values_list(
                    "name", flat=True
                )
            )
            raise CommandError(
                f"{flag}: the project has no {role} model named {name!r} (its {role} models: "
                f"{listed or 'none'})"
            )
        return found

    # ---- run ----------------------------------------------------------------------------------

    def do_run(self, o: dict[str, Any]) -> None:
        from studio.services import campaigns as service

        project = self._project(o["project"])
        worlds = World.objects.filter(project=project)
        world = worlds.filter(name=o["world"]).first()
        if world is None and str(o["world"]).isdigit():
            world = worlds.filter(pk=int(o["world"])).first()
        if world is None:
            raise CommandError(f"--world: the project has no world {o['world']!r}")
        agent = self._endpoint(project, o["agent_model"], EndpointRole.AGENT, "--agent-model")
        if o["world_model"]:
            world_model = self._endpoint(
                project, o["world_model"], EndpointRole.WORLD, "--world-model"
            )
        else:
            try:
                world_model = service.choose_world_model(project)
            except service.CampaignError as exc:
                raise CommandError(
                    "--world-model: " + str(exc).removeprefix("world model: ")
                ) from None
        perturbations = []
        for name in o["perturbation"]:
            row = Perturbation.objects.filter(project=project, name=name).first()
            if row is None:
                raise CommandError(
                    f"--perturbation: no perturbation {name!r} in the project's library"
                )
            perturbations.append(row)
        try:
            if o["tasks"]:
                path = Path(o["tasks"])
                try:
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise CommandError(f"--tasks: cannot read {path}: {exc}") from None
                tasks, source = service.parse_tasks_jsonl(text, name=path.name), CampaignSource.FILE
            elif o["task_ids"]:
                ids = [i.strip() for i in o["task_ids"].split(",") if i.strip()]
                tasks, source = service.world_tasks(world, ids), CampaignSource.WORLD
            else:
                tasks, source = service.world_tasks(world), CampaignSource.WORLD
            data = service.CampaignData(
                name=o["name"] or default_name(world.name, len(tasks), o["episodes"]),
                world=world,
                source=source,
                tasks=tuple(tasks),
                agent=agent,
                world_model=world_model,
                episodes_per_task=o["episodes"],
                max_steps=o["max_steps"],
                perturbations=tuple(perturbations),
                seed=o["seed"],
                concurrency=o["concurrency"],
                temperature=o["temperature"],
                max_tokens=o["max_tokens"],
            )
            with transaction.atomic():
                campaign = service.create_campaign(project, None, data)
                if o["background"]:
                    from studio.tasks import enqueue_campaign

                    enqueue_campaign(campaign)
        except service.CampaignError as exc:
            raise CommandError(str(exc)) from None
        arms = 1 + len(campaign.arms or [])
        total = plural(campaign.episodes_total, "episode")
        self.stdout.write(
            f"campaign {campaign.pk} {campaign.name!r}: {total} ({plural(len(tasks), 'task')} x "
            f"{plural(campaign.episodes_per_task, 'episode')} x {plural(arms, 'arm')}, seed "
            f"{campaign.seed})"
        )
        if o["background"]:
            self.stdout.write("queued for the workers")
            return
        self._play(campaign, o["no_progress"])

    def _play(self, campaign: Campaign, no_progress: bool) -> None:
        """Play it in this process (a thread), the bar following its row; Ctrl-C cancels."""
        from tqdm import tqdm

        from studio.jobs.campaigns import run_campaign
        from studio.services.campaigns import cancel_campaign

        def body() -> None:
            try:
                run_campaign(campaign.pk, f"shell-{uuid.uuid4().hex[:12]}")
            finally:
                connection.close()

        runner = threading.Thread(target=body, name=f"campaign-{campaign.pk}", daemon=True)
        bar = tqdm(
            total=campaign.episodes_total,
            unit="episode",
            desc=f"campaign {campaign.pk}",
            file=sys.stderr,
            disable=no_progress,
        )
        # the model clients' notes ("Retrying request in 0.47 seconds") would break into the
        # bar: they stay out while it runs; a warning or an error still shows
        quiet = {name: logging.getLogger(name) for name in QUIET_WHILE_PLAYING}
        levels = {name: logger.level for name, logger in quiet.items()}
        for logger in quiet.values():
            logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
        runner.start()
        stop = threading.Event()
        try:
            while runner.is_alive():
                runner.join(timeout=0.5)
                row = (
                    Campaign.objects.filter(pk=campaign.pk)
                    .values("episodes_done", "episodes_failed")
                    .first()
                )
                if row:
                    bar.n = row["episodes_done"]
                    bar.set_postfix(failed=row["episodes_failed"], refresh=False)
                    bar.refresh()
        except KeyboardInterrupt:
            stop.set()
            self.stderr.write("cancelling: the episodes in flight end, the ended ones are kept")
            cancel_campaign(campaign)
            runner.join()
        finally:
            for name, logger in quiet.items():
                logger.setLevel(levels[name])
            campaign.refresh_from_db()
            bar.n = campaign.episodes_done
            bar.close()
        figures = self._summary(campaign)
        failed, total = figures.overall["failed"], figures.overall["episodes"]
        if failed:
            raise CommandError(
                f"campaign {campaign.pk}: {failed} of {plural(total, 'episode')} failed"
            )
        if campaign.status == "failed":
            raise CommandError(f"campaign {campaign.pk} failed: {campaign.error}")

    # ---- the others -------------------------------------------------------------------------

    def do_list(self, o: dict[str, Any]) -> None:
        project = self._project(o["project"])
        for c in Campaign.objects.filter(project=project).order_by("-created_at"):
            self.stdout.write(
                f"{c.pk}\t{c.status}\t{c.episodes_done}/{c.episodes_total}\t"
                f"{(c.world_label or {}).get('name', '-')}\t{c.name}"
            )

    def do_show(self, o: dict[str, Any]) -> None:
        self._summary(self._campaign(o["id"]))

    def do_cancel(self, o: dict[str, Any]) -> None:
        from studio.services.campaigns import cancel_campaign

        campaign = self._campaign(o["id"])
        if campaign.is_finished:
            raise CommandError(
                f"campaign {campaign.pk} already ended: it {status_phrase(campaign.status)}"
            )
        cancel_campaign(campaign)
        campaign.refresh_from_db()
        self.stdout.write(
            f"campaign {campaign.pk}: "
            + ("cancelled" if campaign.status == "cancelled" else "asked to stop")
        )

    def do_resume(self, o: dict[str, Any]) -> None:
        from studio.services.campaigns import resume_campaign

        campaign = self._campaign(o["id"])
        with transaction.atomic():
            if not resume_campaign(campaign):
                raise CommandError(
                    f"campaign {campaign.pk} {status_phrase(campaign.status)}: a campaign resumes "
                    "once it stopped, and only when an episode of it was not played to its end"
                )
            if o["background"]:
                from studio.tasks import enqueue_campaign

                enqueue_campaign(campaign)
        campaign.refresh_from_db()
        if o["background"]:
            self.stdout.write(f"campaign {campaign.pk}: queued for the workers")
            return
        self._play(campaign, o["no_progress"])

    def _summary(self, campaign: Campaign) -> Any:
        """The campaign's figures in words; returns them (`results`)."""
        from studio.services.campaigns import results

        figures = results(campaign)
        w = self.stdout.write
        overall = figures.overall
        w(f"campaign {campaign.pk} {campaign.name!r} {status_phrase(campaign.status)}")
        if campaign.error:
            w(f"  error: {campaign.error}")
        states = [
            f"ended {overall['ended']}",
            f"failed {overall['failed']}",
            *([f"cancelled {overall['cancelled']}"] if overall["cancelled"] else []),
            *([f"playing {overall['running']}"] if overall["running"] else []),
            f"not played {overall['pending']}",
        ]
        w(f"  {plural(overall['episodes'], 'episode')}: {', '.join(states)}")
        if overall.get("replaced"):
            replaced = overall["replaced"]
            w(
                f"  {plural(replaced, 'earlier episode')} (cancelled or failed, then played "
                f"again) {'stays' if replaced == 1 else 'stay'} in the library"
            )
        w(
            f"  success {_fmt(overall['success_rate'], percent=True)} of {overall['scored']} "
            f"scored{_unscored(overall)}, mean reward {_fmt(overall['mean_reward'])}, mean "
            f"steps {_fmt(overall['mean_steps'])}"
        )
        w("  by task:")
        for row in figures.by_task:
            w(
                f"    {row['task_id']}: success {_fmt(row['success_rate'], percent=True)} of "
                f"{row['scored']} scored{_unscored(row)}, reward {_fmt(row['mean_reward'])}, "
                f"failed {row['failed']}"
                + ("" if row.get("scored_by") else " (no rubric applies: not scored)")
            )
        if len(figures.by_arm) > 1:
            w("  by perturbation:")
            for row in figures.by_arm:
                arm = f"{row['arm_name']} (no perturbation)" if row["arm"] == 0 else row["arm_name"]
                w(
                    f"    arm {arm}: success "
                    f"{_fmt(row['success_rate'], percent=True)} of {row['scored']} scored, "
                    f"reward {_fmt(row['mean_reward'])}, failed {row['failed']}"
                )
        if figures.causes:
            w(
                "  not successes (scored below 1, or an error), by end cause: "
                + ", ".join(
                    f"{CAUSE_WORDS.get(str(c['cause']), c['cause'])} x{c['count']} in arm "
                    f"{c['arm_name']}"
                    for c in figures.causes
                )
            )
        if figures.errors:
            w("  errors of the failed episodes:")
            shown = figures.errors if len(figures.errors) <= MAX_ERROR_LINES else (
                figures.errors[: MAX_ERROR_LINES - 1]
            )  # fmt: skip
            for e in shown:
                w(f"    {e['count']} x {_one_line(e['error'])}")
            rest = figures.errors[len(shown) :]
            if rest:
                w(
                    f"    and {plural(sum(e['count'] for e in rest), 'more episode')} with "
                    f"{plural(len(rest), 'other error')}"
                )
        for m in figures.models:
            cost = "cost unknown" if m["cost"] is None else f"${m['cost']:.4f}"
            w(
                f"  {m['role']} model {m['name']} ({m['model']}): {m['tokens_in']} tokens in, "
                f"{m['tokens_out']} out, {cost}"
            )
        return figures


MAX_ERROR_LINES = 5
# loggers kept at WARNING while the bar runs: the OpenAI client's retry notes and httpx's
# line per request
QUIET_WHILE_PLAYING = ("openai", "httpx", "httpcore")


def default_name(world: str, tasks: int, episodes: int) -> str:
    return f"{world}: {plural(tasks, 'task')} x {plural(episodes, 'episode')}"


STATUS_PHRASES = {
    "queued": "is queued",
    "running": "is running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "was cancelled",
}


def status_phrase(status: str) -> str:
    """ "succeeded", "was cancelled", "is running": a campaign's status in a sentence."""
    return STATUS_PHRASES.get(str(status), f"is {status}")


def _unscored(row: dict[str, Any]) -> str:
    return f" ({row['unscored']} not scored)" if row.get("unscored") else ""


def _one_line(text: str, most: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= most else flat[: most - 1] + "…"
