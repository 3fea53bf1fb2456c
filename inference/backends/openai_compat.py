"""Backend for any OpenAI-compatible chat-completions server (vLLM, SGLang, hosted APIs).

- N samples of one prompt go in ONE request with `n` (the server computes the prompt once and
  batches the samples), streamed when there is a stream callback: the chunks of the choices
  are told apart by `choice.index`, so every sample reports its own progress and a sample can
  be stopped by returning True (the stream closes once every sample is stopped or done).
- A server that rejects n > 1 with a 4xx, or ignores `n` and answers fewer choices, gets one
  request per sample for the samples missing (sample i with seed + i, so samples differ);
  one that ignored `n` is remembered (`use_n` turns False), so later calls ask it no more.
- Different prompts (one per branch, sharing a prefix) go as separate requests: the first
  alone until its prompt is computed, so the server's prefix cache (vLLM's automatic prefix
  caching, SGLang's radix cache) serves the prefix to the others, then the rest concurrently,
  at most `concurrency` in flight per backend instance (a semaphore shared by all calls).
- Retries with exponential backoff on connection errors, 429 and 5xx only; other 4xx are the
  caller's mistake and fail at once, and a timeout is not retried (the same request would
  most likely time out again). The client's own retries are off so ours are the only ones.
- A server running a reasoning parser (vLLM/SGLang `--reasoning-parser`) sends the thinking apart
  from the content (`reasoning_content` or `reasoning`); it is put back in front of the content as
  a `<think>...</think>` block, so the raw output keeps it, the parser records it as thinking, and
  a streaming branch reports progress (and can be stopped) while the model is still thinking."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
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

# What a timed-out request's message says to raise, unless the caller names its setting (an
# episode's step has one; a simulation's requests take the backend's default).
TIMEOUT_SETTING = "the endpoint's timeout"


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
    from openai import DefaultHttpxClient, OpenAI

    key = (base_url, api_key, timeout)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            if len(_CLIENTS) >= _MAX_CLIENTS:
                _CLIENTS.pop(next(iter(_CLIENTS)))  # the oldest; its connections close with it
            client = OpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=timeout,
                max_retries=0,
                http_client=DefaultHttpxClient(follow_redirects=False),
            )
            _CLIENTS[key] = client
        return client


def _shares(total: int, k: int) -> list[int]:
    """`total` tokens split as evenly as can be among k samples: usage is per request."""
    return [total // k + (1 if i < total % k else 0) for i in range(k)]


def _rejects_n(error: BackendError) -> bool:
    """Whether a request with n > 1 was refused as the caller's mistake (a 4xx but 429), so
    that one request per sample is worth a try."""
    import openai

    cause = error.__cause__
    status = cause.status_code if isinstance(cause, openai.APIStatusError) else 0
    return 400 <= status < 500 and status != 429


def _serialized(on_event: StreamCallback | None) -> StreamCallback | None:
    """The callback behind a lock: samples stream from pool threads, and callers expect one
    event at a time."""
    if on_event is None:
        return None
    lock = threading.Lock()

    def relay(event: StreamEvent) -> bool:
        with lock:
            return bool(on_event(event))

    return relay


def _noting_first_token(on_event: StreamCallback, note: Callable[[], None]) -> StreamCallback:
    """The callback, calling `note` too at every decoded chunk (the first one means the
    prompt has been computed)."""

    def relay(event: StreamEvent) -> bool:
        if event.phase == "decoding":
            note()
        return on_event(event)

    return relay


class _Choice:
    """One choice of a streamed request as its chunks arrive."""

    def __init__(self, sample: int, start: float):
        self.sample = sample
        self.start = start  # when the request was sent
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.chunks = 0
        self.first_at: float | None = None
        self.ended_at: float | None = None
        self.finish = ""  # "" while it decodes

    def add(self, part: Any) -> bool:
        """Take a chunk's delta; True when it carried text (progress to report)."""
        content = (part.delta.content if part.delta else None) or ""
        thought = _reasoning_of(part.delta)
        if not (content or thought):
            return False
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.text.append(content)
        self.thinking.append(thought)
        self.chunks += 1
        return True

    def so_far(self, *, done: bool = False) -> str:
        return _with_thinking("".join(self.thinking), "".join(self.text), done=done)

    def end(self, finish: str) -> None:
        self.finish = finish
        self.ended_at = time.perf_counter()

    def completion(self, tokens_in: int, tokens_out: int) -> Completion:
        ended = self.ended_at or time.perf_counter()
        first = self.first_at or ended
        return Completion(
            text=self.so_far(done=True),
            tokens_in=tokens_in,
            tokens_out=tokens_out or self.chunks,
            prefill_s=first - self.start,
            decode_s=ended - first,
            finish_reason=self.finish or "stop",
            reasoning="".join(self.thinking),
            answer="".join(self.text),
        )


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
        timeout_setting: str = TIMEOUT_SETTING,
    ):
        if concurrency < 1:
            raise BackendError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.client = shared_client(self.base_url, api_key or "EMPTY", timeout)
        self.concurrency = concurrency
        self.timeout = timeout
        self.timeout_setting = timeout_setting
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._slots = threading.BoundedSemaphore(concurrency)
        self._model = model
        # False: the server is known not to take `n` (configured so, or it answered fewer
        # choices than asked), and samples go as separate requests
        self.use_n = use_n

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
            except openai.APITimeoutError as e:
                # Before APIConnectionError, its base class: the same request would most
                # likely time out again, and retries of a long timeout hold a job for an hour.
                raise BackendError(
                    f"{what} at {self.base_url} timed out after {self.timeout:g} s (not "
                    f"retried): the model did not answer in time; raise {self.timeout_setting} "
                    "or lower max_tokens"
                ) from e
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

    def _complete(self, body: dict[str, Any], samples: list[int]) -> dict[int, Completion]:
        """One request, choice k being sample `samples[k]`: the completions of the choices
        that came, by sample (a server that ignores `n` answers fewer)."""
        start = time.perf_counter()
        resp = self._with_retries(lambda: self._post(body), "POST /chat/completions")
        elapsed = time.perf_counter() - start
        choices = sorted(
            (c for c in resp.choices if 0 <= c.index < len(samples)), key=lambda c: c.index
        )
        if not choices:
            return {}
        usage = resp.usage
        tokens_in = usage.prompt_tokens if usage else 0
        shares = _shares(usage.completion_tokens if usage else 0, len(choices))
        return {
            samples[c.index]: Completion(
                text=_with_thinking(_reasoning_of(c.message), c.message.content or ""),
                tokens_in=tokens_in,
                tokens_out=share,
                decode_s=elapsed,
                finish_reason=_FINISH.get(c.finish_reason or "stop", "stop"),
                reasoning=_reasoning_of(c.message),
                answer=c.message.content or "",
            )
            for c, share in zip(choices, shares, strict=True)
        }

    def _stream(
        self, body: dict[str, Any], samples: list[int], on_event: StreamCallback
    ) -> dict[int, Completion]:
        """`_complete`, streaming: progress of every choice goes to `on_event`."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        return self._with_retries(
            lambda: self._read_stream(body, samples, on_event), "POST /chat/completions (stream)"
        )

    def _read_stream(
        self, body: dict[str, Any], samples: list[int], on_event: StreamCallback
    ) -> dict[int, Completion]:
        start = time.perf_counter()
        for sample in samples:
            on_event(StreamEvent(sample=sample, text="", tokens_out=0, phase="prefill"))
        choices: dict[int, _Choice] = {}
        usage = None
        stream = self._post(body, stream=True)
        try:
            for chunk in stream:
                usage = chunk.usage or usage
                for part in chunk.choices:
                    if 0 <= part.index < len(samples):
                        self._take(choices, part, samples, start, on_event)
                if _all_stopped(choices, len(samples)):
                    break  # closing the stream is what stops the server generating
        finally:
            stream.close()
        for choice in choices.values():
            if not choice.finish:  # the stream ended without its finish_reason
                choice.end("stop")
                _report_done(choice, on_event)
        ordered = [choices[k] for k in sorted(choices)]
        tokens_in = usage.prompt_tokens if usage else 0
        # no usage (a stream closed early): each sample counts its chunks instead
        shares = _shares(usage.completion_tokens, len(ordered)) if usage else [0] * len(ordered)
        return {c.sample: c.completion(tokens_in, s) for c, s in zip(ordered, shares, strict=True)}

    @staticmethod
    def _take(
        choices: dict[int, _Choice],
        part: Any,
        samples: list[int],
        start: float,
        on_event: StreamCallback,
    ) -> None:
        """One chunk of one choice: progress to report, a stop asked, or its end."""
        choice = choices.get(part.index)
        if choice is None:
            choice = choices[part.index] = _Choice(samples[part.index], start)
        if choice.finish:
            # a cancelled choice of an n-request: the server goes on generating it (a
            # choice cannot be stopped alone), and its chunks are dropped
            return
        if choice.add(part) and on_event(
            StreamEvent(choice.sample, choice.so_far(), choice.chunks)
        ):
            choice.end("cancelled")
        elif part.finish_reason:
            choice.end(_FINISH.get(part.finish_reason, "stop"))
        if choice.finish:
            _report_done(choice, on_event)

    # -- the interface -------------------------------------------------------------------------

    def generate(
        self, request: GenerationRequest, on_event: StreamCallback | None = None
    ) -> list[Completion]:
        params = request.params
        on_event = _serialized(on_event)
        came: dict[int, Completion] = {}
        if request.branches is None and params.n > 1 and self.use_n:
            assert request.messages is not None
            came = self._with_n(request.messages, params, on_event)
        prompts = request.prompts()
        missing = [i for i in range(len(prompts)) if i not in came]
        came.update(self._separately(prompts, missing, params, on_event))
        results = [came[i] for i in range(len(prompts))]
        failed = [r for r in results if r.finish_reason == "error"]
        if failed and len(failed) == len(results):
            raise BackendError(failed[0].error)
        return results

    def _with_n(
        self, messages: list[Message], params: SamplingParams, on_event: StreamCallback | None
    ) -> dict[int, Completion]:
        """The N samples of one prompt as one request with `n`: the server computes the
        prompt once and batches the samples. Returns those that came: none when the server
        refused n > 1, fewer than N when it ignored `n`."""
        samples = list(range(params.n))
        body = self._body(messages, params, params.n, params.seed)
        try:
            if on_event is None:
                came = self._complete(body, samples)
            else:
                came = self._stream(body, samples, on_event)
        except BackendError as e:
            if not _rejects_n(e):
                raise
            # use_n stays: the refusal may be of these sampling parameters, not of n itself
            # (vLLM refused n > 1 with greedy sampling)
            return {}
        if len(came) < params.n:
            # the server ignores `n`: the rest go as separate requests, as do later calls
            self.use_n = False
        return came

    def _separately(
        self,
        prompts: list[list[Message]],
        indices: list[int],
        params: SamplingParams,
        on_event: StreamCallback | None,
    ) -> dict[int, Completion]:
        """One request per sample. The first goes alone until its prompt is computed (its
        first chunk streamed, or its answer came): the prompts share a prefix, which the
        server's prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) then
        serves to the others, where N requests sent at once would each compute it. The rest
        go concurrently, at most `concurrency` at a time."""
        if not indices:
            return {}
        first, rest = indices[0], indices[1:]
        if not rest:
            return {first: self._sample(prompts[first], params, first, on_event)}
        prefilled = threading.Event()
        head_events = None if on_event is None else _noting_first_token(on_event, prefilled.set)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(indices))) as pool:
            head = pool.submit(self._sample, prompts[first], params, first, head_events)
            head.add_done_callback(lambda _: prefilled.set())
            prefilled.wait()
            tail = pool.map(lambda i: self._sample(prompts[i], params, i, on_event), rest)
            results = dict(zip(rest, tail, strict=True))
        results[first] = head.result()
        return results

    def _sample(
        self,
        messages: list[Message],
        params: SamplingParams,
        i: int,
        on_event: StreamCallback | None,
    ) -> Completion:
        """Sample i alone, with seed + i so samples differ; its failure is its own, marked
        on its completion, so the other samples are kept."""
        seed = None if params.seed is None else params.seed + i
        body = self._body(messages, replace(params, n=1, seed=seed), 1, seed)
        try:
            if on_event is None:
                came = self._complete(body, [i])
            else:
                came = self._stream(body, [i], on_event)
            if i not in came:
                raise BackendError(f"{self.base_url}/chat/completions answered no choice")
            return came[i]
        except BackendError as e:
            return Completion(text="", finish_reason="error", error=str(e))


def _all_stopped(choices: dict[int, _Choice], n: int) -> bool:
    """Every choice came and ended, one at least by a stop: the rest of the stream (the
    cancelled ones' tokens, the usage) is not worth waiting for. When all finished by
    themselves the usage chunk follows at once, so the stream is read to its end."""
    ended = [c.finish for c in choices.values() if c.finish]
    return len(ended) == n and "cancelled" in ended


def _report_done(choice: _Choice, on_event: StreamCallback) -> None:
    on_event(StreamEvent(choice.sample, choice.so_far(done=True), choice.chunks, phase="done"))


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
