"""The Django-free runner, every mode, in-process with fake backends (milliseconds each)."""

from __future__ import annotations

from inference.backends.retrieval import RetrievalBackend
from inference.prompts import build_messages
from inference.simulation.request import AgentChoice, Defaults, ForkFacts, SimulationRequest
from inference.simulation.runner import run_simulation
from inference.simulation.sink import MemorySink
from inference.simulation.world import RecordedStep, WorldContext
from inference.types import Turn
from tests.support.fake_backends import ScriptedAgent, ScriptedBackend

RECORDED = [
    ("ls /srv/app", "app.py\nrequirements.txt"),
    ("cat /srv/app/requirements.txt", "flask==3.0.2"),
    ("python -V", "Python 3.12.1"),
    ("pip list | grep -i flask", "Flask 3.0.2"),
]
SYSTEM = "You simulate a Linux shell."
AGENT = AgentChoice("agent-model", "http://127.0.0.1:9/v1")
TASK = "Find the Flask version."


def world(fork: int, steps=RECORDED, *, awb_prompts: bool = False) -> WorldContext:
    history = (Turn(action=a, observation=o) for a, o in steps[:fork])  # a stream: read once
    recorded = [
        RecordedStep(
            i,
            a,
            state=f"cwd=/srv ({i})",
            raw_prompt=f"### Turn {i + 1}\n\n**Action:**\n{a}" if awb_prompts else "",
        )
        for i, (a, _) in enumerate(steps)
        if i >= fork
    ]
    return WorldContext(
        domain="terminal",
        task_instruction=TASK,
        system_prompt=SYSTEM,
        history=history,
        recorded=recorded,
    )


def request(fork: int, action: str | None = None, steps=RECORDED, **data) -> SimulationRequest:
    recorded = steps[fork][0] if fork < len(steps) else None
    return SimulationRequest.build(
        {"fork_index": fork, "action": action, "backend": "retrieval", **data},
        fork=ForkFacts(step_count=len(steps), recorded_action=recorded, domain="terminal"),
        defaults=Defaults(agent=AGENT),
    )


def test_next_sends_one_prompt_sampled_n_times_and_stores_each_future():
    backend = ScriptedBackend()
    sink = MemorySink()
    outcome = run_simulation(request(2, "python3 -V", n=3), world(2), backend, sink)
    assert outcome.status == "succeeded", outcome.error
    assert len(backend.requests) == 1
    sent = backend.requests[0]
    assert sent.branches is None and sent.params.n == 3  # the backend can share the prefix
    history = [Turn(a, o) for a, o in RECORDED[:2]]
    current = Turn("python3 -V", state="cwd=/srv (2)")
    assert sent.messages == build_messages(SYSTEM, history, current, TASK)
    assert sorted(sink.steps) == [0, 1, 2]
    for sample, steps in sink.steps.items():
        (step,) = steps
        assert (step.index, step.action, step.provenance) == (2, "python3 -V", "edited")
        assert step.observation == f"ran python3 -V #{sample}"
        assert step.thinking == f"sample {sample}" and step.parse_status == "well_formed"
        assert step.state == "cwd=/srv (2)" and step.meta["backend"] == "retrieval"
        assert step.timings["tokens_out"] > 0
    assert sink.finished == {i: ("succeeded", "") for i in range(3)}
    assert outcome.totals.progress == 1.0 and sink.figures[-1].progress == 1.0
    # the scripted backend's 15 tokens in 2 ms are no speed to show (`rates`)
    assert outcome.totals.tokens_per_s is None and outcome.totals.tokens_out > 0
    assert sink.phases[:2] == ["prefill", "decoding"]
    assert sink.latest[0].phase == "step done" and "ran python3 -V #0" in sink.latest[0].text


