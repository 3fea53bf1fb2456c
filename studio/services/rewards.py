"""Rewards and ends of episodes: a world's rubric and termination (`inference.rubrics`)
applied to an episode's steps. Plain synchronous functions, no HTTP framework; the step path
(`studio.serving.steps`, `studio.jobs.episode_steps`) calls them in this order:

    plan = plan_of(spec, trajectory.metadata["episode"])       # once per step (cheap)
    answer = submitted_answer(plan, action)                    # before asking any model
    if answer is not None:                                     # the submit action: no model
        verdict = verdict_of(plan, index, "", None, final_answer=answer)
    else:
        ...the world model answers: observation text, parsed.state...
        verdict = verdict_of(plan, index, observation_text, parsed.state)
    if verdict.done:
        verdict = finish(project_id, trajectory_id, plan, verdict, final_answer=answer,
                         last_action=action_text)              # BEFORE the step is written
    elif verdict.reward is not None:
        add_return(trajectory_id, verdict.reward)
    ...write the step with meta.update(verdict.step_meta); answer with
    observation["metadata"] = verdict.observation_metadata, reward=verdict.reward,
    done=verdict.done...

`verdict_of` asks no model (the step rubric's checks are text and state predicates); only
`finish` may ask one (a judge check of the episode rubric, through a judge model of the
project's Models page), and it writes the episode's end to `metadata["episode"]`: "end"
({"cause", "step", "reward", "total", "breakdown"}, written once), "status" ("done") and
"return" (the sum of the episode's step rewards).

How the reward is made: a step's reward is the step rubric's score of its observation (None
when the world has no step checks); at the episode's end it is that plus the episode
rubric's score (None when neither has checks). A submit step has no observation of the world
model, so only the episode rubric scores it. A judge that does not answer leaves its check
out of the weighted mean (its score is None in the breakdown, the reason in
`end["errors"]`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from inference import rubrics
from inference.rubrics import Check, Rubric, StateKey, Termination
from inference.worlds import WorldSpec

DEFAULT_MAX_STEPS = 100  # as studio.services.episodes
JUDGE_TIMEOUT_S = 120.0  # one request to the judge model; an agent waits on it at done
JUDGE_ATTEMPTS = 2
JUDGE_MAX_TOKENS = 4096  # the judge thinks before it scores


@dataclass(frozen=True)
class EpisodePlan:
    """What scores and ends one episode: its task (from the world's tasks, or typed at
    reset), the rubric that applies (the task's, else the world's), the termination, the
    seed and the step limit."""

    world: str
    task_id: str  # "" for a task typed at reset, or the default task
    success_criteria: str
    expected: str
    rubric: Rubric
    termination: Termination
    state_keys: tuple[StateKey, ...]
    seed: int
    max_steps: int
    instruction: str = ""

    @property
    def rewarded(self) -> bool:
        """Whether any reward can come of this episode."""
        return bool(self.rubric)


@dataclass(frozen=True)
class StepVerdict:
    """What the rubric and the termination say of one step. `step_meta` goes into the
    step's Step.meta; `observation_metadata` is the agent's observation["metadata"]."""

    reward: float | None
    breakdown: dict[str, float | None]
    done: bool
    cause: str | None  # "terminal" | "submit" | "max_steps" | "cancelled" | None
    step_meta: dict[str, Any]
    observation_metadata: dict[str, Any]
    index: int = 0
    seed: int = 0  # the step's seed (rubrics.step_seed)
    observation_text: str = ""
    state: dict[str, Any] | None = None
    final_answer: str | None = None
    parts: dict[str, float] = field(default_factory=dict)  # {"step": x, "episode": y}
    end: dict[str, Any] | None = None  # the episode's end as written, once finished


def plan_of(spec: WorldSpec, episode: dict[str, Any], *, instruction: str = "") -> EpisodePlan:
    """The plan of an episode from its world (at the episode's version) and its record
    `metadata["episode"]` (task_id, seed, max_steps). A task id the world no longer has
    plays as a typed task (the version an episode plays in never changes, so this is for
    records made before tasks existed). The rubric holds only the checks that apply to the
    task (`rubrics.applicable`): a task typed at reset has no expected answer and no success
    criteria, so a check that needs them is left out, not scored 0 (no check left: no
    reward, None)."""
    task = spec.task(str(episode.get("task_id") or ""))
    recorded = episode.get("task_spec")
    if isinstance(recorded, dict):  # a task of the reset's own (a campaign's typed task)
        task = rubrics.read_tasks([recorded], "task_spec")[0]
    rubric = task.rubric if task is not None and task.rubric is not None else spec.rubric
    success_criteria = task.success_criteria if task is not None else ""
    expected = task.expected if task is not None else ""
    seed = episode.get("seed")
    return EpisodePlan(
        world=spec.name,
        task_id=task.id if task is not None else "",
        success_criteria=success_criteria,
        expected=expected,
        rubric=rubrics.applicable(rubric, expected=expected, success_criteria=success_criteria),
        termination=spec.termination,
        state_keys=spec.state_keys,
        seed=int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else 0,
        max_steps=int(episode.get("max_steps") or DEFAULT_MAX_STEPS),
        instruction=task.instruction if task is not None else instruction,
    )


def submitted_answer(plan: EpisodePlan, action: Any) -> str | None:
    """The agent's final answer when `action` (as the agent sent it: a tool call, a text
    action, or its recorded text) is the world's submit action; else None."""
    return rubrics.submitted(plan.termination.submit, action)


