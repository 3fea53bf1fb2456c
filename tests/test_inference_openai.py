"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (tests/support)."""

from __future__ import annotations

import threading

import pytest

from inference.backends import BackendError, make_backend
from inference.backends.openai_compat import OpenAIBackend
from inference.parsing import parse_prediction
from inference.prompts import build_messages, build_system_prompt
from inference.types import GenerationRequest, SamplingParams, Turn
from tests.support.fake_openai import fake_openai_server

MESSAGES = build_messages(
    build_system_prompt("terminal"),
    [Turn(action="ls", observation="a.txt")],
    Turn(action="cat a.txt"),
    task_instruction="Read the file.",
)


def fast_backend(base_url: str, **kw) -> OpenAIBackend:
    """Short backoff so retry tests are quick."""
    kw.setdefault("model", "m")
    return OpenAIBackend(base_url=base_url, backoff_s=0.01, timeout=10, **kw)


def test_n_samples_of_one_prompt_go_in_one_request_with_n():
    def responder(req, i):
        return [f"<predicted_observation>s{k}</predicted_observation>" for k in range(req["n"])]

    with fake_openai_server(responder) as srv:
        backend = make_backend("openai", base_url=srv, model="world")
        out = backend.generate(
            GenerationRequest(
                messages=MESSAGES,
                params=SamplingParams(n=3, seed=7, temperature=0.6, top_p=0.9, max_tokens=99),
            )
        )
    assert [parse_prediction(c.text).observation for c in out] == ["s0", "s1", "s2"]
    assert len(srv.requests) == 1
    req = srv.requests[0]
    assert req["n"] == 3 and req["seed"] == 7 and req["model"] == "world"
    assert req["temperature"] == 0.6 and req["top_p"] == 0.9 and req["max_tokens"] == 99
    assert req["messages"] == MESSAGES  # exactly the messages we built
    assert all(c.tokens_in > 0 for c in out)
    assert sum(c.tokens_out for c in out) == 3  # one word each in the fake's usage
    assert all(c.finish_reason == "stop" for c in out)


def collect(events):
    """A stream callback recording the events and never asking to stop."""
    return lambda e: events.append(e) and False


@pytest.mark.parametrize("stream", [False, True])
def test_server_rejecting_n_falls_back_to_one_request_per_sample(stream):
    def responder(req, i):
        if req.get("n", 1) > 1:
            return 400, "n > 1 is not supported"
        return f"sample seed={req.get('seed')}"

    with fake_openai_server(responder) as srv:
        backend = fast_backend(srv)
        out = backend.generate(
            GenerationRequest(messages=MESSAGES, params=SamplingParams(n=3, seed=10)),
            on_event=collect([]) if stream else None,
        )
    assert [c.text for c in out] == ["sample seed=10", "sample seed=11", "sample seed=12"]
    assert len(srv.requests) == 4  # the rejected one, then 3 single samples
    assert [r.get("stream", False) for r in srv.requests] == [stream] * 4
    # a 4xx may be of these sampling parameters: the next call asks with n again
    assert backend.use_n is True


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_ignoring_n_keeps_its_choice_and_samples_the_rest_apart(stream):
    def responder(req, i):
        return f"seed={req.get('seed')} n={req.get('n', 1)}"

    with fake_openai_server(responder, ignore_n=True) as srv:
        backend = fast_backend(srv)
        request = GenerationRequest(messages=MESSAGES, params=SamplingParams(n=3, seed=5))
        events = []
        out = backend.generate(request, on_event=collect(events) if stream else None)
        assert [c.text for c in out] == ["seed=5 n=3", "seed=6 n=1", "seed=7 n=1"]
        assert all(c.finish_reason == "stop" and c.tokens_out > 0 for c in out)
        assert [(r.get("n"), r["seed"]) for r in srv.requests] == [(3, 5), (None, 6), (None, 7)]
        if stream:
            for s in range(3):  # every sample ends with its own done event
                assert [e.text for e in events if e.sample == s and e.phase == "done"] == [
                    out[s].text
                ]
        # remembered: the next call goes straight to one request per sample
        assert backend.use_n is False
        srv.requests.clear()
        again = backend.generate(request, on_event=collect([]) if stream else None)
    assert [c.text for c in again] == ["seed=5 n=1", "seed=6 n=1", "seed=7 n=1"]
    assert [r.get("n") for r in srv.requests] == [None] * 3


