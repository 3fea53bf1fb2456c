"""Figures published with the reference model card (QwenLM/Qwen-AgentWorld README, "Performance":
the five-dimension rubric mean per domain, normalised to 0-100), entered as data so that a
project's own runs can be read beside them. They were not measured here, and the leaderboard
says so."""

from __future__ import annotations

PUBLISHED_SOURCE = "published with Qwen-AgentWorld (model card), not measured here"

_ORDER = ("mcp", "search", "terminal", "swe", "android", "web", "os", "overall")

_TABLE = {
    "GPT-5.4": (70.10, 37.26, 53.69, 66.29, 60.00, 51.80, 68.58, 58.25),
    "Claude Opus 4.8": (54.93, 35.14, 59.18, 64.10, 61.50, 54.66, 66.62, 56.59),
    "Claude Opus 4.6": (69.90, 29.30, 57.51, 64.55, 61.74, 51.42, 70.20, 57.80),
    "Gemini 3.1 Pro": (59.07, 30.21, 52.47, 59.07, 61.40, 52.83, 66.92, 54.57),
    "Claude Sonnet 4.6": (70.00, 28.79, 56.98, 64.52, 58.03, 50.78, 63.17, 56.04),
    "DeepSeek-V4-Pro": (63.27, 27.61, 51.26, 59.44, 55.17, 50.32, 63.70, 52.97),
    "GLM-5.1": (67.60, 22.46, 47.32, 52.07, 59.10, 51.50, 59.13, 51.31),
    "Kimi K2.6": (65.23, 27.48, 52.54, 58.77, 58.93, 50.20, 60.80, 53.42),
    "MiniMax-M2.7": (55.82, 27.30, 41.62, 37.44, 52.40, 50.52, 57.73, 46.12),
    "Qwen3.5-35B-A3B": (57.87, 25.98, 46.13, 47.58, 53.18, 47.10, 56.27, 47.73),
    "Qwen3.5-397B-A17B": (68.31, 30.81, 55.30, 64.44, 54.90, 48.55, 60.85, 54.74),
    "Qwen3.6-Plus": (55.28, 21.94, 50.58, 59.08, 57.65, 50.78, 60.33, 50.81),
    "Qwen-AgentWorld-35B-A3B": (64.79, 36.69, 53.96, 65.63, 58.17, 49.55, 65.92, 56.39),
    "Qwen-AgentWorld-397B-A17B": (68.24, 37.82, 57.73, 68.49, 60.20, 50.98, 67.89, 58.71),
}

# model -> {domain or "overall": total}
PUBLISHED: dict[str, dict[str, float]] = {
    model: dict(zip(_ORDER, values, strict=True)) for model, values in _TABLE.items()
}
