"""Decoding speeds are shown only once they mean something (`inference.simulation.rates`):
never "335008.4 tok/s" at the first token; "…" until enough time and tokens have passed."""

from __future__ import annotations

from django.template import Context, Template

from inference.simulation.rates import MIN_TOKENS, MIN_TOTAL_WINDOW_S, MIN_WINDOW_S, decode_rate
from inference.simulation.runner import run_simulation
from inference.simulation.sink import MemorySink
from inference.types import StreamEvent
from tests.support.fake_backends import ScriptedBackend
from tests.test_simulation_runner import request, world


def test_the_rule():
    # the first token, microseconds after it came: no figure
    assert decode_rate(1, 0.000003) is None
    # many tokens, too soon; or long enough, too few tokens
    assert decode_rate(200, MIN_WINDOW_S / 2) is None
    assert decode_rate(MIN_TOKENS - 1, 3.0) is None
    assert decode_rate(MIN_TOKENS, MIN_WINDOW_S) == round(MIN_TOKENS / MIN_WINDOW_S, 1)
    assert decode_rate(120, 2.0) == 60.0
    assert decode_rate(None, 2.0) is None and decode_rate(10, None) is None
    assert (
        decode_rate(10, -1.0, min_window_s=0) is None
        and decode_rate(10, 0.0, min_window_s=0) is None
    )
    # a job's total over whole outputs: a shorter window will do, not a zero one
    assert decode_rate(40, 0.02, min_window_s=MIN_TOTAL_WINDOW_S) == 2000.0
    assert decode_rate(40, 0.001, min_window_s=MIN_TOTAL_WINDOW_S) is None


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _SlowStream(ScriptedBackend):
    """One token per event, each `step` seconds after the last on the runner's clock."""

    def __init__(self, clock: _Clock, step: float, tokens: int):
        super().__init__()
        self.clock, self.step, self.tokens = clock, step, tokens
        self.seen: list[float | None] = []

    def generate(self, request, on_event=None):
        self.requests.append(request)
        sink_rates = self.seen
        on_event(StreamEvent(sample=0, text="", tokens_out=0, phase="prefill"))
        for k in range(1, self.tokens + 1):
            on_event(StreamEvent(sample=0, text="x" * k, tokens_out=k))
            sink_rates.append(self.sink.latest[0].tokens_per_s)
            self.clock.now += self.step
        from inference.types import Completion

        text = "<predicted_observation>ok</predicted_observation>"
        return [
            Completion(
                text=text,
                tokens_in=10,
                tokens_out=self.tokens,
                prefill_s=0.1,
                decode_s=self.step * self.tokens,
                finish_reason="stop",
            )
        ]


def test_live_speed_waits_for_the_window_then_is_the_decode_rate():
    clock = _Clock()
    backend = _SlowStream(clock, step=0.05, tokens=30)  # 20 tokens/s
    sink = MemorySink()
    backend.sink = sink
    outcome = run_simulation(request(2, "ls", n=1), world(2), backend, sink, clock=clock)
    assert outcome.status == "succeeded", outcome.error
    rates = backend.seen
    # first token (no time since): nothing; nor for the first 0.5 s (10 tokens)
    assert rates[0] is None and all(r is None for r in rates[:10])
    shown = [r for r in rates if r is not None]
    assert shown and all(19.0 <= r <= 22.0 for r in shown)  # about 20, never absurd
    assert outcome.totals.tokens_per_s == 20.0


def test_pages_say_measuring_instead_of_a_figure():
    html = Template("{% load branching_tags %}{{ r|rate }}|{{ s|rate }}").render(
        Context({"r": None, "s": 42.25})
    )
    assert html == "…|42.2"


def test_job_page_says_measuring_until_a_future_has_a_speed(researcher_client, project):
    from django.urls import reverse

    from studio.models import SimulationJob
    from tests.support.branching import make_child, make_job, make_trajectory

    t, root = make_trajectory(project, key="rates")
    job = make_job(root, 1, n=2, status="running", backend="openai")
    make_child(root, 1, [], job=job, status="running", sample_index=0, name="future A")
    make_child(root, 1, [], job=job, status="running", sample_index=1, name="future B")
    SimulationJob.objects.filter(pk=job.pk).update(
        live={
            "0": {"phase": "decoding", "tokens_out": 1, "tokens_per_s": None, "text": "<th"},
            "1": {"phase": "decoding", "tokens_out": 40, "tokens_per_s": 38.2, "text": "ok"},
        }
    )
    frag = researcher_client.get(
        reverse("simulation_job", args=[job.pk]), headers={"HX-Request": "true"}
    ).content.decode()
    assert "… tok/s" in frag and "38.2 tok/s" in frag
    assert "The speed shows once 8 tokens and 0.5 s have passed since the first token" in frag