def test_retries_on_5xx_and_429_then_succeeds():
    script = [(500, "boom"), (429, "slow down"), (503, "busy")]

    def responder(req, i):
        return script[i] if i < len(script) else "<predicted_observation>ok</predicted_observation>"

    with fake_openai_server(responder) as srv:
        out = fast_backend(srv).generate(GenerationRequest(messages=MESSAGES))
    assert [c.text for c in out] == ["<predicted_observation>ok</predicted_observation>"]
    assert len(srv.requests) == 4


def test_no_retry_on_400_and_a_readable_error():
    with fake_openai_server(lambda req, i: (400, "maximum context length exceeded")) as srv:
        with pytest.raises(BackendError) as exc:
            fast_backend(srv).generate(GenerationRequest(messages=MESSAGES))
    assert len(srv.requests) == 1
    assert "HTTP 400" in str(exc.value) and "maximum context length" in str(exc.value)
    assert srv.base_url in str(exc.value)


def test_gives_up_after_max_retries_on_persistent_5xx():
    with fake_openai_server(lambda req, i: (502, "bad gateway")) as srv:
        with pytest.raises(BackendError, match=r"HTTP 502 after 3 attempts"):
            fast_backend(srv, max_retries=2).generate(GenerationRequest(messages=MESSAGES))
    assert len(srv.requests) == 3


def test_connection_refused_is_retried_then_reported():
    # A port where nothing listens: bind a server, note its port, close it.
    with fake_openai_server() as srv:
        dead = srv.base_url
    with pytest.raises(BackendError, match=r"failed after 2 attempts") as caught:
        fast_backend(dead, max_retries=1).generate(GenerationRequest(messages=MESSAGES))
    # the message says why the connection failed, not only "Connection error."
    assert "refused" in str(caught.value).lower()


@pytest.mark.parametrize(
    ("stream", "late"),
    [(False, {"delay_s": 1.0}), (True, {"delay_s": 1.0}), (True, {"chunk_delay_s": 1.0})],
    ids=["answer", "stream-headers", "stream-chunks"],
)
def test_a_timeout_is_reported_without_retries(stream, late):
    # the fake answers (or streams its chunks) after 1 s, past the client's 0.3 s
    with fake_openai_server(lambda req, i: "late", **late) as srv:
        backend = OpenAIBackend(base_url=srv, model="m", timeout=0.3, max_retries=3, backoff_s=0.01)
        with pytest.raises(BackendError) as caught:
            backend.generate(
                GenerationRequest(messages=MESSAGES), on_event=collect([]) if stream else None
            )
    assert len(srv.requests) == 1
    message = str(caught.value)
    assert "timed out after 0.3 s" in message and "not retried" in message
    assert "raise the endpoint's timeout" in message


def test_streaming_reports_progress_per_sample():
    texts = {0: "<predicted_observation>alpha beta gamma</predicted_observation>", 1: "second one"}

    with fake_openai_server(lambda req, i: texts[i]) as srv:
        events = []
        out = fast_backend(srv).generate(
            GenerationRequest(branches=[MESSAGES, MESSAGES[:-1] + [MESSAGES[-1]]]),
            on_event=lambda e: events.append(e) or False,
        )
    assert all(r["stream"] is True for r in srv.requests)
    by_sample = {s: [e for e in events if e.sample == s] for s in (0, 1)}
    for s, evs in by_sample.items():
        assert evs[0].phase == "prefill"
        assert evs[-1].phase == "done" and evs[-1].text == out[s].text
        decoding = [e for e in evs if e.phase == "decoding"]
        assert len(decoding) > 1  # several partial texts, each a prefix of the next
        assert all(
            a.text == b.text[: len(a.text)] for a, b in zip(decoding, decoding[1:], strict=False)
        )
    assert {c.text for c in out} == set(texts.values())
    assert all(c.tokens_out > 0 and c.tokens_in > 0 for c in out)