def test_the_recorded_action_is_simulated_not_edited_and_json_reindenting_is_no_edit():
    steps = [('{"name": "get", "arguments": {"id": 1}}', '{"ok": true}')]
    sink = MemorySink()
    run_simulation(request(0, steps=steps), world(0, steps), ScriptedBackend(), sink)
    assert sink.steps[0][0].provenance == "replayed"
    pretty = '{\n  "name": "get",\n  "arguments": {"id": 1}\n}\r\n'
    req = request(0, pretty, steps=steps)
    assert not req.edited
    sink = MemorySink()
    backend = ScriptedBackend()
    run_simulation(req, world(0, steps), backend, sink)
    assert sink.steps[0][0].provenance == "replayed"
    # the recorded action is what the model is sent and what the step stores, verbatim
    assert sink.steps[0][0].action == steps[0][0]
    assert backend.requests[0].messages[-1]["content"].endswith(steps[0][0])


def test_replay_feeds_each_future_its_own_predictions():
    backend = ScriptedBackend()
    sink = MemorySink()
    req = request(1, "cat /srv/app/README", mode="replay", n=2)
    outcome = run_simulation(req, world(1, awb_prompts=True), backend, sink)
    assert outcome.status == "succeeded", outcome.error
    assert len(backend.requests) == 3  # one backend call per step, futures batched
    assert backend.requests[0].params.n == 2  # same prompt at the fork
    later = backend.requests[1]
    assert later.branches is not None and len(later.branches) == 2
    for sample in (0, 1):
        prompt = later.branches[sample]
        # the future's own predicted observation is in its next prompt, not its sibling's
        assert prompt[-2] == {
            "role": "assistant",
            "content": f"**Environment Observation:**\nran cat /srv/app/README #{sample}",
        }
        # the recorded AgentWorldBench prompt, its action swapped for the edited one
        assert prompt[-3]["content"] == "### Turn 2\n\n**Action:**\ncat /srv/app/README"
        assert prompt[-1]["content"] == "### Turn 3\n\n**Action:**\npython -V"
    for sample in (0, 1):
        steps = sink.steps[sample]
        assert [s.index for s in steps] == [1, 2, 3]
        assert [s.action for s in steps] == ["cat /srv/app/README", "python -V", RECORDED[3][0]]
        assert [s.provenance for s in steps] == ["edited", "replayed", "replayed"]
    assert sink.finished == {0: ("succeeded", ""), 1: ("succeeded", "")}
    # the prefix before the fork is one list of messages shared by both prompts
    p0, p1 = later.branches
    assert all(a is b for a, b in zip(p0[:3], p1[:3], strict=True))


def test_rollout_until_the_agents_final_answer():
    per_future: dict[int, int] = {}

    def decide(messages):
        # which future: the observation of the fork step (one request for both) names it
        sample = int(messages[5]["content"].rsplit("#", 1)[1])
        k = per_future[sample] = per_future.get(sample, 0) + 1
        if sample == 0 and k == 2:
            return "FINAL: flask 3.0.2"
        return f"echo step{k} #{sample}"

    agent = ScriptedAgent(decide)
    backend = ScriptedBackend()
    sink = MemorySink()
    req = request(1, None, mode="rollout", max_steps=4, n=2)
    outcome = run_simulation(req, world(1), backend, sink, agent=agent)
    assert outcome.status == "succeeded", outcome.error
    # future 0: fork step, agent step, then a final answer at step 3
    assert [(s.index, s.provenance) for s in sink.steps[0]] == [
        (1, "replayed"),
        (2, "agent"),
        (3, "agent"),
    ]
    assert sink.steps[0][-1].meta["final_answer"] and sink.steps[0][-1].action == "flask 3.0.2"
    assert sink.steps[0][1].meta["agent_thinking"] == "why echo step1 #0"
    # future 1 runs its whole budget of 4 steps
    assert [s.index for s in sink.steps[1]] == [1, 2, 3, 4]
    assert [s.action for s in sink.steps[1][1:]] == [f"echo step{k} #1" for k in (1, 2, 3)]
    # the agent sees the recorded history, then only its own future's steps
    first = agent.calls[0]
    assert first[2] == {"role": "assistant", "content": f"<action>{RECORDED[0][0]}</action>"}
    assert first[3] == {"role": "user", "content": f"Observation:\n{RECORDED[0][1]}"}
    assert outcome.totals.progress == 1.0


