"""The one exception backends raise, with a message a person can act on."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend could not produce completions (unreachable server, bad model path, ...)."""