def test_streamed_samples_of_one_prompt_go_in_one_request_with_n():
    texts = [
        f"<predicted_observation>s{k} {'w ' * (3 + k)}</predicted_observation>" for k in range(3)
    ]

    with fake_openai_server(lambda req, i: texts[: req.get("n", 1)]) as srv:
        events = []
        out = fast_backend(srv).generate(
            GenerationRequest(messages=MESSAGES, params=SamplingParams(n=3, seed=7)),
            on_event=collect(events),
        )
    assert len(srv.requests) == 1
    req = srv.requests[0]
    assert req["stream"] is True and req["n"] == 3 and req["seed"] == 7
    assert req["stream_options"] == {"include_usage": True}
    # the fake interleaves the choices' chunks: each sample gets only its own
    assert [c.text for c in out] == texts
    for s in range(3):
        evs = [e for e in events if e.sample == s]
        assert evs[0].phase == "prefill" and evs[-1].phase == "done"
        assert evs[-1].text == texts[s]
        decoding = [e for e in evs if e.phase == "decoding"]
        assert len(decoding) > 1
        assert all(texts[s].startswith(e.text) for e in decoding)
        assert [e.tokens_out for e in decoding] == list(range(1, len(decoding) + 1))
    # all prefill events come first, before any sample decodes
    assert [e.phase for e in events[:3]] == ["prefill"] * 3
    # usage is per request: its completion tokens are shared out among the samples
    assert sum(c.tokens_out for c in out) == sum(len(t.split()) for t in texts)
    assert all(c.tokens_in > 0 and c.finish_reason == "stop" for c in out)
    assert all(c.prefill_s > 0 and c.decode_s >= 0 for c in out)


def test_streaming_branch_can_be_stopped_by_the_callback():
    long_text = "word " * 200
    with fake_openai_server(lambda req, i: long_text, chunk_delay_s=0.001) as srv:
        events = []

        def stop_sample_0(e):
            events.append(e)
            return e.sample == 0 and len(e.text) >= 20

        out = fast_backend(srv).generate(
            GenerationRequest(messages=MESSAGES, params=SamplingParams(n=2, seed=1)),
            on_event=stop_sample_0,
        )
    assert out[0].finish_reason == "cancelled" and out[0].text == long_text[:20]
    assert out[1].finish_reason == "stop" and out[1].text == long_text
    assert [(r["n"], r["seed"]) for r in srv.requests] == [(2, 1)]  # one request for both
    # the stopped sample's later chunks were dropped: its done event is its last
    sample_0 = [e for e in events if e.sample == 0]
    assert [e.phase for e in sample_0[-2:]] == ["decoding", "done"]
    assert sample_0[-1].text == long_text[:20] and out[0].tokens_out == 5


