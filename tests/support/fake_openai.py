"""A REAL OpenAI-compatible HTTP server on 127.0.0.1 for tests (a remote model API cannot run
here). It implements what our backends and commands use:

- `POST /v1/chat/completions` with `n`, `seed`, `max_tokens`, and `stream` (server-sent events,
  with a final usage chunk when `stream_options.include_usage` is set);
- `GET /v1/models`.

`responder(request_json, index)` scripts the answers; `index` is the 0-based sequence number of
the chat request. It returns the text of every choice (str), one text per choice (list[str];
the choices of a stream come interleaved, as vLLM sends them), or
`(status, body)` to fail the request with that HTTP status (body: str or dict, sent as an
OpenAI-style error), or a dict: the assistant message itself (e.g. {"content": None,
"tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}, answered
whole, with finish_reason "tool_calls" when it has any). Every request is recorded.

`ignore_n=True` answers one choice whatever `n` asks, as a server that does not take `n`.
`srv.timeline` records, in order, `("arrive", i)` when chat request i comes, `("first_token", i)`
when its first content is written and `("answered", i)` when its answer is complete (how a test
sees which request waited for which).

`hold_after_chunks=K` makes every stream stop after the first K chunks of each choice until the
test sets `srv.release` (or the server shuts down): a job that stays running, without timing.
For more stops, set `srv.holds = {chunk_number: threading.Event(), ...}` at any time.

    with fake_openai_server(lambda req, i: "<predicted_observation>ok</predicted_observation>") as srv:
        backend = make_backend("openai", base_url=srv.base_url, model="m")
        ...
        srv.requests  # the JSON bodies received, in order
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict, int], "str | list[str] | tuple[int, Any] | dict[str, Any]"]


def default_responder(request: dict, index: int) -> str:
    return (
        f"<think>request {index}</think><predicted_observation>ok {index}</predicted_observation>"
    )


def count_tokens(text: str) -> int:
    """The fake's notion of a token: whitespace-separated words (enough for usage figures)."""
    return len(text.split())