def test_rollout_of_several_steps_without_an_agent_fails_readably():
    sink = MemorySink()
    req = SimulationRequest.build(
        {"fork_index": 1, "mode": "rollout", "max_steps": 3, "backend": "retrieval"},
        fork=ForkFacts(step_count=4, recorded_action="x"),
        defaults=Defaults(agent=AGENT),
    )
    outcome = run_simulation(req, world(1), ScriptedBackend(), sink)
    assert outcome.status == "failed" and "needs an agent model" in outcome.error
    assert set(sink.finished.values()) == {("failed", outcome.error)}


def test_cancel_stops_the_run_and_settles_every_future():
    sink = MemorySink(cancel_after=2)
    outcome = run_simulation(
        request(1, mode="replay", n=2), world(1), ScriptedBackend(chunks=10), sink
    )
    assert outcome.status == "cancelled" and outcome.error == ""
    assert set(sink.finished.values()) == {("cancelled", "")}
    assert not sink.steps  # nothing half-written


def test_backend_errors_fail_the_job_or_only_their_future():
    sink = MemorySink()
    outcome = run_simulation(
        request(1, n=2), world(1), ScriptedBackend(raise_error="connection refused"), sink
    )
    assert outcome.status == "failed"
    assert outcome.error == "The retrieval backend failed: connection refused"
    assert sink.finished == {0: ("failed", outcome.error), 1: ("failed", outcome.error)}

    sink = MemorySink()
    req = request(1, "ls -la", mode="replay", n=3)
    outcome = run_simulation(req, world(1), ScriptedBackend(errors={1: "HTTP 500"}), sink)
    assert outcome.status == "succeeded"
    assert outcome.error == "1 of 3 futures failed: HTTP 500"
    assert sink.finished[1] == ("failed", "HTTP 500") and 1 not in sink.steps
    assert [len(sink.steps[s]) for s in (0, 2)] == [3, 3]

    sink = MemorySink()
    outcome = run_simulation(
        request(1, n=2), world(1), ScriptedBackend(errors={0: "x", 1: "HTTP 503"}), sink
    )
    assert outcome.status == "failed" and outcome.error == "All 2 futures failed: x"


def test_time_limit_ends_the_run_with_a_readable_message():
    now = iter(range(1000))
    outcome = run_simulation(
        request(1, mode="replay"),
        world(1),
        ScriptedBackend(),
        MemorySink(),
        time_limit_s=3,
        clock=lambda: float(next(now)),
    )
    assert outcome.status == "failed"
    assert "ran past its time limit of 3 s" in outcome.error


def test_a_new_step_after_the_last_one():
    sink = MemorySink()
    req = request(4, "pip show flask")
    assert req.edited
    outcome = run_simulation(req, world(4), ScriptedBackend(), sink)
    assert outcome.status == "succeeded"
    (step,) = sink.steps[0]
    assert (step.index, step.provenance, step.state) == (4, "edited", "")


def test_a_step_whose_action_an_agent_wrote_says_so_and_is_asked_whole():
    """An episode's step: the outside agent's action (not an edit), no token stream."""
    sink = MemorySink()
    backend = ScriptedBackend()
    outcome = run_simulation(
        request(4, "pip show flask"), world(4), backend, sink, stream=False,
        fork_provenance="agent",
    )  # fmt: skip
    assert outcome.status == "succeeded"
    (step,) = sink.steps[0]
    assert step.provenance == "agent" and step.observation == "ran pip show flask #0"
    assert backend.streamed == [False]


def test_retrieval_baseline_is_labelled_and_shows_no_rate():
    corpus = [("terminal", a, o) for a, o in RECORDED]
    sink = MemorySink()
    outcome = run_simulation(request(1, n=2), world(1), RetrievalBackend(corpus), sink)
    assert outcome.status == "succeeded"
    assert outcome.totals.tokens_per_s is None
    assert sink.steps[0][0].observation == "flask==3.0.2"  # the recorded answer itself
    assert sink.steps[0][0].meta["baseline"] == "retrieval (non-neural)"
    assert all(p.tokens_per_s == 0 for p in sink.latest.values())
