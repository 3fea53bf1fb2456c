"""The project's perturbation library: save, delete, add a domain's presets, and turn the
editor's choices into the request's `perturbations` rules and `sweep`."""

from __future__ import annotations

from typing import Any

from inference import perturbations as perturbing
from studio.models import Perturbation, Project


def save_perturbation(
    project: Project,
    built: perturbing.Perturbation,
    *,
    description: str = "",
    instance: Perturbation | None = None,
    user=None,
) -> Perturbation:
    row = instance or Perturbation(project=project, created_by=user)
    row.name = built.name
    row.kind = built.kind
    row.params = dict(built.params)
    row.mode = built.mode
    row.description = description
    row.save()
    return row


def add_presets(project: Project, domain: str, user=None) -> tuple[list[Perturbation], int]:
    """The domain's presets (`inference.perturbations.PRESETS`) added to the library; a name
    already there is left as it is. Returns (added, skipped)."""
    added: list[Perturbation] = []
    skipped = 0
    existing = set(Perturbation.objects.filter(project=project).values_list("name", flat=True))
    for preset in perturbing.PRESETS.get(domain, ()):
        if preset.name in existing:
            skipped += 1
            continue
        built = perturbing.build(preset.kind, preset.params, preset.mode, preset.name)
        row = save_perturbation(project, built, description=preset.description, user=user)
        row.domain = domain
        row.save(update_fields=["domain"])
        added.append(row)
    return added, skipped


def rule_input(
    entry: Perturbation,
    *,
    mode: str = "",
    first_step: int | None = None,
    last_step: int | None = None,
    tool: str = "",
    probability: float | None = None,
) -> dict[str, Any]:
    """One rule of the request's `perturbations`, from a library entry (copied: the job
    keeps what it ran whatever happens to the entry later)."""
    return {
        "name": entry.name,
        "kind": entry.kind,
        "params": dict(entry.params or {}),
        "mode": mode or entry.mode,
        "first_step": first_step,
        "last_step": last_step,
        "tool": tool,
        "probability": 1.0 if probability is None else probability,
    }


def sweep_input(entries: list[Perturbation], mode: str = "") -> list[dict[str, Any]]:
    return [
        {"name": e.name, "kind": e.kind, "params": dict(e.params or {}), "mode": mode or e.mode}
        for e in entries
    ]


def job_perturbations(job) -> list[str]:
    """What perturbed a job, in words, from the copies it keeps: 'sweep: A, B (3 futures
    each)', 'Disk full (deterministic) · step 4', ..."""
    lines: list[str] = []
    sweep = (job.params or {}).get("sweep") or []
    if sweep:
        names = ", ".join(str(p.get("name") or p.get("kind")) for p in sweep)
        each = job.n // max(1, len(sweep))
        lines.append(
            f"sweep at step {job.fork_index}: {names} ({each} future{'s' if each != 1 else ''} each)"
        )
    for data in job.perturbations or []:
        try:
            rule = perturbing.build_rule(data, "rule")
        except perturbing.PerturbationError as exc:
            lines.append(f"unreadable rule: {exc}")
            continue
        lines.append(f"{rule.perturbation.label} ({rule.perturbation.mode}) · {rule.where()}")
    return lines


def labels_in_project(project: Project) -> list[str]:
    """The labels steps of this project may carry (`meta.perturbation.label`): those of the
    perturbations its jobs ran, and the library's names."""
    from studio.models import SimulationJob

    labels = set(Perturbation.objects.filter(project=project).values_list("name", flat=True))
    jobs = SimulationJob.objects.filter(trajectory__project=project).values_list(
        "perturbations", "params"
    )
    for rules, params in jobs:
        items = [*(rules or []), *((params or {}).get("sweep") or [])]
        for data in items:
            try:
                p = perturbing.from_dict(data)
            except perturbing.PerturbationError:
                continue
            labels.add(p.label)
    return sorted(labels, key=str.lower)


# How a prompted perturbation's badge reads (`perturbing.check_shown`): the model was asked
# to show it; whether its answer does is checked by form where a check can tell.
PROMPTED_WORDS = {
    perturbing.SHOWN: "asked · shown (checked)",
    perturbing.NOT_SHOWN: "asked · not shown (checked)",
    perturbing.UNCHECKED: "asked · unchecked",
}
PROMPTED_TITLES = {
    perturbing.SHOWN: "The world model was asked to write this perturbation, and its answer "
    "has its form (a deterministic check of the observation).",
    perturbing.NOT_SHOWN: "The world model was asked to write this perturbation, but its answer "
    "does not have its form (a deterministic check of the observation): it may not show it.",
    perturbing.UNCHECKED: "The world model was asked to write this perturbation; no "
    "deterministic check can tell whether its answer shows it (judge the step to know).",
}


def prompted_check(perturbation: Any, observation: str) -> str | None:
    """For a step's `meta["perturbation"]` of a prompted perturbation: whether the simulated
    observation shows it (`perturbing.SHOWN`, NOT_SHOWN or UNCHECKED); None for any other."""
    if not isinstance(perturbation, dict) or perturbation.get("mode") != perturbing.PROMPTED:
        return None
    params = perturbation.get("params")
    return perturbing.check_shown(
        str(perturbation.get("kind") or ""),
        observation or "",
        params if isinstance(params, dict) else {},
    )
