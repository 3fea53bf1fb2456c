"""When a decoding speed (tokens per second) is a figure worth showing.

A rate over a tiny window is noise: at the first token, one token over the microseconds
since it came reads "335008.4 tok/s". A rate is shown only once the window it is measured
over is long enough to mean something: at least MIN_WINDOW_S seconds since the first token
and MIN_TOKENS tokens decoded in it. Before that the rate is None, and pages say "…"
(measuring) instead of a number.

A job's rate is of whole outputs, timed by the backend from the first token to the last: the
window is what the outputs took, not a moment after a token, so it needs the tokens and only a
window past the clock's granularity (MIN_TOTAL_WINDOW_S)."""

from __future__ import annotations

MIN_WINDOW_S = 0.5
MIN_TOKENS = 8
MIN_TOTAL_WINDOW_S = 0.01


def decode_rate(
    tokens: int | float | None, seconds: float | None, *, min_window_s: float = MIN_WINDOW_S
) -> float | None:
    """tokens / seconds, rounded to 0.1, or None while the window is too short to measure
    (or the inputs say nothing: no tokens, no time, negative clocks)."""
    if tokens is None or seconds is None:
        return None
    if seconds < min_window_s or seconds <= 0 or tokens < MIN_TOKENS:
        return None
    return round(float(tokens) / seconds, 1)
