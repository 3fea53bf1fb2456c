"""World-model backends behind one interface (`inference.types.Backend`).

- `openai`: any OpenAI-compatible server (vLLM, SGLang serving Qwen-AgentWorld, or an API);
- `hf`: transformers in this process (GPU worker; CPU works), with the branching engine;
- `retrieval`: a non-neural baseline answering with the most similar recorded observation.

Only the chosen backend's module is imported, so the web process never loads torch."""

from __future__ import annotations

from inference.backends.errors import BackendError
from inference.simulation.limits import BACKENDS
from inference.types import Backend


def make_backend(
    name: str,
    *,
    model: str = "",
    base_url: str = "",
    api_key: str = "EMPTY",
    corpus: list[tuple[str, str, str]] | None = None,
    concurrency: int = 8,
    use_n: bool = True,
    timeout: float | None = None,
    max_retries: int | None = None,
    timeout_setting: str | None = None,
) -> Backend:
    """Build a backend. An empty `name` picks one from what is configured: `openai` with a
    base_url, `hf` with only a model, else the retrieval baseline (works offline).
    `timeout_setting` names what bounds `timeout`, for the message of a request timing out."""
    if not name:
        name = "openai" if base_url else ("hf" if model else "retrieval")
    if name == "openai":
        if not base_url:
            raise BackendError(
                "the openai backend needs a base_url (e.g. http://127.0.0.1:8000/v1)"
            )
        from inference.backends.openai_compat import OpenAIBackend

        bounds: dict = {}
        if timeout is not None:
            bounds["timeout"] = timeout
        if max_retries is not None:
            bounds["max_retries"] = max_retries
        if timeout_setting:
            bounds["timeout_setting"] = timeout_setting
        return OpenAIBackend(
            model=model,
            base_url=base_url,
            api_key=api_key,
            concurrency=concurrency,
            use_n=use_n,
            **bounds,
        )
    if name == "hf":
        if not model:
            raise BackendError("the hf backend needs a model: a local path or a hub id")
        from inference.backends.hf import HFBackend

        return HFBackend(model=model)
    if name == "retrieval":
        from inference.backends.retrieval import RetrievalBackend

        return RetrievalBackend(corpus or [])
    raise BackendError(f"unknown backend {name!r}; expected one of: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "BackendError", "make_backend"]
