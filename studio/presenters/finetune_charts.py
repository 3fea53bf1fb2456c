"""What a fine-tune's page shows of its run: the status in words, the figures as text (a figure
not measured yet is "–", never 0), and the Plotly loss curve (training loss per logged step,
the learning rate on a second axis), drawn by static/js/branching.js from a json_script."""

from __future__ import annotations

import re
from typing import Any

from studio.presenters.tree import plotly_text

CONFIG = {"displaylogo": False, "responsive": True}
STATUS_WORDS = {
    "queued": "Queued",
    "running": "Running",
    "succeeded": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
PHASE_WORDS = {
    "queued": "waiting for a gpu worker",
    "preparing": "building the training rows",
    "training": "training",
    "saving": "saving the model",
    "done": "done",
    "cancelling": "stopping at the next step",
    "cancelled": "stopped; its checkpoint is kept",
    "failed": "failed",
}


def status_text(run: Any) -> str:
    if run.cancel_requested and not run.is_finished:
        return "Cancelling…"
    return STATUS_WORDS.get(run.status, run.status)


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
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", str(run.name)).strip("-")
    name = name[:60] or f"finetune-{run.pk}"
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
        "phase_text": PHASE_WORDS.get(run.phase, run.phase),
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