def _metas(verdict: StepVerdict) -> tuple[dict[str, Any], dict[str, Any]]:
    step_meta: dict[str, Any] = {
        "seed": verdict.seed,
        "reward": verdict.reward,
        "rubric": dict(verdict.breakdown),
        "end_cause": verdict.cause,
    }
    observation_metadata: dict[str, Any] = {
        "seed": verdict.seed,
        "rubric": dict(verdict.breakdown),
        "reward_parts": dict(verdict.parts),
        "end_cause": verdict.cause,
    }
    if verdict.state is not None:
        # the grader's view, recorded on the step, never sent to the agent: it would read
        # the world's hidden state (and a reward hacker would aim at it)
        step_meta["state"] = verdict.state
    if verdict.final_answer is not None:
        step_meta.update(submit=True, final_answer=verdict.final_answer)
    if verdict.end is not None:
        observation_metadata["end"] = verdict.end
        if verdict.end.get("errors"):
            step_meta["rubric_errors"] = verdict.end["errors"]
    return step_meta, observation_metadata


def _remade(verdict: StepVerdict, **changes) -> StepVerdict:
    made = dataclasses.replace(verdict, **changes)
    step_meta, observation_metadata = _metas(made)
    return dataclasses.replace(made, step_meta=step_meta, observation_metadata=observation_metadata)


def verdict_of(
    plan: EpisodePlan,
    index: int,
    observation_text: str,
    state: dict[str, Any] | None,
    *,
    final_answer: str | None = None,
) -> StepVerdict:
    """The step rubric's score of step `index` (0-based) and whether the episode ends
    there, asking no model. `state`: what the world model reported (None: nothing);
    `final_answer`: the submit action's answer (`submitted_answer`), which ends the episode
    with cause "submit" (no observation to score: the step rubric does not apply). Else
    the episode ends when a terminal check passes ("terminal") or at its last step
    ("max_steps"). At an end, `finish` adds the episode rubric."""
    state = dict(state) if isinstance(state, dict) else None
    breakdown: dict[str, float | None] = {}
    parts: dict[str, float] = {}
    step_reward = None
    if final_answer is None and plan.rubric.step:
        step_reward, breakdown = rubrics.score_checks(
            plan.rubric.step, observation=observation_text, state=state, expected=plan.expected
        )
        if step_reward is not None:
            parts["step"] = step_reward
    cause = None
    if final_answer is not None:
        cause = "submit"
    elif (
        rubrics.terminal_check(
            plan.termination, observation=observation_text, state=state, expected=plan.expected
        )
        is not None
    ):
        cause = "terminal"
    elif index + 1 >= plan.max_steps:
        cause = "max_steps"
    return _remade(
        StepVerdict(
            reward=step_reward,
            breakdown=breakdown,
            done=cause is not None,
            cause=cause,
            step_meta={},
            observation_metadata={},
            index=index,
            seed=rubrics.step_seed(plan.seed, index),
            observation_text=observation_text,
            state=state,
            final_answer=final_answer,
            parts=parts,
        )
    )


