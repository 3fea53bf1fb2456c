"""Backend for any OpenAI-compatible chat-completions server (vLLM, SGLang, hosted APIs).

- N samples of one prompt go in ONE request with `n` (servers batch them and share the prefix);
  when the server rejects n > 1 with a 4xx, we fall back to N requests.
- Different prompts (one per branch) go as concurrent requests, at most `concurrency` in flight
  per backend instance (a semaphore shared by all calls).
- With a stream callback each sample is its own streaming request (`stream=True`), so the
  progress of every branch shows, and a branch can be stopped by returning True.
- Retries with exponential backoff on connection errors and timeouts, 429 and 5xx only; other
  4xx are the caller's mistake and fail at once. The client's own retries are off so ours are the
  only ones.
- `seed` is passed through (sample i of a per-sample fan-out gets seed + i so samples differ).
- A server running a reasoning parser (vLLM/SGLang `--reasoning-parser`) sends the thinking apart
  from the content (`reasoning_content` or `reasoning`); it is put back in front of the content as
  a `<think>...</think>` block, so the raw output keeps it, the parser records it as thinking, and
  a streaming branch reports progress (and can be stopped) while the model is still thinking."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inference.backends.errors import BackendError
from inference.types import (
    Completion,
    GenerationRequest,
    Message,
    SamplingParams,
    StreamCallback,
    StreamEvent,
)

_FINISH = {"stop": "stop", "length": "length", "eos": "stop"}


def _reasoning_of(part: Any) -> str:
    """The thinking a reasoning parser split off a message or a stream delta ("" if none)."""
    if part is None:
        return ""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(part, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _with_thinking(reasoning: str, content: str, *, done: bool = True) -> str:
    """Content with the separated thinking put back in front as a think block (which the
    reference parser drops); while it streams and no content has come, the block stays open."""
    if not reasoning:
        return content
    if content or done:
        return f"<think>{reasoning}</think>{content}"
    return f"<think>{reasoning}"


# Clients by (base URL, key, timeout), kept for the life of the process: making one costs
# tens of milliseconds (its TLS context loads the CA bundle), more than a short step of an
# episode; an OpenAI client is safe to share between threads and keeps its connections.
_CLIENTS: dict[tuple[str, str, float], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_MAX_CLIENTS = 32


def shared_client(base_url: str, api_key: str, timeout: float):
    from openai import OpenAI

    key = (base_url, api_key, timeout)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            if len(_CLIENTS) >= _MAX_CLIENTS:
                _CLIENTS.pop(next(iter(_CLIENTS)))  # the oldest; its connections close with it
            client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
            _CLIENTS[key] = client
        return client


class OpenAIBackend:
    name = "openai"
    is_neural = True

    def __init__(
        self,
        *,
        model: str = "",
        base_url: str,
        api_key: str = "EMPTY",
        concurrency: int = 8,
        timeout: float = 600.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        use_n: bool = True,
    ):
        if concurrency < 1:
            raise BackendError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.client = shared_client(self.base_url, api_key or "EMPTY", timeout)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._slots = threading.BoundedSemaphore(concurrency)
        self._model = model
        self.use_n = use_n  # False: the server is known not to take `n`

    @property
    def model(self) -> str:
        """The served model's name: asked from /models when not configured."""
        if not self._model:
            models = self._with_retries(lambda: self.client.models.list(), "GET /models")
            data = list(models.data)
            if not data:
                raise BackendError(f"{self.base_url}/models lists no model; pass a model name")
            self._model = data[0].id
        return self._model

    @model.setter
    def model(self, name: str) -> None:
        self._model = name

    # -- retries -------------------------------------------------------------------------------

    def _with_retries(self, call: Callable[[], Any], what: str) -> Any:
        import openai

        attempt = 0
        while True:
            err: Exception
            try:
                with self._slots:
                    return call()
            except (
                openai.APIConnectionError,
                openai.RateLimitError,
                openai.InternalServerError,
            ) as e:
                retryable, err = True, e
            except openai.APIStatusError as e:
                retryable, err = e.status_code >= 500, e
            except openai.OpenAIError as e:
                raise BackendError(f"{what} at {self.base_url}: {e}") from e
            if not retryable or attempt >= self.max_retries:
                raise BackendError(_describe(err, what, self.base_url, attempt + 1)) from err
            time.sleep(self.backoff_s * (2**attempt))
            attempt += 1

    # -- requests ------------------------------------------------------------------------------

    def _body(self, messages: list[Message], params: SamplingParams, n: int, seed: int | None):
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if n != 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        return body

    def _post(self, body: dict[str, Any], *, stream: bool = False) -> Any:
        """POST /chat/completions. The body is plain JSON already: `chat.completions.create`
        would walk every message of it through the SDK's type-directed transform, which
        cost a quarter of the worker's time per step of an episode with a long history."""
        from openai import Stream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        if stream:
            return self.client.post(
                "/chat/completions",
                body=body,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=Stream[ChatCompletionChunk],
            )
        return self.client.post("/chat/completions", body=body, cast_to=ChatCompletion)

    def _complete_n(self, messages, params: SamplingParams, n: int, seed) -> list[Completion]:
        body = self._body(messages, params, n, seed)
        start = time.perf_counter()
        resp = self._with_retries(lambda: self._post(body), "POST /chat/completions")
        elapsed = time.perf_counter() - start
        choices = sorted(resp.choices, key=lambda c: c.index)
        if len(choices) != n:
            raise BackendError(
                f"{self.base_url}/chat/completions returned {len(choices)} choices, asked for {n}"
            )
        usage = resp.usage
        tokens_in = usage.prompt_tokens if usage else 0
        total_out = usage.completion_tokens if usage else 0
        # Usage is per request; share the completion tokens out among the samples.
        shares = [total_out // n + (1 if i < total_out % n else 0) for i in range(n)]
        return [
            Completion(
                text=_with_thinking(_reasoning_of(c.message), c.message.content or ""),
                tokens_in=tokens_in,
                tokens_out=shares[i],
                decode_s=elapsed,
                finish_reason=_FINISH.get(c.finish_reason or "stop", "stop"),
                reasoning=_reasoning_of(c.message),
                answer=c.message.content or "",
            )
            for i, c in enumerate(choices)
        ]

    def _stream_one(
        self, messages, params: SamplingParams, seed, sample: int, on_event: StreamCallback
    ) -> Completion:
        body = self._body(messages, params, 1, seed)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}

        def run() -> Completion:
            start = time.perf_counter()
            first_at = None
            text, thinking, chunks, finish = [], [], 0, "stop"
            tokens_in = tokens_out = 0
            on_event(StreamEvent(sample=sample, text="", tokens_out=0, phase="prefill"))
            stream = self._post(body, stream=True)
            try:
                for chunk in stream:
                    if chunk.usage:
                        tokens_in = chunk.usage.prompt_tokens
                        tokens_out = chunk.usage.completion_tokens
                    for choice in chunk.choices:
                        delta = choice.delta.content if choice.delta else None
                        thought = _reasoning_of(choice.delta)
                        if delta or thought:
                            if first_at is None:
                                first_at = time.perf_counter()
                            text.append(delta or "")
                            thinking.append(thought)
                            chunks += 1
                            so_far = _with_thinking("".join(thinking), "".join(text), done=False)
                            if on_event(StreamEvent(sample, so_far, chunks)):
                                finish = "cancelled"
                                break
                        if choice.finish_reason:
                            finish = _FINISH.get(choice.finish_reason, "stop")
                    if finish == "cancelled":
                        break
            finally:
                stream.close()
            end = time.perf_counter()
            first_at = first_at or end
            out = _with_thinking("".join(thinking), "".join(text))
            on_event(StreamEvent(sample, out, tokens_out or chunks, phase="done"))
            return Completion(
                text=out,
                tokens_in=tokens_in,
                tokens_out=tokens_out or chunks,
                prefill_s=first_at - start,
                decode_s=end - first_at,
                finish_reason=finish,
                reasoning="".join(thinking),
                answer="".join(text),
            )

        return self._with_retries(run, "POST /chat/completions (stream)")

    # -- the interface -------------------------------------------------------------------------

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]:
        params = request.params
        seed = params.seed
        if request.branches is None and on_event is None and params.n > 1 and self.use_n:
            assert request.messages is not None
            try:
                return self._complete_n(request.messages, params, params.n, seed)
            except BackendError as e:
                import openai

                cause = e.__cause__
                status = cause.status_code if isinstance(cause, openai.APIStatusError) else 0
                if not 400 <= status < 500 or status == 429:
                    raise
                # The server does not take n > 1: one request per sample instead.

        prompts = request.prompts()
        if on_event is not None:
            # Samples stream from pool threads; callers get one event at a time.
            events_lock = threading.Lock()
            user_callback = on_event

            def on_event(event: StreamEvent) -> bool:
                with events_lock:
                    return bool(user_callback(event))

        def sample_seed(i: int) -> int | None:
            return None if seed is None else seed + i

        def one(i: int) -> Completion:
            one_params = SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                seed=sample_seed(i),
                n=1,
            )
            try:
                if on_event is not None:
                    return self._stream_one(prompts[i], one_params, one_params.seed, i, on_event)
                return self._complete_n(prompts[i], one_params, 1, one_params.seed)[0]
            except BackendError as e:
                return Completion(text="", finish_reason="error", error=str(e))

        if len(prompts) == 1:
            results = [one(0)]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
                results = list(pool.map(one, range(len(prompts))))
        failed = [r for r in results if r.finish_reason == "error"]
        if failed and len(failed) == len(results):
            raise BackendError(failed[0].error)
        return results


def _describe(err: Exception, what: str, base_url: str, attempts: int) -> str:
    status = getattr(err, "status_code", None)
    detail = getattr(err, "message", None) or str(err)
    cause = err.__cause__
    if status is None and cause is not None and str(cause) and str(cause) not in detail:
        # "Connection error." alone does not say refused, unknown host or reset: add the cause
        detail = f"{detail.rstrip('.')} ({cause})"
    where = f"{what} at {base_url}"
    tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}"
    if status is not None:
        return f"{where} failed with HTTP {status}{tries}: {detail}"
    return f"{where} failed{tries}: {detail}"
