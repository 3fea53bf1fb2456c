"""Helpers for the Playwright browser tests: screenshots, a dialog watcher, trajectory files."""

from __future__ import annotations

import json
import os
from pathlib import Path

# Screenshots for people to look at (nothing asserts on them): taken only when
# STUDIO_SCREENSHOT_DIR names a folder, since full-page shots cost the suite seconds.
SHOTS_DIR = os.environ.get("STUDIO_SCREENSHOT_DIR", "")
SHOTS = Path(SHOTS_DIR) if SHOTS_DIR else None


def shot(page, name: str) -> Path | None:
    if SHOTS is None:
        return None
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class DialogWatch:
    """Records every alert/confirm/prompt a page opens (and dismisses it so nothing hangs)."""

    def __init__(self, page):
        self.messages: list[str] = []
        page.on("dialog", self._on_dialog)

    def _on_dialog(self, dialog) -> None:
        self.messages.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()


def write_native_file(path: Path, *, title: str, steps: int, domain: str = "terminal") -> Path:
    """A native `agentworld-studio/v1` file with one trajectory of `steps` numbered steps."""
    doc = {
        "format": "agentworld-studio/v1",
        "trajectories": [
            {
                "title": title,
                "domain": domain,
                "task_instruction": "Count the lines of every log file, one command per step.",
                "tags": ["browser-test"],
                "steps": [
                    {
                        "action": f"wc -l /var/log/app/part-{i:03d}.log",
                        "observation": f"{1000 + i * 7} /var/log/app/part-{i:03d}.log\n"
                        f"marker-of-step-{i}",
                    }
                    for i in range(steps)
                ],
            }
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def step_indices(page) -> list[int]:
    """Indices of the steps currently in the timeline, in page order."""
    return page.eval_on_selector_all(
        "#steps article.step", "els => els.map(e => parseInt(e.dataset.index, 10))"
    )


def current_step(page) -> int | None:
    found = page.eval_on_selector_all(
        "#steps article.step.current", "els => els.map(e => parseInt(e.dataset.index, 10))"
    )
    return found[0] if found else None
