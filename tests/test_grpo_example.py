"""The GRPO example (`examples/grpo_world/train.py`) against a live studio: the studio's ASGI
app under uvicorn, a real worker, and a fake world model on 127.0.0.1 whose observation says
"success" for about half of the actions (by a hash of what it is asked), so a step's reward
(a step check: the observation contains "success") depends on the policy's action and the
generations of a task get different returns. Two optimizer steps of the tiny random-weight
policy on CPU: the episodes are in the database under the run's token with the seeds the
example chose, the reward function saw each episode's return as the studio recorded it, the
trainer's mean reward is theirs, and the policy's weights moved."""

from __future__ import annotations

import hashlib
from importlib.util import find_spec
from pathlib import Path

import pytest

from studio.models import Trajectory
from tests.support.episode_api import served_world

TRAINING_STACK = ("torch", "transformers", "trl", "datasets", "openenv")
# skipped cleanly (before any worker starts) where the model extra (torch, transformers) or
# the test extra's trl, datasets and openenv-core are not installed
needs_training_stack = pytest.mark.skipif(
    not all(find_spec(m) for m in TRAINING_STACK),
    reason=f"the GRPO example needs {', '.join(TRAINING_STACK)} (pip install -e '.[model,test]')",
)


SIGNAL = {
    "name": "Relay station",
    "domain": "terminal",
    "description": "A radio relay's console; the operator types commands to reach the relays.",
    "initial_state": "relay> (console ready)",
    "tasks": [
        {
            "id": "reach-north",
            "instruction": "Reach the northern relay and confirm it answers.",
            "max_steps": 6,
            "rubric": {
                "step": [
                    {
                        "name": "success",
                        "kind": "contains",
                        "target": "observation",
                        "pattern": "success",
                        "weight": 1,
                    }
                ],
                "episode": [],
            },
        },
        {
            "id": "reach-south",
            "instruction": "Reach the southern relay and confirm it answers.",
            "max_steps": 6,
            "rubric": {
                "step": [
                    {
                        "name": "success",
                        "kind": "contains",
                        "target": "observation",
                        "pattern": "success",
                        "weight": 1,
                    }
                ],
                "episode": [],
            },
        },
    ],
}


def relay_answers(request: dict, index: int) -> str:
    """The world model's answer: it depends only on what it is asked (the action among the
    episode's history), so a different action of the policy may get a different reward."""
    asked = request["messages"][-1]["content"]
    if hashlib.sha256(asked.encode()).digest()[0] % 2:
        return "<predicted_observation>success: the relay answered</predicted_observation>"
    return "<predicted_observation>no carrier, the relay is silent</predicted_observation>"


@needs_training_stack
@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
@pytest.mark.torch
def test_grpo_example_learns_from_the_worlds_rewards(project, episode_worker, tmp_path: Path):
    import torch
    from safetensors.torch import load_file

    from examples.grpo_world.train import main

    steps, generations, turns = 2, 2, 2
    out = tmp_path / "run"
    with served_world(project, SIGNAL, responder=relay_answers) as served:
        result = main(
            [
                "--studio", served["base"], "--token", served["token"],
                "--world", str(served["world"].pk), "--policy", "tiny",
                "--max-steps", str(steps), "--num-generations", str(generations),
                "--prompts-per-step", "2", "--max-turns", str(turns),
                "--max-new-tokens", "8", "--learning-rate", "1e-3",
                "--output-dir", str(out), "--seed", "7", "--no-save",
            ]
        )  # fmt: skip
        asked = len(served["srv"].requests)

    # episodes were played: every one an episode of the world, under the run's token
    assert len(result.episodes) == steps * 2 * generations
    ids = [int(e["episode_id"]) for e in result.episodes]
    assert len(set(ids)) == len(ids)
    rows = {t.pk: t for t in Trajectory.objects.filter(pk__in=ids)}
    assert set(rows) == set(ids)
    world_steps = 0
    for record in result.episodes:
        trajectory = rows[int(record["episode_id"])]
        episode = trajectory.metadata["episode"]
        assert trajectory.source_format == "episode"
        assert episode["token"] == "agent" and episode["client"] == "websocket"
        assert episode["task_id"] == record["task_id"] in {"reach-north", "reach-south"}
        assert episode["seed"] == record["seed"]  # the seed the example chose, recorded
        assert trajectory.root_branch.steps.count() == record["steps"] == turns
        assert episode["status"] == "done" and episode["end"]["cause"] == "max_steps"
        # the return the example trained on is the one the studio recorded
        assert record["return"] == float(episode["return"] or 0.0)
        world_steps += record["steps"]
    assert asked == world_steps  # each step asked the world model once
    assert {e["task_id"] for e in result.episodes} == {"reach-north", "reach-south"}

    # the rewards reached the trainer: the reward function saw each batch's returns
    assert [s["step"] for s in result.steps] == [1, 2]
    by_id = {r["episode_id"]: r["return"] for r in result.episodes}
    for seen in result.steps:
        assert seen["rewards"] == [by_id[i] for i in seen["episode_ids"]]
        assert seen["trainer_reward"] == pytest.approx(sum(seen["rewards"]) / len(seen["rewards"]))
    returns = [r["return"] for r in result.episodes]
    assert min(returns) < max(returns)  # the world's rewards depend on the action
    assert sum(s["groups_with_spread"] for s in result.steps) >= 1  # GRPO had advantages
    logged = (out / "steps.jsonl").read_text().splitlines()
    assert len(logged) == steps

    # the policy's weights moved away from the tiny model it started from
    start = load_file(str(out / "tiny-policy" / "model.safetensors"))
    trained = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    moved = [k for k, v in start.items() if k in trained and not torch.equal(v, trained[k])]
    assert moved, "no parameter changed"
    # the output layer gets no gradient from the MoE router's auxiliary loss (the only other
    # term of the loss): it moved by the policy gradient, the world's rewards
    assert "lm_head.weight" in moved


