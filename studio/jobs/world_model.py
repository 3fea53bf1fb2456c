"""What a simulation job and an episode's (or the playground's) appended step share in the
worker: the world model's backend, the branch's history as turns, the rows of simulated
steps and the messages that name the studio's settings. Its own module, so that neither job
body imports the other (`studio.jobs.simulation` and `studio.jobs.episode_steps`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings

from inference.simulation.request import SimulationRequest
from inference.simulation.runner import TimeLimitReached
from inference.simulation.sink import SimulatedStep
from inference.types import Backend, Turn
from studio.models import Branch, Provenance, SimulationJob, Step, Trajectory
from studio.services.endpoints import EndpointError
from studio.services.simulation import turn_of

# The retrieval baseline searches at most this many recorded steps of the domain.
RETRIEVAL_CORPUS_LIMIT = 20000
# Recorded actions longer than this are indexed by their first characters only.
RETRIEVAL_ACTION_CHARS = 2000
# Steps read per query while streaming the history.
HISTORY_CHUNK = 200


def storable(text: str) -> str:
    """Model text as the database can hold it: byte-level tokenizers can decode a NUL byte,
    which PostgreSQL rejects in text and JSON columns; show it as U+FFFD instead."""
    return text.replace("\x00", "\ufffd")


def _storable_json(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {k: _storable_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable_json(v) for v in value]
    return value


# ---- from rows to the runner's inputs and back ------------------------------------------


def history_stream(branch: Branch, fork_index: int) -> Iterator[Turn]:
    """The branch's steps before `fork_index` as turns, read in chunks: no more than one
    chunk of rows is alive at a time."""
    steps = branch.all_steps().filter(index__lt=fork_index)
    fields = ("index", "action", "observation", "state", "raw_prompt", "meta")
    start = 0
    while True:
        chunk = list(steps.filter(index__gte=start).only(*fields)[:HISTORY_CHUNK])
        if not chunk:
            return
        for step in chunk:
            yield turn_of(step)
        if len(chunk) < HISTORY_CHUNK:
            return  # the last chunk: no query to find that nothing follows
        start = chunk[-1].index + 1
        del chunk


class LazyCorpus:
    """Recorded steps of the trajectory's domain for the retrieval baseline: actions in
    memory (bounded), observations fetched by id only for the answers."""

    def __init__(self, trajectory: Trajectory):
        rows = (
            Step.objects.filter(
                branch__trajectory__project_id=trajectory.project_id,
                branch__trajectory__domain=trajectory.domain,
                branch__parent__isnull=True,
                provenance=Provenance.RECORDED,
            )
            .exclude(observation="")
            .order_by("id")
            .values_list("id", "action")[:RETRIEVAL_CORPUS_LIMIT]
        )
        self.ids: list[int] = []
        self.actions: list[str] = []
        for pk, action in rows:
            self.ids.append(pk)
            self.actions.append(action[:RETRIEVAL_ACTION_CHARS])

    def observations(self, positions: Sequence[int]) -> list[str]:
        wanted = [self.ids[p] for p in positions]
        found = dict(Step.objects.filter(pk__in=wanted).values_list("id", "observation"))
        return [found.get(pk, "") for pk in wanted]


def make_backend_for(
    job: SimulationJob,
    request: SimulationRequest,
    *,
    timeout: float | None = None,
    max_retries: int | None = None,
    timeout_setting: str | None = None,
) -> Backend:
    """The job's world-model backend; `timeout` (seconds per request) and `max_retries`
    bound an OpenAI-compatible server's answer (default: the backend's own), and a request
    that times out names `timeout_setting` as what to raise."""
    from inference.backends import make_backend
    from studio.services.endpoints import key_for_job

    choice = request.world_model
    if choice.backend == "retrieval":
        from inference.backends.retrieval import RetrievalBackend

        corpus = LazyCorpus(job.trajectory)
        return RetrievalBackend.from_lookup(
            corpus.actions, corpus.observations, domain=job.trajectory.domain
        )
    return make_backend(
        choice.backend,
        model=choice.model,
        base_url=choice.base_url,
        api_key=(
            key_for_job(job.world_endpoint, choice.base_url, env="WORLD_MODEL_API_KEY")
            if choice.backend == "openai"
            else ""
        ),
        concurrency=settings.WORLD_MODEL_CONCURRENCY,
        use_n=choice.supports_n,
        timeout=timeout,
        max_retries=max_retries,
        timeout_setting=timeout_setting,
    )


def step_row(branch_id: int, step: SimulatedStep, meta: dict[str, Any]) -> Step:
    """The (unsaved) row of a simulated step, its texts as the database can hold them;
    `meta` is added to the step's own."""
    return Step(
        branch_id=branch_id,
        index=step.index,
        action=storable(step.action),
        observation=storable(step.observation),
        state=step.state,
        thinking=storable(step.thinking),
        raw_output=storable(step.raw_output),
        raw_prompt=step.raw_prompt,
        provenance=step.provenance,
        observation_source=step.observation_source,
        parse_status=step.parse_status,
        meta=_storable_json({**step.meta, **meta}),
        timings=step.timings,
    )


def explain_error(exc: BaseException) -> str | None:
    """Messages that name the studio's settings (the runner knows none of them)."""
    from celery.exceptions import SoftTimeLimitExceeded

    if isinstance(exc, EndpointError):
        return str(exc)

    if isinstance(exc, SoftTimeLimitExceeded | TimeLimitReached):
        return (
            f"Stopped: the job ran past its time limit of {settings.STUDIO_JOB_SOFT_LIMIT_S} s "
            "(STUDIO_JOB_HARD_LIMIT_S). Try fewer futures, fewer steps or fewer max_tokens."
        )
    return None
