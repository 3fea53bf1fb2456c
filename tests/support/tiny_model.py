"""The tiny random qwen3_5_moe model for tests, built once per test session.

`tiny_model_dir()` builds it (a few seconds on CPU) into a temporary directory the first time it
is called in a process and returns the same path afterwards; the `tiny_model_path` fixture wraps
it. Import the fixture into a test module (`from tests.support.tiny_model import
tiny_model_path  # noqa: F401`) or call `tiny_model_dir()` directly."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading

import pytest

_lock = threading.Lock()
_path: str | None = None


def tiny_model_dir() -> str:
    global _path
    with _lock:
        if _path is None:
            from inference.tiny import build_tiny_model

            tmp = tempfile.mkdtemp(prefix="tiny-qwen3_5_moe-")
            atexit.register(shutil.rmtree, tmp, True)
            _path = build_tiny_model(tmp)
        return _path


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    return tiny_model_dir()
