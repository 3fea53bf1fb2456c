"""Train a policy with TRL's GRPOTrainer in a world of AgentWorld Studio.

The world is played through openenv-core's client over the studio's episode API
(`{studio}/env/t/<token>/worlds/<id>`, WebSocket): each prompt of the dataset is a task of
the world; for each generation the rollout resets an episode of that task with a seed of its
own, shows the policy the task, the world's tools (as JSON) and what the world answered, lets
it write one action per turn (sampled, with per-token log-probabilities), steps the world with
it, and goes on until the world says the episode is done or `--max-turns` turns were taken.
The world's tokens (the observations between turns) go into the completion with
`env_mask` 0, so only the policy's own tokens are trained. The episode's reward is the sum of
the world's step rewards (a step without a reward counts 0), handed to the reward function
as the extra field `world_return`.

Every episode is an ordinary episode of the studio: it appears in the library (filter by the
API token) and on the world's page, grouped by token (one training run, one token).

    python examples/grpo_world/train.py --studio http://127.0.0.1:8000 --token $TOKEN \
        --world 3 --policy tiny --max-steps 3

On GPUs with a real policy and a served world model, only the arguments change:
`--policy Qwen/Qwen3-0.6B` (any causal LM with a chat template; a local path works too),
more `--num-generations`, `--prompts-per-step`, `--max-new-tokens`; the world model is the
studio project's (its Models page), so serving it on vLLM changes nothing here.

Nothing here imports Django or the studio: it is a client of the studio over HTTP and
WebSocket, with torch, transformers, trl and openenv-core (`pip install -e '.[model,test]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---- the world, over HTTP ---------------------------------------------------------------------


class WorldError(RuntimeError):
    """The studio or the world refused or failed; the message says which and why."""


def world_base(studio: str, token: str, world: int | str) -> str:
    """The world's episode API base: OpenEnv's clients take it as their base_url."""
    return f"{studio.rstrip('/')}/env/t/{urllib.parse.quote(token, safe='')}/worlds/{world}"


def redact(text: str, token: str) -> str:
    """`text` without the token (error messages of the clients carry the URL)."""
    if not token:
        return text
    return text.replace(urllib.parse.quote(token, safe=""), "***").replace(token, "***")


def _get_json(url: str, token: str, timeout: float = 30.0) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail") or exc.reason
        except (ValueError, AttributeError):
            detail = exc.reason
        raise WorldError(f"{redact(url, token)} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WorldError(f"cannot reach {redact(url, token)}: {reason}") from None


def describe_world(base: str, token: str) -> dict[str, Any]:
    """The world's /metadata (name, description, domain, tools, tasks), after /health has
    said the token and the world are good (401: not a valid token; 404: not a world of the
    token's project)."""
    try:
        _get_json(f"{base}/health", token)
    except WorldError as exc:
        if " 401:" in str(exc):
            raise WorldError(f"the API token is not valid ({exc})") from None
        if " 404:" in str(exc):
            raise WorldError(
                f"the world is not one of the token's project's worlds ({exc}): its id is in "
                "the URL of its page on the Worlds page"
            ) from None
        raise
    return _get_json(f"{base}/metadata", token)


# ---- the dataset: the world's tasks ------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One prompt of the dataset: a task of the world (`task_id`) or an instruction of one's
    own (`instruction`, for a world without tasks). `prompt` is the dataset's text for it."""

    prompt: str
    task_id: str = ""
    instruction: str = ""

    def reset_kwargs(self) -> dict[str, Any]:
        return {"task_id": self.task_id} if self.task_id else {"task": self.instruction}


def choose_tasks(
    metadata: dict[str, Any], task_ids: Sequence[str] = (), instructions: Sequence[str] = ()
) -> list[Task]:
    """The tasks to train on: the chosen ids of the world's tasks and the instructions
    given, or, with neither, every task of the world."""
    known = [str(t) for t in metadata.get("tasks") or []]
    unknown = [t for t in task_ids if t not in known]
    if unknown:
        raise WorldError(
            f"the world has no task {unknown[0]!r} (its tasks: {', '.join(known) or 'none'})"
        )
    chosen = [Task(prompt=f"task {t}", task_id=t) for t in dict.fromkeys(task_ids)]
    chosen += [Task(prompt=text, instruction=text) for text in dict.fromkeys(instructions)]
    if not chosen:
        chosen = [Task(prompt=f"task {t}", task_id=t) for t in known]
    if not chosen:
        raise WorldError(
            f"world {metadata.get('name')!r} has no tasks: give --task 'an instruction' "
            "(or add tasks to the world in its editor)"
        )
    if len({t.prompt for t in chosen}) != len(chosen):
        raise WorldError("an instruction given with --task reads the same as a task id prompt")
    return chosen


# ---- what the policy sees and says ---------------------------------------------------------------

SYSTEM = """You are an agent in a simulated environment: {name}.
{description}

Each turn, answer with one action and nothing else. {how}
The environment answers each action; the episode ends when the task is done or after {turns} turns."""

HOW_TOOLS = (
    'Call a tool with a JSON object {{"name": "<tool>", "arguments": {{...}}}}. The tools, as '
    "JSON:\n{tools}"
)
HOW_TEXT = "Write the action as plain text (in a terminal: one shell command)."


def system_prompt(metadata: dict[str, Any], tools: list[dict[str, Any]], max_turns: int) -> str:
    how = HOW_TOOLS.format(tools=json.dumps(tools, ensure_ascii=False)) if tools else HOW_TEXT
    return SYSTEM.format(
        name=metadata.get("name") or "a world",
        description=metadata.get("description") or "",
        how=how,
        turns=max_turns,
    )


def first_user_message(observation: dict[str, Any]) -> str:
    task = observation.get("task") or ""
    text = observation.get("text") or ""
    return f"Task: {task}\n\nThe environment: {text}" if text else f"Task: {task}"


_CONTROL_KEEP = {"\n", "\t"}


def clean_action_text(text: str) -> str:
    """The policy's text as an action: control characters (a NUL, which the studio refuses in
    any text) dropped, whitespace around trimmed."""
    return "".join(
        ch for ch in text if ch in _CONTROL_KEEP or unicodedata.category(ch) != "Cc"
    ).strip()


def parse_action(text: str, tool_names: Sequence[str]) -> dict[str, Any]:
    """A tool call when the text holds a JSON object naming one of the world's tools, else
    the text itself as a free-form action."""
    start, end = text.find("{"), text.rfind("}")
    if tool_names and 0 <= start < end:
        try:
            call = json.loads(text[start : end + 1])
        except (ValueError, RecursionError):
            call = None
        if isinstance(call, dict) and call.get("name") in tool_names:
            arguments = call.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    pass
            return {"name": call["name"], "arguments": arguments if arguments is not None else {}}
    return {"action": text}


def generation_seed(seed: int, rollout: int, index: int) -> int:
    """The world seed of generation `index` of rollout batch `rollout` (0..2**63-1; recorded
    by the studio with the episode)."""
    digest = hashlib.sha256(f"grpo-world:{seed}:{rollout}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# ---- one event loop for every episode's WebSocket ---------------------------------------------


class _Loop:
    """An asyncio loop in a thread of its own: the clients' WebSockets keep answering pings
    while the policy generates in the main thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="openenv", daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


_CODE = re.compile(r"\(code: ([A-Z_]+)\)\s*$")
RETRYABLE = {"RATE_LIMITED", "UNAVAILABLE"}


def error_code(exc: BaseException) -> str:
    match = _CODE.search(str(exc))
    return match.group(1) if match else ""


# ---- an episode --------------------------------------------------------------------------------


@dataclass
class Episode:
    task: Task
    seed: int
    client: Any = None
    episode_id: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    turns: int = 0
    refused: int = 0
    done: bool = False
    end_cause: str = ""
    error: str = ""

    @property
    def world_return(self) -> float:
        return float(sum(r for r in self.rewards if r is not None))

    @property
    def steps(self) -> int:
        return len(self.rewards)

    def record(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "task_id": self.task.task_id,
            "task": self.task.instruction or None,
            "seed": self.seed,
            "steps": self.steps,
            "turns": self.turns,
            "refused": self.refused,
            "rewards": self.rewards,
            "return": self.world_return,
            "done": self.done,
            "end_cause": self.end_cause or None,
            "error": self.error or None,
        }


class WorldRollout:
    """TRL's `rollout_func(prompts, trainer)`: plays one episode of the world per prompt (the
    trainer repeats each prompt `num_generations` times) and returns prompt_ids,
    completion_ids, logprobs, env_mask and the extra fields `world_return`, `episode_id`,
    `world_seed`, `world_steps` (handed to the reward functions)."""

    def __init__(
        self,
        *,
        base: str,
        token: str,
        metadata: dict[str, Any],
        tasks: Sequence[Task],
        max_turns: int,
        max_new_tokens: int,
        max_observation_tokens: int = 256,
        seed: int = 0,
        step_timeout_s: float = 300.0,
        retries: int = 6,
        log=print,
    ) -> None:
        self.base, self.token, self.metadata = base, token, metadata
        self.tasks = {t.prompt: t for t in tasks}
        self.max_turns, self.max_new_tokens = max_turns, max_new_tokens
        self.max_observation_tokens = max_observation_tokens
        self.seed, self.step_timeout_s, self.retries, self.log = seed, step_timeout_s, retries, log
        self.rollouts = 0
        self.episodes: list[dict[str, Any]] = []  # every episode played, in order
        self.last_batch: list[Episode] = []
        self._loop: _Loop | None = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    # -- TRL's entry point --

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        episodes = self.play(prompts, trainer)
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "world_return": [e.world_return for e in episodes],
            "episode_id": [e.episode_id for e in episodes],
            "world_seed": [e.seed for e in episodes],
            "world_steps": [e.steps for e in episodes],
        }

    def play(self, prompts: list[Any], trainer: Any) -> list[Episode]:
        if self._loop is None:
            self._loop = _Loop()
        rollout = self.rollouts
        self.rollouts += 1
        episodes = []
        for i, prompt in enumerate(prompts):
            key = prompt if isinstance(prompt, str) else str(prompt)
            task = self.tasks.get(key)
            if task is None:
                raise WorldError(f"the prompt {key[:80]!r} is not one of the training tasks")
            episodes.append(Episode(task=task, seed=generation_seed(self.seed, rollout, i)))
        tokenizer = trainer.processing_class
        try:
            self._loop.run(self._reset_all(episodes))
            for episode in episodes:
                episode.prompt_ids = self._chat_ids(trainer, episode.messages)
            for _turn in range(self.max_turns):
                active = [e for e in episodes if not e.done and not e.error]
                if not active:
                    break
                generated = self._generate(trainer, active)
                actions = []
                for episode, (ids, logprobs, ended) in zip(active, generated, strict=True):
                    episode.completion_ids += ids
                    episode.env_mask += [1] * len(ids)
                    episode.logprobs += logprobs
                    episode.turns += 1
                    text = clean_action_text(tokenizer.decode(ids, skip_special_tokens=True))
                    names = [t["name"] for t in episode.tools]
                    actions.append((parse_action(text, names) if text else None, ended))
                answers = self._loop.run(
                    self._step_all([(e, a) for e, (a, _) in zip(active, actions, strict=True)])
                )
                last_turn = _turn == self.max_turns - 1
                for episode, (_, ended), feedback in zip(active, actions, answers, strict=True):
                    if episode.done or episode.error or last_turn:
                        continue
                    # the world's answer, then the policy's next turn: masked out of the loss
                    ids = self._between_turns(trainer, episode.messages, feedback, ended)
                    episode.completion_ids += ids
                    episode.env_mask += [0] * len(ids)
                    episode.logprobs += [0.0] * len(ids)
        finally:
            self._loop.run(self._close_all(episodes))
        for episode in episodes:
            if not episode.completion_ids:  # never generated (the reset failed): one EOS
                eos = tokenizer.eos_token_id
                episode.completion_ids, episode.env_mask, episode.logprobs = [eos], [0], [0.0]
        self.last_batch = episodes
        self.episodes += [e.record() for e in episodes]
        return episodes

    # -- the policy --

    def _chat_ids(self, trainer: Any, messages: list[dict[str, str]]) -> list[int]:
        tokenizer = trainer.processing_class
        kwargs = getattr(trainer, "chat_template_kwargs", None) or {}
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **kwargs
        )
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def _between_turns(
        self, trainer: Any, messages: list[dict[str, str]], feedback: str, ended: bool
    ) -> list[int]:
        """The tokens after the policy's turn: the end of its turn (when it did not end it
        itself), the world's answer as the next user message, and the opening of the policy's
        next turn: the chat template's own, found by rendering a turn with a marker."""
        tokenizer = trainer.processing_class
        kwargs = getattr(trainer, "chat_template_kwargs", None) or {}
        observation_ids = tokenizer(feedback, add_special_tokens=False)["input_ids"]
        if len(observation_ids) > self.max_observation_tokens:
            feedback = tokenizer.decode(observation_ids[: self.max_observation_tokens]) + " [...]"
        marker = "\u2063AGENT-TURN-MARKER\u2063"
        rendered = tokenizer.apply_chat_template(
            [
                *messages,
                {"role": "assistant", "content": marker},
                {"role": "user", "content": feedback},
            ],
            add_generation_prompt=True,
            tokenize=False,
            **kwargs,
        )
        after = rendered[rendered.rindex(marker) + len(marker) :]
        eos = tokenizer.eos_token or ""
        if ended and eos and after.startswith(eos):
            after = after[len(eos) :]  # the policy closed its turn with its own EOS token
        return tokenizer(after, add_special_tokens=False)["input_ids"]

    def _generate(self, trainer: Any, episodes: list[Episode]):
        """One turn of every active episode, sampled in one batch: (new token ids, their
        log-probabilities under the sampling distribution, whether it ended with EOS)."""
        import torch
        from trl.models import unwrap_model_for_generation

        tokenizer = trainer.processing_class
        device = trainer.accelerator.device
        contexts = [e.prompt_ids + e.completion_ids for e in episodes]
        width = max(len(c) for c in contexts)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
        attention = torch.tensor(
            [[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device
        )
        config = copy.deepcopy(trainer.generation_config)
        config.max_new_tokens = self.max_new_tokens
        config.min_new_tokens = 1  # an action is at least one token
        config.output_scores = True
        config.return_dict_in_generate = True
        eos_ids = set(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                generation_kwargs=getattr(trainer, "generation_kwargs", None),
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(
                input_ids=input_ids, attention_mask=attention, generation_config=config
            )
        new = out.sequences[:, width:].tolist()
        # the scores are the processed logits the tokens were sampled from (temperature,
        # top-k/top-p applied): their log-softmax is the sampling log-probability
        logps = torch.stack([s.float().log_softmax(-1) for s in out.scores], dim=1)
        results = []
        for row, tokens in enumerate(new):
            ids: list[int] = []
            ended = False
            for token in tokens:
                ids.append(token)
                if token in eos_ids:
                    ended = True
                    break
            lp = [float(logps[row, t, token]) for t, token in enumerate(ids)]
            results.append((ids, lp, ended))
        return results

    # -- the world --

    async def _call(self, episode: Episode, what: str, payload: Any) -> Any:
        """reset or step over the episode's WebSocket, again after a refusal the studio says
        may pass later (429 rate limited, 503 unavailable)."""
        delay = 1.0
        for attempt in range(self.retries + 1):
            client = episode.client
            call = client.reset(**payload) if what == "reset" else client.step(payload)
            try:
                return await asyncio.wait_for(call, timeout=self.step_timeout_s)
            except RuntimeError as exc:
                if error_code(exc) not in RETRYABLE or attempt == self.retries:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    async def _reset_one(self, episode: Episode) -> None:
        from openenv.core.generic_client import GenericEnvClient

        episode.client = GenericEnvClient(base_url=self.base, message_timeout_s=self.step_timeout_s)
        try:
            await episode.client.connect()
            result = await self._call(
                episode,
                "reset",
                {**episode.task.reset_kwargs(), "seed": episode.seed, "max_steps": self.max_turns},
            )
        except (RuntimeError, OSError) as exc:
            episode.error = f"reset failed: {redact(str(exc), self.token)}"
            return
        observation = result.observation or {}
        episode.episode_id = str(observation.get("episode_id") or "")
        episode.tools = list(observation.get("tools") or [])
        episode.messages = [
            {
                "role": "system",
                "content": system_prompt(self.metadata, episode.tools, self.max_turns),
            },
            {"role": "user", "content": first_user_message(observation)},
        ]

    async def _reset_all(self, episodes: list[Episode]) -> None:
        await asyncio.gather(*(self._reset_one(e) for e in episodes))
        failed = [e for e in episodes if e.error]
        if failed and len(failed) == len(episodes):
            raise WorldError(failed[0].error)

    async def _step_one(self, episode: Episode, action: dict[str, Any] | None) -> str:
        """Step the world; the text the policy is shown next (the observation, or the
        refusal of its action: a refused action is no step and has no reward)."""
        if action is None:
            episode.refused += 1
            return "(no action: write one action)"
        try:
            result = await self._call(episode, "step", action)
        except RuntimeError as exc:
            code = error_code(exc)
            message = redact(str(exc), self.token)
            if code == "VALIDATION_ERROR" or code == "INVALID_JSON":
                episode.refused += 1
                return f"The environment refused this action: {message}"
            if code == "CONFLICT":  # the episode ended (in the studio) or moved on
                episode.done, episode.end_cause = True, "conflict"
                return message
            episode.error = f"step failed: {message}"
            return message
        except OSError as exc:
            episode.error = f"step failed: {redact(str(exc) or type(exc).__name__, self.token)}"
            return episode.error
        observation = result.observation or {}
        episode.rewards.append(None if result.reward is None else float(result.reward))
        if result.done:
            metadata = observation.get("metadata") or {}
            episode.done = True
            episode.end_cause = str(metadata.get("end_cause") or "done")
        return str(observation.get("text") or "")

    async def _step_all(self, pairs: list[tuple[Episode, dict[str, Any] | None]]) -> list[str]:
        return list(await asyncio.gather(*(self._step_one(e, a) for e, a in pairs)))

    async def _close_all(self, episodes: list[Episode]) -> None:
        async def close(episode: Episode) -> None:
            if episode.client is not None:
                try:
                    await episode.client.close()
                except Exception:  # noqa: BLE001 - a connection already gone
                    pass
                episode.client = None

        await asyncio.gather(*(close(e) for e in episodes))


# ---- the reward, and what each step printed ------------------------------------------------------


def make_reward_function(history: list[dict[str, Any]]):
    """The reward function GRPO calls once per generation batch: the world's return of each
    episode (from the rollout's extra field), recorded in `history` as it saw it."""

    def world_reward(prompts, completions, world_return, episode_id, **kwargs):
        rewards = [float(r) for r in world_return]
        state = kwargs.get("trainer_state")
        history.append(
            {
                "step": (state.global_step + 1) if state is not None else len(history) + 1,
                "episodes": len(rewards),
                "episode_ids": list(episode_id),
                "rewards": rewards,
                "mean_reward": statistics.fmean(rewards) if rewards else 0.0,
            }
        )
        return rewards

    return world_reward


def _group_spread(rewards: list[float], group: int) -> int:
    """How many groups (the generations of one prompt) had rewards that differ: only those
    give GRPO an advantage to learn from."""
    groups = [rewards[i : i + group] for i in range(0, len(rewards), group)]
    return sum(1 for g in groups if len(set(g)) > 1)


@dataclass
class TrainResult:
    steps: list[dict[str, Any]]  # one per optimizer step: what the reward function saw
    episodes: list[dict[str, Any]]  # every episode played
    model: Any
    output_dir: str


# ---- the command ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Train a policy with GRPO in a world of AgentWorld Studio (its rewards)."
    )
    p.add_argument("--studio", required=True, help="the studio's URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--token", required=True, help="an API token of the world's project")
    p.add_argument("--world", required=True, type=int, help="the world's id (its page's URL)")
    p.add_argument(
        "--policy",
        default="tiny",
        help='a model path or hub id, or "tiny" (a tiny random-weight model built here, CPU)',
    )
    p.add_argument("--task-ids", default="", help="comma-separated task ids (default: all)")
    p.add_argument(
        "--task",
        action="append",
        default=[],
        help="an instruction of your own to train on (repeatable; for a world without tasks)",
    )
    p.add_argument("--max-steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--num-generations", type=int, default=4, help="episodes per prompt")
    p.add_argument("--prompts-per-step", type=int, default=2, help="prompts per optimizer step")
    p.add_argument(
        "--max-turns", type=int, default=2, help="policy turns (world steps) per episode"
    )
    p.add_argument("--max-new-tokens", type=int, default=24, help="tokens per policy turn")
    p.add_argument("--max-observation-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--output-dir", default="", help="where the policy and the logs go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-timeout", type=float, default=300.0, help="seconds per world step")
    p.add_argument("--bf16", action="store_true", help="train in bfloat16 (GPUs)")
    p.add_argument("--no-save", action="store_true", help="do not save the trained policy")
    return p


def _check_args(args: argparse.Namespace) -> None:
    for name in ("max_steps", "num_generations", "prompts_per_step", "max_turns"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_generations < 2:
        raise SystemExit("--num-generations must be at least 2 (GRPO compares a prompt's episodes)")
    if args.max_new_tokens < 1:
        raise SystemExit("--max-new-tokens must be at least 1")


def load_policy(policy: str, workdir: Path, *, bf16: bool = False):
    """(model, tokenizer): "tiny" builds the tiny random-weight qwen3_5_moe of
    `inference.tiny` into `workdir` (deterministic: the same weights every time)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = policy
    if policy == "tiny":
        from inference.tiny import build_tiny_model

        path = build_tiny_model(workdir / "tiny-policy")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise SystemExit(f"the policy {policy!r} has no chat template (the rollout needs one)")
    import torch

    dtype = torch.bfloat16 if bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


def train(args: argparse.Namespace, log=print) -> TrainResult:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    _check_args(args)
    base = world_base(args.studio, args.token, args.world)
    metadata = describe_world(base, args.token)
    ids = [t.strip() for t in args.task_ids.split(",") if t.strip()]
    tasks = choose_tasks(metadata, ids, args.task)
    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="grpo-world-"))
    output_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(args.policy, output_dir, bf16=args.bf16)
    per_step = min(args.prompts_per_step, len(tasks))
    batch = per_step * args.num_generations
    log(
        f"world {args.world} {metadata.get('name')!r} ({metadata.get('domain')}): "
        f"{len(tasks)} task(s) {', '.join(t.task_id or t.instruction[:40] for t in tasks)}; "
        f"{args.max_steps} step(s) of {per_step} prompt(s) x {args.num_generations} episodes, "
        f"up to {args.max_turns} turn(s) each; policy {args.policy}"
    )

    history: list[dict[str, Any]] = []
    rollout = WorldRollout(
        base=base,
        token=args.token,
        metadata=metadata,
        tasks=tasks,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        max_observation_tokens=args.max_observation_tokens,
        seed=args.seed,
        step_timeout_s=args.step_timeout,
        log=log,
    )
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.num_generations,
        max_completion_length=args.max_turns
        * (args.max_new_tokens + args.max_observation_tokens + 64),
        temperature=args.temperature,
        seed=args.seed,
        bf16=bool(args.bf16),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not _has_accelerator(),
    )

    steps_log = output_dir / "steps.jsonl"
    steps_log.write_text("", encoding="utf-8")

    max_steps, group = args.max_steps, args.num_generations

    class PrintStep(TrainerCallback):
        """One line per optimizer step: the episodes played, the rewards the reward function
        saw, and what the trainer made of them (its mean reward and loss)."""

        started = time.monotonic()

        def on_log(self, args, state, control, **kwargs):
            logs = kwargs.get("logs") or {}
            if "loss" not in logs or not history or history[-1].get("printed"):
                return
            seen = history[-1]
            played = rollout.last_batch
            steps = sum(e.steps for e in played)
            ended = sum(1 for e in played if e.done)
            failed = sum(1 for e in played if e.error)
            spread = _group_spread(seen["rewards"], group)
            seen.update(
                {
                    "world_steps": steps,
                    "ended": ended,
                    "failed": failed,
                    "groups_with_spread": spread,
                    "trainer_reward": logs.get("reward"),
                    "loss": logs.get("loss"),
                    "printed": True,
                }
            )
            rewards = " ".join(f"{r:g}" for r in seen["rewards"])
            groups = len(seen["rewards"]) // group
            log(
                f"step {state.global_step}/{max_steps}: {seen['episodes']} episodes played "
                f"({steps} world steps, {ended} ended{f', {failed} failed' if failed else ''}), "
                f"mean reward {seen['mean_reward']:.3f} [{rewards}], {spread}/{groups} groups "
                f"with differing rewards; trainer: reward {_num(logs.get('reward'))}, loss "
                f"{_num(logs.get('loss'))}; {time.monotonic() - self.started:.1f} s"
            )
            with open(steps_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({k: v for k, v in seen.items() if k != "printed"}) + "\n")

    dataset = Dataset.from_list([{"prompt": t.prompt} for t in tasks])
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=make_reward_function(history),
        args=config,
        train_dataset=dataset,
        rollout_func=rollout,
        callbacks=[PrintStep()],
    )
    trainer.remove_callback(PrinterCallback)  # the line above says what it would
    try:
        trainer.train()
    finally:
        rollout.close()
    with open(output_dir / "episodes.jsonl", "w", encoding="utf-8") as f:
        for record in rollout.episodes:
            f.write(json.dumps(record) + "\n")
    if not args.no_save:
        trainer.save_model(str(output_dir / "policy"))
    played = len(rollout.episodes)
    mean = statistics.fmean(r["return"] for r in rollout.episodes) if played else 0.0
    log(
        f"done: {played} episodes in the studio (API token's episodes in the library, world "
        f"{args.world}'s page), mean reward {mean:.3f}; "
        f"{'policy saved in ' + str(output_dir / 'policy') if not args.no_save else 'policy not saved'}"
        f", logs in {output_dir}/steps.jsonl and episodes.jsonl"
    )
    return TrainResult(
        steps=history, episodes=rollout.episodes, model=trainer.model, output_dir=str(output_dir)
    )


def _num(value: Any) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return "n/a"


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: Sequence[str] | None = None) -> TrainResult:
    import warnings

    args = build_parser().parse_args(argv)
    # transformers' deprecation notices of the arguments TRL passes: not this run's concern
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        return train(args)
    except WorldError as exc:
        raise SystemExit(f"train.py: {exc}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
