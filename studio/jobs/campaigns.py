"""A rollout campaign in the worker (or in `manage.py campaign run`'s process): claim the
row once, then play its slots not done, `campaign.concurrency` episodes at once in threads.

Each slot is one episode of the episode service (`studio.services.episodes`), played with the
campaign's own token, as an outside agent's would be: a reset (the slot's task and seed), then
step after step the agent model proposes (`inference.campaign_agent`) and the world answers:
a step job run in this thread (`studio.jobs.episode_steps.run_episode_step`, the path every
served world model's step takes in a worker), or, for a model in the gpu worker's process,
sent to the gpu queue and waited on. The world's submit action ends the episode as the episode
API ends it; a final answer in a world without one ends it with cause "final_answer"; an agent
or world model that fails ends it with cause "error" and the slot FAILED, saying which model
and why. Rewards are the episode's own (`studio.services.rewards`); the slot keeps its return,
success, end cause, steps and tokens, and the campaign its counters and progress as slots end.

Cancel (the campaign's `cancel_requested`, read from the row before each slot starts and
before each step, and by its monitor): episodes in flight end with
cause "cancelled" and their slots are CANCELLED; the slots that ended are kept. A campaign
whose task time is nearly up hands the rest to a new message of itself. A campaign ends
SUCCEEDED when one slot at least ended without an error (its failed slots are counted), FAILED
when every one failed ("every episode failed; the first error: ...": Resume plays them again)
or when it could not run at all."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Q
from django.utils import timezone

from inference.agent import AgentError
from inference.campaign_agent import CampaignAgent, Proposal, build_messages
from inference.rubrics import step_seed
from studio.jobs.dispatch import CAMPAIGN_TASK, EPISODE_STEP_TASK, send_again
from studio.jobs.runtime import JobMonitor, claim, finish
from studio.models import (
    Campaign,
    CampaignEpisode,
    JobStatus,
    SimulationJob,
    SlotStatus,
    Tag,
    Trajectory,
)
from studio.services import episodes

log = logging.getLogger(__name__)

BUSY_WAIT_S = (0.05, 2.0)  # a step refused for the project's steps in flight: try again
BUSY_TRIES = 200
GPU_POLL_S = (0.01, 0.5)  # a gpu step's row is read this often while it is answered


class CampaignFailed(Exception):
    """The campaign cannot run at all (its message says why)."""


class SlotFailed(Exception):
    """The slot's agent or world model failed; the message names which and why."""


def run_campaign(campaign_id: int, message_id: str = "") -> None:
    """The body of the Celery task (and of `manage.py campaign run`): claim, play, end."""
    from studio.jobs.evaluations import task_budget_s

    deadline = time.monotonic() + task_budget_s()
    campaign = claim(
        Campaign,
        campaign_id,
        message_id,
        related=("agent_endpoint", "world_endpoint", "token", "world_version", "world"),
        phase="playing",
    )
    if campaign is None:
        return
    status, error, handed_over = JobStatus.SUCCEEDED, "", False
    with JobMonitor(Campaign, campaign.pk) as monitor:
        try:
            player = Player(campaign, monitor, deadline)
            player.play()
            handed_over = player.handed_over
            if monitor.cancel_requested or player.cancelled:
                status = JobStatus.CANCELLED
        except Exception as exc:  # noqa: BLE001 - the row says what went wrong
            log.exception("campaign %s failed", campaign.pk)
            status = JobStatus.FAILED
            error = (
                str(exc)
                if isinstance(exc, CampaignFailed)
                else f"The campaign failed ({type(exc).__name__}): {exc}. Ended episodes are kept."
            )
    mine = Campaign.objects.filter(pk=campaign.pk, status=JobStatus.RUNNING, claimed_by=message_id)
    counters = slot_counters(campaign)
    if handed_over and status == JobStatus.SUCCEEDED:
        if mine.update(status=JobStatus.QUEUED, phase="queued", **counters):
            send_again(Campaign, campaign.pk, campaign.message_id, CAMPAIGN_TASK)
        return
    if not mine.exists():
        log.warning("campaign %s ended elsewhere meanwhile; this worker leaves it", campaign.pk)
        return
    if status == JobStatus.SUCCEEDED:
        first_error = every_slot_failed(campaign)
        if first_error is not None:
            status = JobStatus.FAILED
            error = f"every episode failed; the first error: {first_error}"
    phase = {"succeeded": "done", "cancelled": "cancelled"}.get(str(status), "failed")
    if status == JobStatus.SUCCEEDED:
        counters["progress"] = 1.0
    finish(Campaign, campaign.pk, status, phase=phase, error=error, **counters)