def test_actions_and_tasks_from_the_policys_text():
    from examples.grpo_world.train import WorldError, choose_tasks, clean_action_text, parse_action

    tools = ["get_event", "submit_answer"]
    said = 'I will look. {"name": "get_event", "arguments": {"event_id": "evt_1"}} done'
    assert parse_action(said, tools) == {"name": "get_event", "arguments": {"event_id": "evt_1"}}
    # arguments as JSON text (as OpenAI sends them) are read
    assert parse_action('{"name": "submit_answer", "arguments": "{\\"answer\\": \\"3\\"}"}', tools)[
        "arguments"
    ] == {"answer": "3"}
    # a JSON object naming no tool of the world, and any text in a world without tools: free-form
    assert parse_action('{"name": "rm_rf"}', tools) == {"action": '{"name": "rm_rf"}'}
    assert parse_action('{"name": "get_event"}', []) == {"action": '{"name": "get_event"}'}
    assert clean_action_text(" df -h\x00\x07\n") == "df -h"
    meta = {"name": "ops-box backups", "tasks": ["why-failed", "free-space"]}
    assert [t.task_id for t in choose_tasks(meta)] == ["why-failed", "free-space"]
    assert choose_tasks(meta, ["free-space"])[0].reset_kwargs() == {"task_id": "free-space"}
    typed = choose_tasks({"name": "w", "tasks": []}, (), ["Count the files."])
    assert typed[0].reset_kwargs() == {"task": "Count the files."}
    with pytest.raises(
        WorldError, match="no task 'free-spaces' \\(its tasks: why-failed, free-space\\)"
    ):
        choose_tasks(meta, ["free-spaces"])
    with pytest.raises(WorldError, match="has no tasks: give --task"):
        choose_tasks({"name": "w", "tasks": []})


@needs_training_stack
@pytest.mark.torch
def test_the_tokens_between_turns_are_the_chat_templates_own(tmp_path: Path):
    """prompt + the policy's turn + the world's tokens (masked) read exactly as the chat
    template renders the conversation, so the trainer's forward pass sees what a chat would;
    a turn cut at max-new-tokens is closed by the world's tokens."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from examples.grpo_world.train import WorldRollout
    from inference.tiny import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    trainer = SimpleNamespace(processing_class=tok, chat_template_kwargs={})
    rollout = WorldRollout(
        base="http://127.0.0.1:1", token="t", metadata={}, tasks=(), max_turns=2, max_new_tokens=8
    )
    messages = [{"role": "system", "content": "Act."}, {"role": "user", "content": "Task: ls"}]
    prompt = rollout._chat_ids(trainer, messages)
    turn = tok("ls -la", add_special_tokens=False)["input_ids"]
    whole = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": "ls -la"}, {"role": "user", "content": "a b"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    for ended in (True, False):
        policy = turn + ([tok.eos_token_id] if ended else [])
        between = rollout._between_turns(trainer, messages, "a b", ended)
        assert tok.decode(prompt + policy + between) == whole
    rollout.close()
