"""What a simulation may ask for, defined once: backends, modes, limits and defaults.

The request (`request.py`), the studio's form and `simulate` command, the settings and the
backends all read these names; nothing else spells a limit or a backend list."""

from __future__ import annotations

# name -> label shown in forms and help texts
BACKENDS: dict[str, str] = {
    "retrieval": "retrieval (non-neural baseline: nearest recorded observation)",
    "openai": "openai (OpenAI-compatible server: vLLM, SGLang, ...)",
    "hf": "hf (transformers model in the GPU worker)",
}
# The backend that works offline with no model: the default of a fresh installation.
OFFLINE_BACKEND = "retrieval"
BACKENDS_NEEDING_BASE_URL = frozenset({"openai"})
BACKENDS_NEEDING_MODEL = frozenset({"openai", "hf"})
# Backends that load the model into the worker process: they run on the GPU queue.
IN_PROCESS_BACKENDS = frozenset({"hf"})

MODES: dict[str, str] = {
    "next": "Next observation only",
    "replay": "Counterfactual replay of recorded actions",
    "rollout": "Agent rollout",
}

ACTION_FORMATS: dict[str, str] = {
    "auto": "Auto: JSON if it looks like JSON, else text",
    "json": "JSON (validated)",
    "text": "Free text",
}
# Domains whose actions are JSON by convention: `[` there opens a JSON list, whereas in a
# shell `[ -f x ]` is a test command.
JSON_ACTION_DOMAINS = frozenset({"mcp", "android"})

MAX_FUTURES = 64
MAX_ROLLOUT_STEPS = 50
MAX_TOKENS = 32768
MAX_SEED = 2**31 - 1
TEMPERATURE_MAX = 2.0  # temperature in [0, TEMPERATURE_MAX]; top_p in (0, 1]

DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 0.95
DEFAULT_MAX_TOKENS = 1024

DEFAULT_WORLD_MODEL = "Qwen/Qwen-AgentWorld-35B-A3B"

# Live text kept per future while it decodes (the tail): bounded, whatever max_tokens is.
LIVE_TEXT_CHARS = 2000