def cancelled_verdict(plan: EpisodePlan, index: int) -> StepVerdict:
    """The verdict of an episode ended by cancelling it at step `index` (the number of
    steps taken): `finish` records it with cause "cancelled" and no reward."""
    return _remade(
        StepVerdict(
            reward=None,
            breakdown={},
            done=True,
            cause="cancelled",
            step_meta={},
            observation_metadata={},
            index=index,
            seed=rubrics.step_seed(plan.seed, index),
        )
    )


# ---- the end of an episode ------------------------------------------------------------------


def _earlier_steps(trajectory_id: int, branch_id: Any, before: int) -> list[Any]:
    from studio.models import Branch, Step

    if not branch_id:
        branch_id = (
            Branch.objects.filter(trajectory_id=trajectory_id, parent__isnull=True)
            .values_list("pk", flat=True)
            .first()
        )
    return list(
        Step.objects.filter(branch_id=branch_id, index__lt=before)
        .order_by("index")
        .only("index", "action", "observation", "meta")
    )


def _last_state(steps: list[Any]) -> dict[str, Any] | None:
    for step in reversed(steps):
        reported = (step.meta or {}).get("state")
        if isinstance(reported, dict):
            return reported
    return None


def _judge_endpoint(project_id: int, name: str):
    from studio.models import EndpointRole, ModelEndpoint

    judges = ModelEndpoint.objects.filter(
        project_id=project_id, role=EndpointRole.JUDGE, kind="openai"
    )
    if name:
        found = judges.filter(name=name).first()
        if found is None:
            listed = ", ".join(judges.values_list("name", flat=True)) or "none"
            raise LookupError(
                f"the project has no judge model named {name!r} on its Models page (its judge "
                f"models: {listed})"
            )
        return found
    found = judges.order_by("-is_default", "name").first()
    if found is None:
        raise LookupError(
            "the project has no judge model: an admin adds one (role: judge model) on the "
            "project's Models page"
        )
    return found


def judge_score(
    project_id: int,
    check: Check,
    plan: EpisodePlan,
    *,
    steps: list[tuple[str, str]],
    final_answer: str | None,
) -> tuple[float | None, str | None]:
    """Ask the judge model of `check` (by name, else the project's default judge) to score
    the episode against the criteria: (score in [0, 1], None), or (None, why not)."""
    from inference.judge import Judge
    from studio.services.endpoints import EndpointError, api_key_of

    try:
        endpoint = _judge_endpoint(project_id, check.endpoint)
        api_key = api_key_of(endpoint)
    except (LookupError, EndpointError) as exc:
        return None, str(exc)
    judge = Judge(
        base_url=endpoint.base_url,
        model=endpoint.model,
        api_key=api_key or "EMPTY",
        # a reward should not be a draw: the judge answers greedily unless its model says
        temperature=0.0 if endpoint.temperature is None else float(endpoint.temperature),
        max_tokens=endpoint.max_tokens or JUDGE_MAX_TOKENS,
        attempts=JUDGE_ATTEMPTS,
        timeout=JUDGE_TIMEOUT_S,
        backoff_s=0.5,
    )
    messages = rubrics.judge_messages(
        task=plan.instruction,
        # plan_of keeps no judge check that has neither criteria nor success criteria
        criteria=check.criteria or plan.success_criteria,
        steps=steps,
        final_answer=final_answer,
    )
    asked = judge.ask(messages, rubrics.parse_judge_score)
    if asked.value is None:
        return None, f"judge model {endpoint.name!r} gave no score: " + "; ".join(asked.errors)
    return float(asked.value), None


