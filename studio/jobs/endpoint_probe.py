""" "Test" of an in-process (hf) world model: only a worker of the gpu queue can load it, so
the web asks one (`studio.tasks.enqueue_endpoint_probe`) and the page polls the row."""

from __future__ import annotations

import time

from studio.models import ModelEndpoint
from studio.services.endpoints import record_test


def probe_in_process_endpoint(endpoint_id: int) -> None:
    endpoint = ModelEndpoint.objects.filter(pk=endpoint_id).first()
    if endpoint is None:
        return
    from inference.backends import BackendError, make_backend
    from inference.types import GenerationRequest, SamplingParams

    started = time.perf_counter()
    # Whatever goes wrong (a model that will not load fails in many ways), the row must
    # stop saying "testing": the exact error is the answer.
    try:
        backend = make_backend("hf", model=endpoint.model)
        completion = backend.generate(
            GenerationRequest(
                messages=[{"role": "user", "content": "Reply with one word: ready"}],
                params=SamplingParams(temperature=0.0, max_tokens=1),
            )
        )[0]
    except BackendError as exc:
        record_test(endpoint, False, None, f"{type(exc).__name__}: {exc}")
        return
    except Exception as exc:
        record_test(endpoint, False, None, f"{type(exc).__name__}: {exc}")
        raise
    latency = (time.perf_counter() - started) * 1000
    record_test(
        endpoint, True, latency, f"loaded {endpoint.model} and answered {completion.text!r}"
    )
