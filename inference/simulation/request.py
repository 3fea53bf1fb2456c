"""`SimulationRequest`: everything a simulation needs, validated once.

The studio's form, its `simulate` command, the services and any API build a request with
`SimulationRequest.build(data, fork=..., defaults=...)` and show `InvalidRequest.errors`
(field name -> messages) where the input came from. The worker builds the same request from
the job row, so a request that was accepted is run exactly as it was checked.

Input keys (all optional but `fork_index`): `fork_index`, `action` (None: the recorded
action at the fork), `action_format` (auto | json | text), `mode`, `n`, `max_steps`,
`temperature`, `top_p`, `max_tokens`, `seed`; the world model: `backend`, `model`,
`base_url`, `supports_n`; a rollout's agent model: `agent_model`, `agent_base_url`;
`perturbations` (a list of rules, see `inference.perturbations.build_rule`) and
`perturbation_seed` (their draws; blank: the sampling seed, else a new random one, which the
request then carries so a job rebuilt from its row draws the same); `sweep` (2 to
`perturbations.MAX_SWEEP` perturbations applied at the fork step, each to its own `n`
futures: the request then has n x K futures, sample s under sweep[s // n])."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from inference import perturbations as perturbing
from inference.simulation import limits
from inference.simulation.meaning import same_meaning

FIELDS = (
    "fork_index",
    "action",
    "action_format",
    "mode",
    "n",
    "max_steps",
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "backend",
    "model",
    "base_url",
    "supports_n",
    "agent_model",
    "agent_base_url",
    "perturbations",
    "perturbation_seed",
    "sweep",
)


class InvalidRequest(ValueError):
    """The request cannot run; `errors` maps each input field to what is wrong with it."""

    def __init__(self, errors: Mapping[str, list[str]]):
        self.errors = {name: list(messages) for name, messages in errors.items() if messages}
        super().__init__(self.summary())

    def summary(self) -> str:
        return "; ".join(f"{name}: {m}" for name, ms in self.errors.items() for m in ms)

    @property
    def messages(self) -> list[str]:
        return [m for ms in self.errors.values() for m in ms]


@dataclass(frozen=True)
class AgentChoice:
    """An OpenAI-compatible chat model that plays the agent in a rollout."""

    model: str
    base_url: str


@dataclass(frozen=True)
class Defaults:
    """What the installation configured: it fills what a request leaves blank."""

    backend: str = limits.OFFLINE_BACKEND
    openai_model: str = limits.DEFAULT_WORLD_MODEL
    hf_model: str = ""
    base_url: str = ""
    agent: AgentChoice | None = None  # the agent model of rollouts, if one is configured

    def model_for(self, backend: str) -> str:
        if backend == "openai":
            return self.openai_model
        if backend == "hf":
            return self.hf_model or self.openai_model
        return ""


@dataclass(frozen=True)
class ForkFacts:
    """What validation needs to know of the branch being forked at `fork_index`."""

    step_count: int  # steps the branch has (inherited and its own)
    recorded_action: str | None = None  # the action at fork_index when that step exists
    domain: str = ""


@dataclass(frozen=True)
class Sampling:
    temperature: float = limits.DEFAULT_TEMPERATURE
    top_p: float = limits.DEFAULT_TOP_P
    max_tokens: int = limits.DEFAULT_MAX_TOKENS
    seed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorldModelChoice:
    backend: str
    model: str = ""
    base_url: str = ""
    supports_n: bool = True  # the server samples N choices of one prompt in one request


@dataclass(frozen=True)
class SimulationRequest:
    fork_index: int
    action: str
    mode: str = "next"
    n: int = 1
    max_steps: int = 1  # rollout: steps the agent takes at most; 1 for the other modes
    sampling: Sampling = field(default_factory=Sampling)
    world_model: WorldModelChoice = field(
        default_factory=lambda: WorldModelChoice(limits.OFFLINE_BACKEND)
    )
    edited: bool = False  # the action differs from the recorded one (or the step is new)
    agent: AgentChoice | None = None  # rollouts of more than one step
    perturbations: tuple[perturbing.Rule, ...] = ()
    perturbation_seed: int = 0  # the rules' draws (`perturbations.choose`)
    sweep: tuple[perturbing.Perturbation, ...] = ()  # n // len(sweep) futures each
    # a rollout given no action at the fork (the playground's "hand over to the agent"):
    # the agent proposes that one too, and every step of the rollout is the agent's
    agent_first: bool = False

    @property
    def samples_per_perturbation(self) -> int:
        return self.n // len(self.sweep) if self.sweep else self.n

    def perturbation_for(
        self, sample: int, index: int, action: str
    ) -> perturbing.Perturbation | None:
        """What perturbs future `sample` at step `index`: its sweep entry at the fork step,
        else the first rule that matches and draws it."""
        if self.sweep and index == self.fork_index:
            return self.sweep[min(sample // self.samples_per_perturbation, len(self.sweep) - 1)]
        if not self.perturbations:
            return None
        # a sweep's columns draw alike: sample j of every entry gets the same draws
        drawn = sample % self.samples_per_perturbation if self.sweep else sample
        return perturbing.choose(
            self.perturbations,
            seed=self.perturbation_seed,
            sample=drawn,
            index=index,
            action=action,
        )

    def surely_perturbed_at_fork(self, sample: int) -> perturbing.Perturbation | None:
        """The perturbation future `sample` certainly gets at the fork (a sweep entry or a
        rule with probability 1), for its name; None when none or only by chance."""
        if self.sweep:
            return self.perturbation_for(sample, self.fork_index, self.action)
        for rule in self.perturbations:
            if rule.matches(self.fork_index, self.action):
                return rule.perturbation if rule.probability >= 1 else None
        return None

    @property
    def backend(self) -> str:
        return self.world_model.backend

    @property
    def queue_kind(self) -> str:
        """`gpu` for backends that load a model into the worker, else `default`."""
        return "gpu" if self.backend in limits.IN_PROCESS_BACKENDS else "default"

    @classmethod
    def build(
        cls, data: Mapping[str, Any], *, fork: ForkFacts, defaults: Defaults = Defaults()
    ) -> SimulationRequest:
        """Validate and normalise `data`; raise InvalidRequest naming every bad field."""
        v = _Validator(data)
        for name in sorted(set(data) - set(FIELDS), key=str):
            v.error(str(name), f"unknown field {name!r}")
        mode = v.choice("mode", limits.MODES, default="next")
        fork_index = v.fork_index(fork)
        raw_action = data.get("action")
        # "" (not an absent field, which means the recorded action) in a rollout
        agent_first = mode == "rollout" and isinstance(raw_action, str) and not raw_action.strip()
        if agent_first:
            v.choice("action_format", limits.ACTION_FORMATS, default="auto")
            action = ""
        else:
            action = v.action(fork, fork_index)
        n = v.integer("n", 1, limits.MAX_FUTURES, default=1, what="the number of futures")
        max_steps: int | None = 1
        agent = None
        if mode == "rollout":
            max_steps = v.integer(
                "max_steps",
                1,
                limits.MAX_ROLLOUT_STEPS,
                required=True,
                what="the steps of the rollout",
            )
            if max_steps is not None and (max_steps > 1 or agent_first):
                agent = v.agent(defaults)
        else:
            # only a rollout reads it, but a max_steps given to another mode is still checked:
            # -5 accepted (and ignored) reads as if it meant something
            v.integer("max_steps", 1, limits.MAX_ROLLOUT_STEPS, what="the steps of a rollout")
        if mode == "replay" and fork_index is not None and fork_index + 1 >= fork.step_count:
            v.error(
                "mode",
                f"counterfactual replay needs recorded steps after step {fork_index}; it is "
                "the branch's last step (use next observation or agent rollout)",
            )
        sampling = Sampling(
            temperature=v.number(
                "temperature", 0.0, limits.TEMPERATURE_MAX, default=limits.DEFAULT_TEMPERATURE
            ),
            top_p=v.number("top_p", 0.0, 1.0, default=limits.DEFAULT_TOP_P, open_low=True),
            max_tokens=v.integer(
                "max_tokens", 1, limits.MAX_TOKENS, default=limits.DEFAULT_MAX_TOKENS
            )
            or limits.DEFAULT_MAX_TOKENS,
            seed=v.integer("seed", 0, limits.MAX_SEED, default=None),
        )
        world_model = v.world_model(defaults)
        rules = v.perturbations(world_model)
        v.rules_reachable(rules, mode, fork_index, max_steps)
        sweep = v.sweep(world_model)
        if sweep and n is not None:
            if n * len(sweep) > limits.MAX_FUTURES:
                v.error(
                    "n",
                    f"a sweep runs N futures per perturbation: {len(sweep)} x {n} = "
                    f"{n * len(sweep)} futures, more than {limits.MAX_FUTURES}",
                )
            n = n * len(sweep)
        perturbation_seed = v.integer("perturbation_seed", 0, limits.MAX_SEED, default=None)
        if perturbation_seed is None:
            # Draws happen only for rules with a probability below 1; without one the seed
            # is unused and stays 0, so the same input builds the same request.
            drawn = any(rule.probability < 1 for rule in rules)
            perturbation_seed = (
                sampling.seed
                if sampling.seed is not None
                else random.randrange(limits.MAX_SEED)
                if drawn
                else 0
            )
        v.raise_if_invalid()
        assert fork_index is not None and n is not None and max_steps is not None
        # the agent's own first action is no edit of the recorded one
        edited = not agent_first and action_is_edited(fork.recorded_action, action)
        if not edited and not agent_first and fork.recorded_action is not None:
            # The same action in other clothes (re-indented JSON, a trailing newline): the
            # step replays the recorded action, so the model is sent that, verbatim.
            action = fork.recorded_action
        return cls(
            fork_index=fork_index,
            action=action,
            mode=mode,
            n=n,
            max_steps=max_steps,
            sampling=sampling,
            world_model=world_model,
            edited=edited,
            agent=agent,
            perturbations=rules,
            perturbation_seed=perturbation_seed,
            sweep=sweep,
            agent_first=agent_first,
        )


def normalise_action(text: str) -> str:
    """The action as stored and sent: line endings as `\\n`, no trailing whitespace (a
    textarea's last newline); everything else as the user typed it."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()


def action_is_edited(recorded: str | None, action: str) -> bool:
    """Whether `action` differs in meaning from the recorded action (`meaning.same_meaning`:
    re-indenting JSON or a textarea's line endings is no edit). A new step (no recorded
    action) is always an edit."""
    if recorded is None:
        return True
    return not same_meaning(recorded, action)


def looks_like_json(text: str, domain: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("{") or (
        stripped.startswith("[") and domain in limits.JSON_ACTION_DOMAINS
    )


class _Validator:
    """Collects the errors of one request, field by field."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = data
        self.errors: dict[str, list[str]] = {}

    def error(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def raise_if_invalid(self) -> None:
        if self.errors:
            raise InvalidRequest(self.errors)

    def blank(self, name: str) -> bool:
        value = self.data.get(name)
        return value is None or (isinstance(value, str) and not value.strip())

    def choice(self, name: str, options: Mapping[str, str], *, default: str) -> str:
        if self.blank(name):
            return default
        value = self.data[name]
        if not isinstance(value, str) or value not in options:
            self.error(name, f"{name} must be one of {', '.join(options)}, got {value!r}")
            return default
        return value

    def integer(
        self,
        name: str,
        low: int,
        high: int,
        *,
        default: int | None = None,
        required: bool = False,
        what: str = "",
    ) -> int | None:
        label = f"{name} ({what})" if what else name
        if self.blank(name):
            if required:
                self.error(name, f"{label} is required: a whole number from {low} to {high}")
            return default
        value = self.data[name]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, f"{label} must be a whole number, got {value!r}")
            return default
        if not low <= value <= high:
            self.error(name, f"{label} must be {low} to {high}, got {value}")
            return default
        return value

    def fork_index(self, fork: ForkFacts) -> int | None:
        value = self.data.get("fork_index")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error("fork_index", f"fork_index must be a whole number, got {value!r}")
            return None
        if not 0 <= value <= fork.step_count:
            last = fork.step_count - 1
            self.error(
                "fork_index",
                f"fork_index {value} is outside the branch's steps (0 to {last}, or "
                f"{fork.step_count} to add a step)",
            )
            return None
        return value

    def number(
        self, name: str, low: float, high: float, *, default: float, open_low: bool = False
    ) -> float:
        if self.blank(name):
            return default
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(name, f"{name} must be a number, got {value!r}")
            return default
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        too_low = number <= low if open_low else number < low
        if math.isnan(number) or too_low or number > high:
            bracket = "(" if open_low else "["
            shown = value if number != math.inf else "a number too large"
            self.error(name, f"{name} must be in {bracket}{low:g}, {high:g}], got {shown!r}")
            return default
        return number

    def action(self, fork: ForkFacts, fork_index: int | None) -> str:
        raw = self.data.get("action")
        fmt = self.choice("action_format", limits.ACTION_FORMATS, default="auto")
        if raw is None:
            if fork.recorded_action is None:
                if fork_index is not None:
                    self.error(
                        "action",
                        f"step {fork_index} is a new step: write the action the agent takes",
                    )
                return ""
            return fork.recorded_action
        if not isinstance(raw, str):
            self.error("action", f"the action must be text, got {type(raw).__name__}")
            return ""
        action = normalise_action(raw)
        if not action.strip():
            self.error("action", "the action is empty: write what the agent does at this step")
            return ""
        if fmt == "json" or (fmt == "auto" and looks_like_json(action, fork.domain)):
            try:
                json.loads(action)
            except RecursionError:
                self.error("action", "the action's JSON is nested too deeply to read")
            except json.JSONDecodeError as exc:
                hint = " (choose free text if this action is not JSON)" if fmt == "auto" else ""
                self.error(
                    "action",
                    f"the action is not valid JSON at line {exc.lineno}, column {exc.colno}: "
                    f"{exc.msg}{hint}",
                )
        return action

    def agent(self, defaults: Defaults) -> AgentChoice | None:
        model = "" if self.blank("agent_model") else str(self.data["agent_model"]).strip()
        base_url = "" if self.blank("agent_base_url") else str(self.data["agent_base_url"])
        base_url = base_url.strip().rstrip("/")
        if not base_url and not model:
            if defaults.agent is None:
                self.error(
                    "agent_model",
                    "an agent rollout of more than one step needs an agent model to propose "
                    "the actions: register one on the project's Models page (or take 1 step)",
                )
            return defaults.agent
        if not base_url.startswith(("http://", "https://")):
            self.error(
                "agent_base_url",
                f"the agent model needs the base URL of an OpenAI-compatible server, got "
                f"{base_url!r}",
            )
        if not model:
            self.error("agent_model", "the agent model needs a served model name")
        return AgentChoice(model, base_url)

    def perturbations(self, world_model: WorldModelChoice) -> tuple[perturbing.Rule, ...]:
        try:
            rules = perturbing.build_rules(self.data.get("perturbations"))
        except perturbing.PerturbationError as exc:
            self.error("perturbations", str(exc))
            return ()
        if world_model.backend not in limits.BACKENDS_NEEDING_MODEL:
            for i, rule in enumerate(rules):
                if rule.perturbation.mode == perturbing.PROMPTED:
                    self.error(
                        "perturbations",
                        f"perturbations[{i}] ({rule.perturbation.label}): the "
                        f"{world_model.backend} baseline cannot follow a prompted "
                        "perturbation's instruction; apply it deterministically or pick a "
                        "world model",
                    )
                    break
        return rules

    def rules_reachable(
        self,
        rules: tuple[perturbing.Rule, ...],
        mode: str,
        fork_index: int | None,
        max_steps: int | None,
    ) -> None:
        """A rule none of whose steps is ever simulated would be shown as a perturbation
        that did nothing: refuse it, naming it."""
        if fork_index is None:
            return
        last = fork_index if mode == "next" else None
        if mode == "rollout" and max_steps is not None:
            last = fork_index + max_steps - 1
        for i, rule in enumerate(rules):
            if rule.last_step is not None and rule.last_step < fork_index:
                self.error(
                    "perturbations",
                    f"perturbations[{i}] ({rule.perturbation.label}): its steps end at "
                    f"{rule.last_step}, before the fork step {fork_index}",
                )
            elif last is not None and rule.first_step is not None and rule.first_step > last:
                what = (
                    "next observation simulates only" if mode == "next" else "this rollout ends at"
                )
                self.error(
                    "perturbations",
                    f"perturbations[{i}] ({rule.perturbation.label}): it starts at step "
                    f"{rule.first_step}, but {what} step {last}",
                )

    def sweep(self, world_model: WorldModelChoice) -> tuple[perturbing.Perturbation, ...]:
        raw = self.data.get("sweep")
        if raw is None or raw == [] or raw == "":
            return ()
        if not isinstance(raw, list | tuple):
            self.error("sweep", "sweep must be a list of perturbations")
            return ()
        if not 2 <= len(raw) <= perturbing.MAX_SWEEP:
            self.error(
                "sweep",
                f"a sweep compares 2 to {perturbing.MAX_SWEEP} perturbations, got {len(raw)}",
            )
            return ()
        out = []
        for i, item in enumerate(raw):
            where = f"sweep[{i}]"
            try:
                p = perturbing.from_dict(item, where)
            except perturbing.PerturbationError as exc:
                self.error("sweep", str(exc))
                return ()
            if (
                p.mode == perturbing.PROMPTED
                and world_model.backend not in limits.BACKENDS_NEEDING_MODEL
            ):
                self.error(
                    "sweep",
                    f"{where} ({p.label}): the {world_model.backend} baseline cannot follow a "
                    "prompted perturbation's instruction; apply it deterministically or pick "
                    "a world model",
                )
                return ()
            out.append(p)
        labels = [p.label for p in out]
        if len(set(labels)) != len(labels):
            self.error("sweep", "a sweep's perturbations must differ (two are the same)")
            return ()
        return tuple(out)

    def world_model(self, defaults: Defaults) -> WorldModelChoice:
        backend = self.choice("backend", limits.BACKENDS, default=defaults.backend)
        supports_n = self.data.get("supports_n", True)
        if not isinstance(supports_n, bool):
            self.error("supports_n", f"supports_n must be true or false, got {supports_n!r}")
            supports_n = True
        model = "" if self.blank("model") else str(self.data["model"]).strip()
        base_url = "" if self.blank("base_url") else str(self.data["base_url"]).strip()
        if backend not in limits.BACKENDS_NEEDING_MODEL:
            return WorldModelChoice(backend)
        model = model or defaults.model_for(backend)
        if not model:
            where = "a served model name" if backend == "openai" else "a model path or hub id"
            self.error("model", f"the {backend} backend needs {where} (none is configured)")
        if backend not in limits.BACKENDS_NEEDING_BASE_URL:
            return WorldModelChoice(backend, model, supports_n=supports_n)
        base_url = (base_url or defaults.base_url).rstrip("/")
        if not base_url:
            self.error(
                "base_url",
                f"the {backend} backend needs the base URL of an OpenAI-compatible server, "
                "e.g. http://127.0.0.1:8000/v1 (none is configured: WORLD_MODEL_BASE_URL)",
            )
        elif not base_url.startswith(("http://", "https://")):
            self.error(
                "base_url", f"the base URL must start with http:// or https://, got {base_url!r}"
            )
        return WorldModelChoice(backend, model, base_url, supports_n)