def finish(
    project_id: int,
    trajectory_id: int,
    plan: EpisodePlan,
    verdict: StepVerdict,
    *,
    final_answer: str | None = None,
    last_action: str | None = None,
) -> StepVerdict:
    """End the episode at `verdict` (done): score the episode rubric (its judge checks ask
    the project's judge models) and write `metadata["episode"]` "end", "status" ("done", or
    "cancelled" for that cause) and "return". Returns the verdict with the episode part
    added to its reward, breakdown and metas. Call it before the last step is written (its
    metas go into the step); the earlier steps are read from the episode's branch.
    `last_action`: the text of this step's action (for the judge's view of the episode).
    An episode already ended keeps its end: the recorded one is returned."""
    from studio.models import Trajectory

    if not verdict.done:
        raise ValueError("finish ends an episode: the verdict says it goes on")
    answer = final_answer if final_answer is not None else verdict.final_answer
    row = Trajectory.objects.filter(pk=trajectory_id).only("metadata", "task_instruction").first()
    if row is None:
        raise LookupError(f"trajectory {trajectory_id} does not exist")
    episode_meta = (row.metadata or {}).get("episode") or {}
    instruction = plan.instruction or row.task_instruction
    if instruction != plan.instruction:
        plan = dataclasses.replace(plan, instruction=instruction)
    checks = plan.rubric.episode if verdict.cause != "cancelled" else ()
    scored: list[tuple[Check, float | None]] = []
    errors: dict[str, str] = {}
    if checks:
        earlier = _earlier_steps(trajectory_id, episode_meta.get("branch"), verdict.index)
        submit = verdict.cause in ("submit", "final_answer")  # an answer, no observation
        # the world model's last word: at a submit step (no model call), the step before
        observation = verdict.observation_text
        if submit:
            observation = earlier[-1].observation if earlier else ""
        state = verdict.state if verdict.state is not None else _last_state(earlier)
        transcript = [(s.action, s.observation) for s in earlier]
        if not submit:
            transcript.append((last_action or "(the agent's last action)", observation))
        for check in checks:
            if check.kind == "judge":
                score, error = judge_score(
                    project_id, check, plan, steps=transcript, final_answer=answer
                )
                if error is not None:
                    errors[check.name] = error
                scored.append((check, score))
            else:
                score = rubrics.score_check(
                    check,
                    observation=observation,
                    final_answer=answer,
                    state=state,
                    expected=plan.expected,
                )
                scored.append((check, score))
    episode_score, episode_breakdown = rubrics.weighted(scored)
    parts = dict(verdict.parts)
    if episode_score is not None:
        parts["episode"] = episode_score
    reward = sum(parts.values()) if parts else None
    breakdown = {**verdict.breakdown, **episode_breakdown}
    end, written = _write_end(
        trajectory_id,
        cause=verdict.cause or "max_steps",
        step=verdict.index,
        reward=reward,
        breakdown=breakdown,
        errors=errors,
    )
    if not written:  # ended before (a cancel, a finish of this step already): that end stands
        return _remade(verdict, end=end)
    return _remade(verdict, reward=reward, breakdown=breakdown, parts=parts, end=end)


def _write_end(
    trajectory_id: int,
    *,
    cause: str,
    step: int,
    reward: float | None,
    breakdown: dict[str, float | None],
    errors: dict[str, str],
) -> tuple[dict[str, Any], bool]:
    """The episode's end, and whether this call wrote it (False: it had ended)."""
    from studio.models import Trajectory

    with transaction.atomic():
        row = Trajectory.objects.select_for_update().only("metadata").get(pk=trajectory_id)
        meta = dict(row.metadata or {})
        episode = dict(meta.get("episode") or {})
        if isinstance(episode.get("end"), dict):
            return episode["end"], False
        total = episode.get("return")
        if reward is not None:
            total = (total or 0.0) + reward
        end: dict[str, Any] = {
            "cause": cause,
            "step": step,
            "reward": reward,
            "total": total,
            "breakdown": breakdown,
        }
        if errors:
            end["errors"] = errors
        episode.update(end=end, status="cancelled" if cause == "cancelled" else "done")
        episode["return"] = total
        meta["episode"] = episode
        Trajectory.objects.filter(pk=trajectory_id).update(metadata=meta)
    return end, True


def add_return(trajectory_id: int, reward: float) -> float:
    """Add a rewarded step's reward (not the last: `finish` adds that) to the episode's
    running `return`; the new return."""
    from studio.models import Trajectory

    with transaction.atomic():
        row = Trajectory.objects.select_for_update().only("metadata").get(pk=trajectory_id)
        meta = dict(row.metadata or {})
        episode = dict(meta.get("episode") or {})
        total = (episode.get("return") or 0.0) + float(reward)
        episode["return"] = total
        meta["episode"] = episode
        Trajectory.objects.filter(pk=trajectory_id).update(metadata=meta)
    return total