def split_chunks(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeOpenAIServer(str):
    """The server's base URL (a str, ending with /v1, so it can be passed wherever a base_url
    goes) carrying what the server saw: `requests` (chat request bodies in arrival order),
    `model_list_calls`, `max_in_flight` (most chat requests served at once)."""

    def __new__(cls, base_url: str, model: str = "fake-world-model"):
        obj = super().__new__(cls, base_url)
        obj.model = model
        obj.requests = []
        obj.authorizations = []  # the Authorization header of each chat request
        obj.model_list_calls = 0
        obj.timeline = []  # ("arrive" | "first_token" | "answered", request index), in order
        obj.in_flight = 0
        obj.max_in_flight = 0
        obj.lock = threading.Lock()
        obj.release = threading.Event()
        obj.holds = {}  # chunk number (of each choice) -> Event a stream waits for there
        obj.stopped = threading.Event()  # set when the server shuts down
        return obj

    @property
    def base_url(self) -> str:
        return str.__str__(self)


def _make_handler(
    state: FakeOpenAIServer,
    responder: Responder,
    delay_s: float,
    chunk_delay_s: float,
    hold_after_chunks: int | None = None,
    ignore_n: bool = False,
):
    def note(kind: str, index: int) -> None:
        with state.lock:
            state.timeline.append((kind, index))

    class Handler(BaseHTTPRequestHandler):
        # keep-alive, as model servers do (a JSON answer carries its length); a stream has
        # no length and closes its connection
        protocol_version = "HTTP/1.1"
        # headers and body go out in separate writes: without TCP_NODELAY the client's
        # delayed ACK holds the body back ~40 ms on a kept-alive connection
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                with state.lock:
                    state.model_list_calls += 1
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": state.model, "object": "model", "owned_by": "fake"}],
                    },
                )
            else:
                self._json(
                    404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                )

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(
                    404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                )
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                index = len(state.requests)
                state.requests.append(body)
                state.authorizations.append(self.headers.get("Authorization", ""))
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                state.timeline.append(("arrive", index))
            try:
                if delay_s:
                    time.sleep(delay_s)
                self._answer(body, index)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _answer(self, body: dict, index: int) -> None:
            n = 1 if ignore_n else int(body.get("n") or 1)
            result = responder(body, index)
            if isinstance(result, tuple):
                status, err = result
                if isinstance(err, str):
                    err = {"error": {"message": err, "type": "fake_error", "code": status}}
                self._json(status, err)
                return
            if isinstance(result, dict):
                self._message(body, index, result)
                return
            texts = result if isinstance(result, list) else [result] * n
            if ignore_n:
                texts = texts[:1]
            prompt_tokens = sum(count_tokens(m.get("content") or "") for m in body["messages"])
            created = int(time.time())
            if body.get("stream"):
                self._stream(body, index, texts, prompt_tokens, created)
                return
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": t},
                    "finish_reason": "stop",
                }
                for i, t in enumerate(texts)
            ]
            note("first_token", index)
            self._json(
                200,
                {
                    "id": f"chatcmpl-{index}",
                    "object": "chat.completion",
                    "created": created,
                    "model": body.get("model", state.model),
                    "choices": choices,
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sum(count_tokens(t) for t in texts),
                        "total_tokens": prompt_tokens + sum(count_tokens(t) for t in texts),
                    },
                },
            )
            note("answered", index)

        def _message(self, body: dict, index: int, message: dict) -> None:
            content = message.get("content")
            calls = message.get("tool_calls") or []
            prompt_tokens = sum(
                count_tokens(m.get("content") or "")
                for m in body["messages"]
                if isinstance(m.get("content") or "", str)
            )
            out = count_tokens(content or "") + sum(
                count_tokens(json.dumps(c.get("function") or {})) for c in calls
            )
            note("first_token", index)
            self._json(
                200,
                {
                    "id": f"chatcmpl-{index}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", state.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", **message, "content": content},
                            "finish_reason": "tool_calls" if calls else "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": out,
                        "total_tokens": prompt_tokens + out,
                    },
                },
            )
            note("answered", index)

        def _stream(
            self, body: dict, index: int, texts: list[str], prompt_tokens: int, created: int
        ):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()

            def send(payload: Any) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

            base = {
                "id": f"chatcmpl-{index}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", state.model),
            }
            try:
                for i in range(len(texts)):
                    send({**base, "choices": [{"index": i, "delta": {"role": "assistant"}}]})
                pieces = [split_chunks(t) for t in texts]
                # round-robin over the choices still decoding, as a server batching them does;
                # a hold at K stops every choice after its first K chunks
                for rank in range(max((len(p) for p in pieces), default=0)):
                    hold = state.holds.get(rank)
                    if hold is not None:
                        hold.wait(timeout=300)
                    if chunk_delay_s:
                        # a slow model's pace (a step decodes a token of every choice), cut
                        # short as soon as the server stops
                        state.stopped.wait(chunk_delay_s)
                    if rank == 0:
                        note("first_token", index)
                    for i, choice_pieces in enumerate(pieces):
                        if rank >= len(choice_pieces):
                            continue
                        last = rank == len(choice_pieces) - 1
                        delta = {"content": choice_pieces[rank]}
                        choice = {"index": i, "delta": delta, "finish_reason": None}
                        send({**base, "choices": [choice]})
                        if last:
                            done = {"index": i, "delta": {}, "finish_reason": "stop"}
                            send({**base, "choices": [done]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    out = sum(count_tokens(t) for t in texts)
                    send(
                        {
                            **base,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": prompt_tokens,
                                "completion_tokens": out,
                                "total_tokens": prompt_tokens + out,
                            },
                        }
                    )
                send("[DONE]")
                note("answered", index)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (a stopped branch)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout, stopped stream) is part of what tests exercise.
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@contextmanager
def fake_openai_server(
    responder: Responder | None = None,
    *,
    model: str = "fake-world-model",
    delay_s: float = 0.0,
    chunk_delay_s: float = 0.0,
    hold_after_chunks: int | None = None,
    ignore_n: bool = False,
) -> Iterator[FakeOpenAIServer]:
    """Run the server on a free port of 127.0.0.1 for the duration of the block; yields the
    base URL (a `FakeOpenAIServer` str with `requests`, `max_in_flight`, ...)."""
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = FakeOpenAIServer(f"http://127.0.0.1:{server.server_address[1]}/v1", model)
    server.RequestHandlerClass = _make_handler(
        state,
        responder or default_responder,
        delay_s,
        chunk_delay_s,
        hold_after_chunks,
        ignore_n,
    )
    if hold_after_chunks is not None:
        state.holds = {hold_after_chunks: state.release}
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stopped.set()
        state.release.set()  # held streams end, so their threads do too
        for event in list(state.holds.values()):
            event.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
