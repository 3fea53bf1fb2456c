"""What a fine-tune's page shows of its run: the status in words, the figures as text (a figure
not measured yet is "–", never 0), and the Plotly loss curve (training loss per logged step,
the learning rate on a second axis), drawn by static/js/branching.js from a json_script."""

from __future__ import annotations

import re
from typing import Any

from studio.presenters.campaigns import STATUS_WORDS  # one job vocabulary ("Done", ...)
from studio.presenters.tree import plotly_text
from studio.services.finetunes import FIT_KEY, NOT_TRAINABLE, RESUMES_KEY, RUN_KEYS

CONFIG = {"displaylogo": False, "responsive": True}
PHASE_WORDS = {
    "queued": "waiting for a gpu worker",
    "preparing": "building the training rows",
    "training": "training",
    "saving": "saving the model",
    "done": "done",
    "cancelling": "stopping at the next step",
    "cancelled": "stopped; its checkpoint is kept",
    "failed": "failed",
    NOT_TRAINABLE: "not trained: its settings or data",
}
# The phases that say more than the status, shown while the run is queued or running
# ("Done", "Failed", "Cancelled", "Cancelling…" say the rest).
LIVE_PHASES = ("queued", "preparing", "training", "saving")


def status_text(run: Any) -> str:
    if run.cancel_requested and not run.is_finished:
        return "Cancelling…"
    return STATUS_WORDS.get(run.status, run.status)


def phase_text(run: Any) -> str:
    """The phase in words while it says something the status does not, else ""."""
    if run.is_finished or run.cancel_requested or run.phase not in LIVE_PHASES:
        return ""
    return PHASE_WORDS[run.phase]


def fit_text(run: Any) -> str:
    """How many rows were fitted into max_length ("" until the trainer said)."""
    fit = (run.settings or {}).get(FIT_KEY) or {}
    if not isinstance(fit, dict) or not fit:
        return ""
    trimmed, dropped = int(fit.get("rows_trimmed") or 0), int(fit.get("rows_dropped") or 0)
    if not trimmed and not dropped:
        return f"every row fits in max length {run.max_length}"
    parts = []
    if trimmed:
        parts.append(
            f"{trimmed} row{'s' if trimmed != 1 else ''} trimmed to max length "
            f"{run.max_length} (the earliest turns of {'their' if trimmed != 1 else 'its'} "
            "history left out)"
        )
    if dropped:
        numbers = [int(n) for n in fit.get("dropped") or []]
        shown = ", ".join(map(str, numbers[:10])) + (", …" if dropped > len(numbers[:10]) else "")
        parts.append(
            f"{dropped} row{'s' if dropped != 1 else ''} left out "
            f"({'their' if dropped != 1 else 'its'} own turn is longer than "
            f"{run.max_length} tokens{f'; row {shown}' if numbers else ''})"
        )
    return "; ".join(parts)


def rows_text(run: Any) -> str:
    """The rows built from the version, and how many of them train once fitted."""
    built = int(run.examples or 0)
    if not built:
        return ""
    fit = (run.settings or {}).get(FIT_KEY) or {}
    dropped = int(fit.get("rows_dropped") or 0) if isinstance(fit, dict) else 0
    if dropped:
        return f"{built - dropped} of the {built} rows built train"
    return f"{built} training row{'s' if built != 1 else ''}"


def resumes(run: Any) -> list[int]:
    """The checkpoint step of every resume, in order."""
    steps = (run.settings or {}).get(RESUMES_KEY) or []
    out = [int(s) for s in steps if isinstance(s, int) or str(s).isdigit()]
    if not out and run.resumed_from_step is not None:  # a row from before the list
        out = [int(run.resumed_from_step)]
    return out


def resumes_text(run: Any) -> str:
    return ", then ".join(f"resumed from step {s}" for s in resumes(run))


def trainer_settings(run: Any) -> list[tuple[str, Any]]:
    """What the trainer was given (the row's settings less the job's own keys, RUN_KEYS)."""
    return [(k, v) for k, v in (run.settings or {}).items() if k not in RUN_KEYS]