def every_slot_failed(campaign: Campaign) -> str | None:
    """The first failed slot's error when no slot of the campaign ended without an error and
    one failed; else None (the campaign succeeded: its failed slots are counted and shown)."""
    slots = CampaignEpisode.objects.filter(campaign_id=campaign.pk)
    if slots.filter(status=SlotStatus.DONE).exists():
        return None
    first = (
        slots.filter(status=SlotStatus.FAILED)
        .order_by(F("finished_at").asc(nulls_last=True), "pk")
        .first()
    )
    if first is None:
        return None
    return first.error.strip() or "(the slot recorded no error text)"


def slot_counters(campaign: Campaign) -> dict[str, Any]:
    """The campaign's counters from its slots: ended (any cause), failed, progress."""
    counts = CampaignEpisode.objects.filter(campaign_id=campaign.pk).aggregate(
        ended=Count("pk", filter=Q(status__in=[SlotStatus.DONE, SlotStatus.FAILED])),
        failed=Count("pk", filter=Q(status=SlotStatus.FAILED)),
        total=Count("pk"),
    )
    total = counts["total"] or 0
    return {
        "episodes_done": counts["ended"],
        "episodes_failed": counts["failed"],
        "episodes_total": total,
        "progress": round(counts["ended"] / total, 4) if total else 0.0,
    }


