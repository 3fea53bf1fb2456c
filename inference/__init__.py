"""World-model inference: prompts, parsing, backends, the branching engine and benchmarks.

Plain Python: nothing here imports Django, and torch/transformers are imported lazily inside
the transformers backend and engine so the web process never loads them."""