def training_text(run: Any) -> str:
    """The Training row's length: "at most N optimizer steps" when max steps is set (the
    trainer then stops there whatever the epochs), else the epochs."""
    max_steps = (run.settings or {}).get("max_steps")
    if max_steps:
        n = int(max_steps)
        return f"at most {n} optimizer step{'s' if n != 1 else ''}"
    epochs = float(run.epochs)
    shown = f"{epochs:g}"
    return f"{shown} epoch{'' if epochs == 1 else 's'}"


def loss_text(value: Any) -> str:
    return "–" if value is None else f"{float(value):.4f}"


def duration_text(seconds: Any) -> str:
    s = float(seconds or 0.0)
    if s < 60:
        return f"{s:.1f} s"
    minutes, s = divmod(int(round(s)), 60)
    if minutes < 60:
        return f"{minutes} min {s} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def loss_points(run: Any) -> list[tuple[int, float, float | None]]:
    """(step, loss, learning rate) of each logged step, in step order."""
    out = []
    for entry in run.loss_history or []:
        try:
            step, loss = int(entry[0]), float(entry[1])
        except (TypeError, ValueError, IndexError):
            continue
        lr = float(entry[2]) if len(entry) > 2 and entry[2] is not None else None
        out.append((step, loss, lr))
    return sorted(out)


def loss_figure(run: Any) -> dict[str, Any] | None:
    """The loss curve (None before the first logged loss)."""
    points = loss_points(run)
    if not points:
        return None
    steps = [p[0] for p in points]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers" if len(points) <= 200 else "lines",
            "name": "training loss",
            "x": steps,
            "y": [p[1] for p in points],
            "line": {"color": "#4c6ef5"},
            "hovertemplate": "step %{x}<br>loss %{y:.4f}<extra></extra>",
        }
    ]
    rates = [p[2] for p in points]
    if any(r for r in rates):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "learning rate",
                "x": steps,
                "y": rates,
                "yaxis": "y2",
                "line": {"color": "#f08c00", "dash": "dot"},
                "hovertemplate": "step %{x}<br>learning rate %{y:.2e}<extra></extra>",
            }
        )
    total = int(run.total_steps or 0)
    layout: dict[str, Any] = {
        "height": 320,
        "margin": {"l": 60, "r": 60, "t": 30, "b": 50},
        "xaxis": {
            "title": {"text": "optimizer step"},
            "range": [0, max(total, steps[-1], 1)],
            "automargin": True,
        },
        "yaxis": {"title": {"text": "loss"}, "automargin": True},
        "yaxis2": {
            "title": {"text": "learning rate"},
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "exponentformat": "e",
        },
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "showlegend": len(data) > 1,
        "title": {"text": plotly_text(str(run.name))[:200], "font": {"size": 12}},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def serve_commands(run: Any) -> dict[str, str]:
    """How to serve the registered adapter with vLLM or SGLang, one line each (LoRA only)."""
    folder = run.result_dir
    if not folder or run.method != "lora":
        return {}
    # named after the registered model, whose name is unique in the project
    endpoint = getattr(run, "endpoint", None) if getattr(run, "endpoint_id", None) else None
    label = endpoint.name if endpoint is not None else str(run.name)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", label).strip("-") or f"finetune-{run.pk}"
    return {
        "vllm": f"vllm serve {run.base_model} --enable-lora --lora-modules {name}={folder}",
        "sglang": (
            f"python -m sglang.launch_server --model-path {run.base_model} "
            f"--enable-lora --lora-paths {name}={folder}"
        ),
    }


def run_view(run: Any) -> dict[str, Any]:
    points = loss_points(run)
    total = int(run.total_steps or 0)
    return {
        "status_text": status_text(run),
        "phase_text": phase_text(run),
        "fit_text": fit_text(run),
        "rows_text": rows_text(run),
        "resumes_text": resumes_text(run),
        "training_text": training_text(run),
        "trainer_settings": trainer_settings(run),
        "figure": loss_figure(run),
        "points": len(points),
        "last_loss": loss_text(points[-1][1] if points else None),
        "first_loss_text": loss_text(run.first_loss),
        "final_loss_text": loss_text(run.final_loss),
        "train_time": duration_text(run.train_s),
        "step_text": f"step {run.step} of {total}" if total else "no step yet",
        "percent": f"{100 * float(run.progress or 0.0):.0f}%",
        "serve": serve_commands(run),
    }
