"""Enqueue a simulation job from the command line and, with --wait, print its predictions."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.simulation import limits
from studio.models import Branch, JobStatus, SimulationJob, Trajectory


class Command(BaseCommand):
    help = "Simulate the observation of step K of a trajectory (N futures) with the world model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trajectory", type=int, required=True, help="trajectory id")
        parser.add_argument("--branch", type=int, help="branch id (default: the recorded branch)")
        parser.add_argument("--step", type=int, required=True, help="0-based step index K")
        parser.add_argument("--action", default=None, help="action at step K (default: recorded)")
        parser.add_argument("--action-format", choices=list(limits.ACTION_FORMATS), default="auto")
        parser.add_argument(
            "--n", type=int, default=1, help=f"number of futures (1-{limits.MAX_FUTURES})"
        )
        parser.add_argument("--mode", choices=list(limits.MODES), default="next")
        parser.add_argument(
            "--max-steps",
            type=int,
            default=None,
            help=f"rollout: steps the agent takes (1-{limits.MAX_ROLLOUT_STEPS})",
        )
        parser.add_argument(
            "--endpoint",
            default="",
            help="world model: the name of one of the project's model endpoints "
            "(default: the project's default world model)",
        )
        parser.add_argument(
            "--agent-endpoint",
            default="",
            help="rollout: the name of the project's agent model endpoint (default: its first)",
        )
        parser.add_argument(
            "--backend",
            choices=list(limits.BACKENDS),
            default=None,
            help="or a world model given here, without an endpoint (key: WORLD_MODEL_API_KEY, "
            "sent only when --base-url is under WORLD_MODEL_BASE_URL)",
        )
        parser.add_argument("--model", default="")
        parser.add_argument("--base-url", default="")
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--top-p", type=float)
        parser.add_argument("--max-tokens", type=int)
        parser.add_argument("--seed", type=int)
        parser.add_argument(
            "--perturbation",
            action="append",
            default=[],
            metavar="SPEC",
            help="perturb every simulated step: a perturbation of the project's library by "
            "name, or a kind with parameters such as truncated:chars=40 or "
            "tool_error:message=Quota exceeded,code=429 (repeatable: the first that applies "
            "wins)",
        )
        parser.add_argument(
            "--perturbation-mode",
            choices=["prompted", "deterministic"],
            default=None,
            help="how --perturbation applies (default: the library entry's, or deterministic "
            "where the kind has a transform)",
        )
        parser.add_argument(
            "--world",
            default="",
            help="simulate in a fictional world of the project (its latest version): its "
            "prompt and tools replace the trajectory's",
        )
        parser.add_argument("--wait", action="store_true", help="wait and print the results")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to --wait")

    def handle(self, *args, **options):
        from studio.services.simulation import InvalidRequest, build_request, start_simulation
        from studio.tasks import enqueue_simulation

        self.verbosity = options["verbosity"]
        steps = options["max_steps"]
        if steps is not None and not 1 <= steps <= limits.MAX_ROLLOUT_STEPS:
            # refused in every mode, as the fork form does (only a rollout uses it)
            raise CommandError(
                f"--max-steps {steps}: a rollout takes 1 to {limits.MAX_ROLLOUT_STEPS} steps"
            )
        if steps is not None and options["mode"] != "rollout":
            raise CommandError(
                f"--max-steps is for --mode rollout only (this is --mode {options['mode']})"
            )
        trajectory = Trajectory.objects.filter(pk=options["trajectory"]).first()
        if trajectory is None:
            raise CommandError(f"no trajectory with id {options['trajectory']}")
        if options["branch"]:
            branch = Branch.objects.filter(pk=options["branch"], trajectory=trajectory).first()
            if branch is None:
                raise CommandError(
                    f"trajectory {trajectory.pk} has no branch with id {options['branch']}"
                )
        else:
            branch = trajectory.root_branch
        data = {
            "fork_index": options["step"],
            "action": options["action"],
            "action_format": options["action_format"],
            "mode": options["mode"],
            "n": options["n"],
            "max_steps": options["max_steps"] if options["mode"] == "rollout" else None,
            "temperature": options["temperature"],
            "top_p": options["top_p"],
            "max_tokens": options["max_tokens"],
            "seed": options["seed"],
            "backend": options["backend"],
            "model": options["model"],
            "base_url": options["base_url"],
        }
        world, agent = self.endpoints(trajectory.project, options, data)
        if options["perturbation"]:
            data["perturbations"] = self.perturbations(trajectory.project, options)
        flags = {
            "fork_index": "--step",
            "n": "--n",
            "agent_model": "--agent-endpoint",
            "agent_base_url": "--agent-endpoint",
            "perturbations": "--perturbation",
            "history": "--step",  # the installation's limits (studio.services.job_limits)
            "jobs": "",  # the project's jobs at once: no flag of this command
        }
        try:
            request = build_request(branch, data)
            job = start_simulation(
                user=None,
                branch=branch,
                request=request,
                world_endpoint=world,
                agent_endpoint=agent,
                world_version=self.world_version(trajectory, options["world"]),
            )
        except InvalidRequest as exc:
            raise CommandError(
                "; ".join(
                    f"{flag}: {message}" if flag else message
                    for name, messages in exc.errors.items()
                    for flag in [flags.get(name, "--" + name.replace("_", "-"))]
                    for message in messages
                )
            ) from None
        enqueue_simulation(job)
        self.stdout.write(
            f"job {job.pk} queued on {job.queue}: {job.n} future(s) of trajectory "
            f"{trajectory.pk} at step {job.fork_index} ({job.mode}, "
            + (f"model {world.name!r}, " if world else "")
            + f"backend {job.backend})"
        )
        if not options["wait"]:
            return
        job = self.wait(job, options["timeout"])
        self.print_results(job)
        if job.status != JobStatus.SUCCEEDED:
            raise CommandError(f"job {job.pk} {job.status}: {job.error or 'no details'}")

    def endpoints(self, project, options, data):
        """The endpoints named (or the project's defaults), folded into the request input.
        `--backend` instead of `--endpoint` runs a world model given on the command line."""
        from studio.models import EndpointRole
        from studio.services.endpoints import (
            EndpointError,
            agent_input,
            default_endpoint,
            get_endpoint,
            sampling_defaults,
            world_input,
        )

        if options["endpoint"] and options["backend"]:
            raise CommandError("give --endpoint or --backend/--model/--base-url, not both")
        try:
            world = None
            if options["endpoint"]:
                world = get_endpoint(project, options["endpoint"], EndpointRole.WORLD)
            elif not options["backend"]:
                world = default_endpoint(project, EndpointRole.WORLD)
            agent = None
            if options["agent_endpoint"]:
                agent = get_endpoint(project, options["agent_endpoint"], EndpointRole.AGENT)
            elif data["mode"] == "rollout":
                agent = default_endpoint(project, EndpointRole.AGENT)
        except EndpointError as exc:
            raise CommandError(str(exc)) from None
        if world is not None:
            data.update(world_input(world))
            # the endpoint's default sampling, where no flag was given (as the form does)
            for key, value in sampling_defaults(world).items():
                if data.get(key) is None:
                    data[key] = value
        if agent is not None:
            data.update(agent_input(agent))
        return world, agent

    def world_version(self, trajectory, name: str):
        from studio.models import World

        if not name:
            return None
        world = World.objects.filter(project=trajectory.project, name=name).first()
        if world is None or world.latest is None:
            names = World.objects.filter(project=trajectory.project).values_list("name", flat=True)
            raise CommandError(
                f"--world: project {trajectory.project.name!r} has no world named {name!r} "
                f"(worlds: {', '.join(names) or 'none'})"
            )
        if world.domain != trajectory.domain:
            raise CommandError(
                f"--world: {name!r} is a {world.domain} world; trajectory {trajectory.pk} is "
                f"{trajectory.domain}"
            )
        return world.latest

    def perturbations(self, project, options) -> list[dict]:
        """Each --perturbation as a rule over every step: a library entry by name, else a
        spec (`inference.perturbations.parse_spec`)."""
        from inference import perturbations as perturbing
        from studio.models import Perturbation
        from studio.services.perturbations import rule_input

        mode = options["perturbation_mode"]
        rules = []
        for spec in options["perturbation"]:
            entry = Perturbation.objects.filter(project=project, name=spec).first()
            if entry is not None:
                rules.append(rule_input(entry, mode=mode or ""))
                continue
            try:
                p = perturbing.parse_spec(spec, mode)
            except perturbing.PerturbationError as exc:
                raise CommandError(
                    f"--perturbation: {exc}; or name one of project {project.name!r}'s "
                    "perturbations"
                ) from None
            rules.append({**p.as_dict(), "first_step": None, "last_step": None})
        return rules

    def wait(self, job: SimulationJob, timeout: float) -> SimulationJob:
        """Poll the job until it ends. Says at once (from the workers' heartbeat rows) when
        no worker consumes its queue, and what to run, then goes on waiting: a worker that
        starts later takes the job, and that is said too; says when the worker running it
        went away."""
        from studio.services import workers
        from studio.services.jobs import silent_for_s

        deadline = time.monotonic() + timeout
        last = None
        warned = False
        missing = False  # said that no worker consumes the queue
        gone_said = False
        while time.monotonic() < deadline:
            job.refresh_from_db()
            state = (job.status, job.phase)
            if state != last and self.verbosity > 1:
                self.stderr.write(f"  {job.status} · {job.phase} · {job.progress:.0%}")
            last = state
            if job.is_finished:
                return job
            if job.status == JobStatus.QUEUED:
                consumers = workers.queue_consumers(job.queue)
                if not consumers and not missing:
                    missing = True
                    if self.verbosity > 0:
                        self.stderr.write(
                            f"  {workers.describe_start(job.queue)}\n  waiting for one "
                            f"(up to {timeout:.0f} s, --timeout); the job stays queued if "
                            "you stop here"
                        )
                elif consumers and missing:
                    missing = False
                    if self.verbosity > 0:
                        names = ", ".join(w.name for w in consumers)
                        self.stderr.write(f"  worker {names} now consumes queue {job.queue}")
            elif job.status == JobStatus.RUNNING and not gone_said:
                worker = workers.worker_state(job)
                if worker is not None and not worker.alive and self.verbosity > 0:
                    gone_said = warned = True
                    self.stderr.write(
                        f"  the worker running job {job.pk} ({worker.name}) stopped answering "
                        f"{worker.silent_s:.0f} s ago; a running worker will mark the job failed"
                    )
            silent = silent_for_s(job)
            if silent is not None and not warned and self.verbosity > 0:
                warned = True
                self.stderr.write(
                    f"  no heartbeat from the worker for {silent:.0f} s; a running worker "
                    "will mark the job failed"
                )
            time.sleep(0.5)
        if job.status != JobStatus.QUEUED:
            why = "it goes on in the worker"
        elif workers.queue_consumers(job.queue):
            why = f"it waits in queue {job.queue} for a free worker"
        else:
            why = f"no worker is consuming queue {job.queue}"
        raise CommandError(f"job {job.pk} still {job.status} after {timeout:.0f} s; {why}")

    def print_results(self, job: SimulationJob) -> None:
        if job.status == JobStatus.SUCCEEDED:
            self.stdout.write(
                f"job {job.pk} succeeded: tokens in {job.tokens_in}, out {job.tokens_out}, "
                f"queue wait {job.queue_wait_s or 0:.2f} s, prefill {job.prefill_s or 0:.2f} s, "
                f"decode {job.decode_s or 0:.2f} s"
                + (f", {job.tokens_per_s:.1f} tokens/s" if job.tokens_per_s else "")
            )
        for branch in job.branches.order_by("sample_index"):
            self.stdout.write(f"--- {branch.name} [branch {branch.pk}, {branch.status}]")
            if branch.error:
                self.stdout.write(f"error: {branch.error}")
            for step in branch.steps.order_by("index"):
                flag = "" if step.parse_status in ("", "well_formed") else f" ({step.parse_status})"
                perturbed = (step.meta or {}).get("perturbation")
                if isinstance(perturbed, dict):
                    effect = "" if perturbed.get("changed", True) else ", no effect"
                    flag += (
                        f" [perturbed: {perturbed.get('label')} ({perturbed.get('mode')}{effect})]"
                    )
                self.stdout.write(f"step {step.index} action: {step.action}")
                self.stdout.write(f"step {step.index} predicted observation{flag}:")
                self.stdout.write(step.observation)