def test_the_stream_closes_once_every_sample_is_stopped():
    long_text = "word " * 200
    with fake_openai_server(lambda req, i: long_text) as srv:
        held = threading.Event()
        srv.holds = {12: held}  # each choice stops after 12 chunks until the test says
        backend = fast_backend(srv)
        results = []

        def run():
            results.append(
                backend.generate(
                    GenerationRequest(messages=MESSAGES, params=SamplingParams(n=2)),
                    on_event=lambda e: len(e.text) >= 8,
                )
            )

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(timeout=10)  # returns only if the client stopped reading by itself
        stopped_early = not held.is_set() and not worker.is_alive()
        held.set()
        worker.join(timeout=10)
    assert stopped_early
    out = results[0]
    assert [c.finish_reason for c in out] == ["cancelled", "cancelled"]
    assert [c.text for c in out] == [long_text[:8]] * 2
    assert [c.tokens_out for c in out] == [2, 2]  # no usage came: the chunks are counted
    assert len(srv.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_branches_wait_for_the_first_prefill_then_share_the_prefix_cache(stream):
    branches = [
        MESSAGES[:-1] + [{"role": "user", "content": f"{MESSAGES[-1]['content']} #{k}"}]
        for k in range(5)
    ]
    # a slow first chunk (or answer): requests sent at once would arrive before it
    pace = {"chunk_delay_s": 0.02} if stream else {"delay_s": 0.05}
    with fake_openai_server(lambda req, i: "x y z", **pace) as srv:
        out = fast_backend(srv, concurrency=3).generate(
            GenerationRequest(branches=branches, params=SamplingParams(seed=3)),
            on_event=collect([]) if stream else None,
        )
    assert [c.text for c in out] == ["x y z"] * 5
    assert srv.requests[0]["messages"] == branches[0]
    assert sorted(r["seed"] for r in srv.requests) == [3, 4, 5, 6, 7]
    timeline = srv.timeline
    first_done = timeline.index(("first_token" if stream else "answered", 0))
    arrivals = [timeline.index(("arrive", k)) for k in range(1, 5)]
    assert all(a > first_done for a in arrivals)
    assert srv.max_in_flight <= 3


def test_branches_run_concurrently_up_to_the_limit():
    with fake_openai_server(lambda req, i: "x", delay_s=0.3) as srv:
        backend = fast_backend(srv, concurrency=3)
        out = backend.generate(GenerationRequest(branches=[MESSAGES] * 7))
    assert len(out) == 7
    assert srv.max_in_flight == 3


def test_concurrency_limit_holds_across_simultaneous_calls():
    with fake_openai_server(lambda req, i: "x", delay_s=0.2) as srv:
        backend = fast_backend(srv, concurrency=2)
        threads = [
            threading.Thread(
                target=backend.generate, args=(GenerationRequest(branches=[MESSAGES] * 3),)
            )
            for _ in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(srv.requests) == 9
    assert srv.max_in_flight == 2


def test_one_failing_branch_is_marked_and_others_kept():
    def responder(req, i):
        return (400, "bad branch") if "BAD" in req["messages"][-1]["content"] else "fine"

    bad = MESSAGES[:-1] + [{"role": "user", "content": "### Turn 2\n\n**Action:**\nBAD"}]
    with fake_openai_server(responder) as srv:
        out = fast_backend(srv).generate(GenerationRequest(branches=[MESSAGES, bad]))
    assert out[0].text == "fine" and out[0].finish_reason == "stop"
    assert out[1].finish_reason == "error" and "bad branch" in out[1].error


def test_model_name_defaults_to_the_served_model():
    with fake_openai_server(model="qwen-agentworld") as srv:
        backend = make_backend("openai", base_url=srv)
        backend.generate(GenerationRequest(messages=MESSAGES))
        backend.generate(GenerationRequest(messages=MESSAGES))
    assert backend.model == "qwen-agentworld"
    assert srv.requests[0]["model"] == "qwen-agentworld"
    assert srv.model_list_calls == 1


def test_make_backend_errors():
    with pytest.raises(BackendError, match="needs a base_url"):
        make_backend("openai")
    with pytest.raises(BackendError, match="unknown backend 'gpt'"):
        make_backend("gpt")


class ReasoningServer:
    """vLLM/SGLang with a reasoning parser: the thinking comes in `reasoning_content`, apart
    from the content (a real HTTP server on 127.0.0.1; the shared fake does not split it)."""

    THINKING = ["the agent ", "reads a.txt"] + ["; still thinking"] * 40
    CONTENT = ["<predicted_observation>", "hello", "</predicted_observation>"]

    def __init__(self):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                base = {"id": "r", "created": 0, "model": "m"}
                if not body.get("stream"):
                    message = {
                        "role": "assistant",
                        "content": "".join(outer.CONTENT),
                        "reasoning_content": "".join(outer.THINKING),
                    }
                    choice = {"index": 0, "message": message, "finish_reason": "stop"}
                    data = json.dumps({**base, "object": "chat.completion", "choices": [choice]})
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data.encode())
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                deltas = [{"reasoning_content": t} for t in outer.THINKING]
                deltas += [{"content": t} for t in outer.CONTENT]
                try:
                    for delta in deltas:
                        choice = {"index": 0, "delta": delta, "finish_reason": None}
                        chunk = {**base, "object": "chat.completion.chunk", "choices": [choice]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_thinking_split_off_by_a_reasoning_parser_is_kept_and_streams():
    thinking = "".join(ReasoningServer.THINKING)
    with ReasoningServer() as srv:
        backend = fast_backend(srv.base_url)
        plain = backend.generate(GenerationRequest(messages=MESSAGES))[0]
        events = []
        streamed = backend.generate(
            GenerationRequest(messages=MESSAGES), on_event=lambda e: events.append(e) and False
        )[0]
        # a stop asked while the model still thinks ends the stream there
        stopped = backend.generate(
            GenerationRequest(messages=MESSAGES), on_event=lambda e: e.tokens_out >= 3
        )[0]
    for completion in (plain, streamed):
        parsed = parse_prediction(completion.text)
        assert (parsed.observation, parsed.status) == ("hello", "well_formed")
        assert parsed.thinking == thinking  # the raw output and the thinking are kept
    # progress shows while the model thinks, before any content arrives
    assert any(e.phase == "decoding" and e.text.startswith("<think>the agent") for e in events)
    assert stopped.finish_reason == "cancelled"
    assert "<predicted_observation>" not in stopped.text
