"""From studio rows to world-model inputs: the turns of a branch, the system prompt, the chat
messages, and the backend a simulation job asks (with its retrieval corpus)."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings

from inference.types import Turn
from studio.models import Provenance, SimulationJob, Step, Trajectory

# The retrieval baseline searches at most this many recorded steps of the domain.
RETRIEVAL_CORPUS_LIMIT = 20000


def system_prompt_for(trajectory: Trajectory) -> str:
    """The stored system prompt (AgentWorldBench's `system_str`, kept verbatim), else the
    project's template for the domain and the trajectory's tools."""
    if trajectory.system_prompt:
        return trajectory.system_prompt
    from inference.prompts import build_system_prompt

    return build_system_prompt(trajectory.domain, trajectory.tools or None)


def step_turn(step: Step) -> Turn:
    """A finished step as history. AgentWorldBench imports carry the turn prompt and the
    ground-truth response verbatim so rebuilt prompts equal the file's byte for byte."""
    return Turn(
        action=step.action,
        observation=step.observation,
        state=step.state,
        raw_prompt=step.raw_prompt,
        raw_response=(step.meta or {}).get("raw_response", "") or "",
    )


def history_turns(steps: Iterable[Step], fork_index: int) -> list[Turn]:
    return [step_turn(s) for s in steps if s.index < fork_index]


def prompt_with_action(raw_prompt: str, recorded_action: str, action: str) -> str:
    """The verbatim turn prompt with its action swapped for an edited one. When the recorded
    action does not occur exactly once we cannot edit safely: return "" so the prompt is
    composed from the fields instead."""
    if not raw_prompt:
        return ""
    if action == recorded_action:
        return raw_prompt
    if recorded_action and raw_prompt.count(recorded_action) == 1:
        return raw_prompt.replace(recorded_action, action)
    return ""


def current_turn(recorded: Step | None, action: str) -> Turn:
    """The turn whose observation we ask for: `action`, in the recorded step's context."""
    if recorded is None:
        return Turn(action=action)
    return Turn(
        action=action,
        state=recorded.state,
        raw_prompt=prompt_with_action(recorded.raw_prompt, recorded.action, action),
    )


def build_messages_for(trajectory: Trajectory, history: list[Turn], current: Turn) -> list[dict]:
    from inference.prompts import build_messages

    return build_messages(
        system_prompt_for(trajectory), history, current, trajectory.task_instruction or ""
    )


def retrieval_corpus(trajectory: Trajectory) -> list[tuple[str, str, str]]:
    """Recorded (domain, action, observation) of the same domain in the same project."""
    rows = (
        Step.objects.filter(
            branch__trajectory__project_id=trajectory.project_id,
            branch__trajectory__domain=trajectory.domain,
            branch__parent__isnull=True,
            provenance=Provenance.RECORDED,
        )
        .exclude(observation="")
        .order_by("id")
        .values_list("action", "observation")[:RETRIEVAL_CORPUS_LIMIT]
    )
    return [(trajectory.domain, action, observation) for action, observation in rows]


def default_model(backend: str) -> str:
    if backend == "openai":
        return settings.WORLD_MODEL_NAME
    if backend == "hf":
        return settings.WORLD_MODEL_PATH or settings.WORLD_MODEL_NAME
    return ""


def make_job_backend(job: SimulationJob):
    from inference.backends import make_backend

    corpus = retrieval_corpus(job.trajectory) if job.backend == "retrieval" else None
    return make_backend(
        job.backend,
        model=job.model,
        base_url=job.base_url,
        api_key=settings.WORLD_MODEL_API_KEY,
        corpus=corpus,
        concurrency=settings.WORLD_MODEL_CONCURRENCY,
    )