class Player:
    """Plays a claimed campaign's slots (one instance per run of the job)."""

    def __init__(self, campaign: Campaign, monitor: JobMonitor, deadline: float):
        self.campaign = campaign
        self.monitor = monitor
        self.deadline = deadline
        self.handed_over = False
        self.cancelled = False  # seen by `stopping` in the row (the monitor may not have yet)
        self.lock = threading.Lock()
        token = campaign.token
        if token is None or token.revoked_at is not None:
            raise CampaignFailed(
                "The campaign's API token was revoked or deleted: its episodes cannot be played."
            )
        self.token = token
        if campaign.world_endpoint is None:
            raise CampaignFailed(
                f"The world model {campaign.world_model_name!r} was deleted from the Models page."
            )
        self.world_endpoint = campaign.world_endpoint
        self.recorded = campaign.source == "trajectories"
        if not self.recorded:
            if campaign.world is None or campaign.world_version is None:
                name = (campaign.world_label or {}).get("name", "")
                raise CampaignFailed(
                    f"The world {name!r} (or the version the campaign plays in) was deleted."
                )
            self.spec = campaign.world_version.spec()
        self.agent = self._agent()
        self.tag, _ = Tag.objects.get_or_create(
            project_id=campaign.project_id, name=f"campaign:{campaign.pk}"
        )

    def _agent(self) -> CampaignAgent:
        from studio.services.endpoints import EndpointError, api_key_of

        campaign = self.campaign
        api_key = "EMPTY"
        if campaign.agent_endpoint is not None:
            try:
                api_key = api_key_of(campaign.agent_endpoint) or "EMPTY"
            except EndpointError as exc:
                raise CampaignFailed(f"The agent model {campaign.agent_name!r}: {exc}") from None
        from studio.services.endpoint_hosts import HostNotAllowed, check_url

        try:  # the URL the campaign was made with, whatever its endpoint became since
            check_url(campaign.agent_base_url)
        except HostNotAllowed as exc:
            raise CampaignFailed(f"The agent model {campaign.agent_name!r}: {exc}") from None
        params = campaign.agent_params or {}
        try:
            return CampaignAgent(
                base_url=campaign.agent_base_url,
                model=campaign.agent_model,
                api_key=api_key,
                temperature=float(params.get("temperature", 0.7)),
                max_tokens=int(params.get("max_tokens", 1024)),
            )
        except AgentError as exc:
            raise CampaignFailed(str(exc)) from None

    # ---- the pool ---------------------------------------------------------------------------

    def stopping(self) -> bool:
        """Whether the campaign was cancelled: read from its row here (one indexed query,
        before each slot starts and before each step), not only from the monitor's tick, so
        Cancel takes effect at the next step of every episode in flight."""
        if self.cancelled or self.monitor.cancel_requested:
            return True
        if Campaign.objects.filter(pk=self.campaign.pk, cancel_requested=True).exists():
            self.cancelled = True
        return self.cancelled

    def play(self) -> None:
        self._settle_leftovers()
        slots = list(
            CampaignEpisode.objects.filter(campaign_id=self.campaign.pk)
            .exclude(status=SlotStatus.DONE)
            .order_by("repeat", "task_index", "arm")
        )
        self.monitor.set_job(**slot_counters(self.campaign))
        with ThreadPoolExecutor(
            max_workers=max(1, self.campaign.concurrency), thread_name_prefix="campaign"
        ) as pool:
            list(pool.map(self._play_closing, slots))

    def _settle_leftovers(self) -> None:
        """Slots left running by a worker that died: their episodes end (cancelled)."""
        for slot in CampaignEpisode.objects.filter(
            campaign_id=self.campaign.pk, status=SlotStatus.RUNNING
        ):
            if slot.trajectory_id:
                self._end_cancelled(slot.trajectory_id)
            CampaignEpisode.objects.filter(pk=slot.pk).update(
                status=SlotStatus.CANCELLED, end_cause="cancelled", finished_at=timezone.now()
            )

    def _play_closing(self, slot: CampaignEpisode) -> None:
        try:
            if self.stopping():
                return
            if time.monotonic() > self.deadline:
                self.handed_over = True
                return
            self.play_slot(slot)
        except Exception:  # noqa: BLE001 - one slot's failure never stops the others
            log.exception("campaign %s: slot %s failed", self.campaign.pk, slot.pk)
        finally:
            connection.close()  # each thread's own connection

    # ---- one slot ---------------------------------------------------------------------------

    def play_slot(self, slot: CampaignEpisode) -> None:
        campaign = self.campaign
        CampaignEpisode.objects.filter(pk=slot.pk).update(
            status=SlotStatus.RUNNING,
            attempts=F("attempts") + 1,
            started_at=timezone.now(),
            finished_at=None,
            trajectory=None,
            reward=None,
            success=None,
            end_cause="",
            steps=0,
            error="",
            agent_tokens_in=0,
            agent_tokens_out=0,
            world_tokens_in=0,
            world_tokens_out=0,
        )
        task = campaign.tasks[slot.task_index]
        try:
            trajectory = self._reset(slot, task)
        except episodes.EpisodeError as exc:
            self._slot_ended(slot, None, status=SlotStatus.FAILED, error=f"reset failed: {exc}")
            return
        CampaignEpisode.objects.filter(pk=slot.pk).update(trajectory=trajectory)
        try:
            self._loop(slot, trajectory, task)
        except _Cancelled:
            self._end_cancelled(trajectory.pk)
            self._slot_ended(slot, trajectory, status=SlotStatus.CANCELLED)
        except SlotFailed as exc:
            episodes.end_with_cause(trajectory, "error", error=str(exc))
            self._slot_ended(slot, trajectory, status=SlotStatus.FAILED, error=str(exc))
        except Exception as exc:
            message = f"the episode stopped: {type(exc).__name__}: {exc}"
            episodes.end_with_cause(trajectory, "error", error=message)
            self._slot_ended(slot, trajectory, status=SlotStatus.FAILED, error=message)
            raise

    def _reset(self, slot: CampaignEpisode, task: dict[str, Any]) -> Trajectory:
        campaign = self.campaign
        max_steps = int(task.get("max_steps") or campaign.max_steps)
        max_steps = min(max_steps, campaign.max_steps)
        if self.recorded:
            source = Trajectory.objects.filter(
                pk=int(task.get("trajectory") or 0), project_id=campaign.project_id
            ).first()
            if source is None:
                raise episodes.EpisodeNotFound(f"trajectory {task.get('trajectory')} was deleted")
            trajectory, _ = episodes.reset_from_trajectory(
                self.token,
                source,
                seed=slot.seed,
                max_steps=max_steps,
                client="campaign",
                rate_limited=False,
            )
        else:
            assert campaign.world is not None
            is_world_task = self.spec.task(str(task.get("id") or "")) is not None and (
                campaign.source == "world"
            )
            spec_task: dict[str, Any] = {
                k: task[k]
                for k in (
                    "id",
                    "instruction",
                    "expected",
                    "success_criteria",
                    "max_steps",
                    "rubric",
                )
                if k in task
            }
            trajectory, _ = episodes.reset(
                self.token,
                campaign.world,
                task_id=str(task["id"]) if is_world_task else "",
                task_spec=None if is_world_task else spec_task,
                seed=slot.seed,
                max_steps=max_steps,
                client="campaign",
                rate_limited=False,
                version=campaign.world_version,
            )
        meta = dict(trajectory.metadata or {})
        meta["campaign"] = {
            "id": campaign.pk,
            "name": campaign.name,
            "slot": slot.pk,
            "task_index": slot.task_index,
            "task_id": slot.task_id,
            "arm": slot.arm,
            "arm_name": slot.arm_name,
            "repeat": slot.repeat,
        }
        Trajectory.objects.filter(pk=trajectory.pk).update(metadata=meta)
        trajectory.metadata = meta
        trajectory.tags.add(self.tag)
        return trajectory

    def _loop(self, slot: CampaignEpisode, trajectory: Trajectory, task: dict[str, Any]) -> None:
        from studio.services import rewards

        campaign = self.campaign
        rules = (campaign.arms[slot.arm - 1].get("rules") or []) if slot.arm else []
        plan = None if self.recorded else episodes.plan_for(trajectory)
        if self.recorded:
            domain, tools = trajectory.domain, list(trajectory.tools or [])
        else:
            domain, tools = self.spec.domain, list(self.spec.tools)
        submit = plan.termination.submit if plan is not None else None
        history: list[tuple[Any, str]] = []
        index = 0
        while True:
            if self.stopping():
                self._end_cancelled(trajectory.pk)
                self._slot_ended(slot, trajectory, status=SlotStatus.CANCELLED)
                return
            messages = build_messages(
                domain,
                trajectory.task_instruction,
                history,
                tools=tools,
                submit_tool=submit.tool if submit is not None else "",
            )
            try:
                proposal = self.agent.propose(
                    messages, tools=tools, seed=step_seed(slot.seed, index)
                )
            except AgentError as exc:
                raise SlotFailed(str(exc)) from None
            self._tokens(slot, agent=(proposal.tokens_in, proposal.tokens_out))
            action = self._action_of(proposal, submit)
            if action is None:  # a final answer, and the world has no submit action
                episodes.end_with_answer(trajectory, proposal.final_answer or "", plan)
                self._slot_ended(slot, trajectory, status=SlotStatus.DONE, plan=plan)
                return
            answer = rewards.submitted_answer(plan, action) if plan is not None else None
            if answer is not None:
                result = episodes.submit_step(self.token, trajectory, action, answer, plan)
            else:
                result = self._world_step(slot, trajectory, action, rules)
            history.append((action, str(result.observation.get("text") or "")))
            index += 1
            if result.done:
                if not _has_end(trajectory.pk):  # an episode with no rubric: no end written
                    episodes.end_with_cause(trajectory, "max_steps")
                self._slot_ended(slot, trajectory, status=SlotStatus.DONE, plan=plan)
                return

    def _action_of(self, proposal: Proposal, submit: Any) -> Any:
        """The action to send: the proposal's, a final answer as the world's submit action
        (when it has one), or None (a final answer in a world without one)."""
        if proposal.final:
            answer = proposal.final_answer or ""
            if submit is not None and submit.tool:
                return {"name": submit.tool, "arguments": {submit.argument or "answer": answer}}
            if submit is not None and submit.prefix:
                return f"{submit.prefix} {answer}"
            return None
        action = proposal.action
        if isinstance(action, str):
            stripped = action.strip()
            if stripped.startswith("{"):
                try:
                    parsed = json.loads(stripped)
                except json.JSONDecodeError:
                    return action
                if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
                    return {"name": parsed["name"], "arguments": parsed.get("arguments") or {}}
        return action

    def _world_step(
        self, slot: CampaignEpisode, trajectory: Trajectory, action: Any, rules: list
    ) -> episodes.StepResult:
        job = self._start_step(trajectory, action, rules)
        if job.queue == _gpu_queue():
            job = self._wait_gpu(job)
        else:
            from studio.jobs.episode_steps import run_episode_step

            run_episode_step(job.pk, job.message_id)
            job.refresh_from_db()
        self._tokens(slot, world=(job.tokens_in, job.tokens_out))
        if job.status != JobStatus.SUCCEEDED:
            if job.status == JobStatus.CANCELLED and self.stopping():
                raise _Cancelled
            raise SlotFailed(
                f"the world model {self.campaign.world_model_name!r} "
                f"({job.model or self.campaign.world_model} at {job.base_url or '-'}) did not "
                f"answer step {job.fork_index}: {job.error or job.status}"
            )
        try:
            return episodes.step_result(job)
        except episodes.EpisodeError as exc:
            raise SlotFailed(str(exc)) from None

    def _start_step(self, trajectory: Trajectory, action: Any, rules: list) -> SimulationJob:
        pause = BUSY_WAIT_S[0]
        for _ in range(BUSY_TRIES):
            try:
                return episodes.start_step(
                    self.token,
                    trajectory.pk,
                    action,
                    world_endpoint=self.world_endpoint,
                    perturbations=rules,
                )
            except episodes.EpisodeBusy:
                if self.stopping():
                    raise _Cancelled from None
                time.sleep(pause)  # the project's steps in flight are at their limit
                pause = min(BUSY_WAIT_S[1], pause * 2)
            except episodes.EpisodeError as exc:
                raise SlotFailed(f"the step could not be sent: {exc}") from None
        raise SlotFailed("the project's episode steps stayed at their limit: the step was not sent")

    def _wait_gpu(self, job: SimulationJob) -> SimulationJob:
        """A step of an in-process model: sent to the gpu queue, its row read until it ends."""
        from celery import current_app

        try:
            current_app.send_task(
                EPISODE_STEP_TASK, args=[job.pk], queue=job.queue, task_id=job.message_id
            )
        except Exception as exc:  # noqa: BLE001 - the broker is down
            raise SlotFailed(
                f"the step could not be sent to the {job.queue} queue: {exc}"
            ) from None
        from studio.services import step_watch

        def resend(job_id: int, previous: str) -> bool:
            return send_again(SimulationJob, job_id, previous, EPISODE_STEP_TASK)

        pause = GPU_POLL_S[0]
        next_look = time.monotonic()
        while True:
            looks = time.monotonic() >= next_look  # the workers' heartbeats: once a second
            if looks:
                next_look = time.monotonic() + 1.0
            try:
                # marks the step as waited for (the sweeper cancels a step nobody waits for)
                # and fails it when no worker of the gpu queue is alive
                ended = step_watch.watch(
                    job.pk,
                    unclaimed_after_s=settings.STUDIO_JOB_STALE_S,
                    look_at_workers=looks,
                    resend=resend,
                )
            except episodes.EpisodeError as exc:
                raise SlotFailed(f"the world model's step could not be answered: {exc}") from None
            if ended is not None and ended.is_finished:
                return ended
            if not SimulationJob.objects.filter(pk=job.pk).exists():
                raise SlotFailed("the step's job was deleted")
            time.sleep(pause)
            pause = min(GPU_POLL_S[1], pause * 1.5)

    # ---- bookkeeping --------------------------------------------------------------------------

    def _tokens(
        self,
        slot: CampaignEpisode,
        *,
        agent: tuple[int, int] = (0, 0),
        world: tuple[int, int] = (0, 0),
    ) -> None:
        if not any(agent) and not any(world):
            return
        fields = {
            "agent_tokens_in": F("agent_tokens_in") + agent[0],
            "agent_tokens_out": F("agent_tokens_out") + agent[1],
            "world_tokens_in": F("world_tokens_in") + world[0],
            "world_tokens_out": F("world_tokens_out") + world[1],
        }
        CampaignEpisode.objects.filter(pk=slot.pk).update(**fields)
        Campaign.objects.filter(pk=self.campaign.pk).update(**fields)

    def _end_cancelled(self, trajectory_id: int) -> None:
        from studio.services.episode_library import EndRefused, end_episode

        try:
            end_episode(trajectory_id)
        except (EndRefused, Trajectory.DoesNotExist):
            pass  # it had ended (or was deleted)

    def _slot_ended(
        self,
        slot: CampaignEpisode,
        trajectory: Trajectory | None,
        *,
        status: str,
        error: str = "",
        plan: Any = None,
    ) -> None:
        fields: dict[str, Any] = {
            "status": status,
            "error": error[:5000],
            "finished_at": timezone.now(),
        }
        if trajectory is not None:
            row = Trajectory.objects.only("metadata", "step_count").get(pk=trajectory.pk)
            episode = (row.metadata or {}).get("episode") or {}
            found = episode.get("end")
            end: dict[str, Any] = found if isinstance(found, dict) else {}
            fields.update(
                steps=row.step_count,
                end_cause=str(end.get("cause") or ("cancelled" if status == "cancelled" else "")),
                reward=episode.get("return") if status == SlotStatus.DONE else None,
                success=success_of(plan, end) if status == SlotStatus.DONE else None,
            )
        elif status == SlotStatus.FAILED:
            fields["end_cause"] = "error"
        CampaignEpisode.objects.filter(pk=slot.pk).update(**fields)
        with self.lock:
            self.monitor.set_job(**slot_counters(self.campaign))


class _Cancelled(SlotFailed):
    """The campaign was cancelled while this slot's step waited."""


def _has_end(trajectory_id: int) -> bool:
    meta = Trajectory.objects.filter(pk=trajectory_id).values_list("metadata", flat=True).first()
    return isinstance(((meta or {}).get("episode") or {}).get("end"), dict)


def _gpu_queue() -> str:
    from studio.queues import queue_name

    return queue_name("gpu")


def success_of(plan: Any, end: dict[str, Any]) -> bool | None:
    """The world page's rule (`studio.services.world_episodes`), so that a campaign and the
    world's page never disagree on an episode: its episode rubric's score is 1 -> True, below
    -> False; None when it has no episode rubric, no check was scored, or it ended in an
    error."""
    from studio.services.world_episodes import episode_score, is_success

    if plan is None or not end or end.get("cause") == "error":
        return None
    return is_success(episode_score({"end": end}, tuple(plan.rubric.episode)))
