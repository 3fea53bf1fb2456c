"""The compare view's columns as the page names them: each column's world model (its label,
everything in a title, its colour: the same colours as the tree and the trajectory page), and
the models a comparison can be filtered by (`?model=<token>`, as the tree's filter)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from studio.models import Branch
from studio.presenters.model_colours import RECORDED_COLOUR, colour_of
from studio.services.model_identity import ModelIdentity


@dataclass(frozen=True)
class ColumnHead:
    branch: Branch
    identity: ModelIdentity | None  # None: recorded, or no job made it
    colour: str

    @property
    def recorded(self) -> bool:
        return self.identity is None and self.branch.origin == "recorded"

    @property
    def words(self) -> str:
        """What the head says when there is no model to name."""
        if self.identity is not None:
            return self.identity.label
        if self.recorded:
            return "recorded"
        return "no model (made by hand)" if self.branch.job_id is None else "model not known"


@dataclass(frozen=True)
class CompareModel:
    """A model whose futures are among the trajectory's branches: a choice of the filter."""

    token: str
    label: str
    colour: str
    branches: int


@dataclass(frozen=True)
class CompareModelFilter:
    choice: CompareModel | None
    error: str = ""


def column_heads(
    branches: Iterable[Branch],
    identities: dict[int, ModelIdentity],
    colours: dict[str, str],
) -> list[ColumnHead]:
    """`identities`: job id -> identity (`identities_of_jobs`)."""
    heads = []
    for branch in branches:
        identity = identities.get(branch.job_id) if branch.job_id is not None else None
        colour = colour_of(identity, colours) if identity is not None else RECORDED_COLOUR
        heads.append(ColumnHead(branch=branch, identity=identity, colour=colour))
    return heads


def compare_models(
    branches: Iterable[Branch], identities: dict[int, ModelIdentity], colours: dict[str, str]
) -> list[CompareModel]:
    """The models of the trajectory's futures, in the order of `colours` (first run first)."""
    counts: dict[str, int] = {}
    firsts: dict[str, ModelIdentity] = {}
    for branch in branches:
        identity = identities.get(branch.job_id) if branch.job_id is not None else None
        if identity is None:
            continue
        counts[identity.model_key] = counts.get(identity.model_key, 0) + 1
        firsts.setdefault(identity.model_key, identity)
    order = [key for key in colours if key in firsts] + [k for k in firsts if k not in colours]
    return [
        CompareModel(
            token=firsts[key].token,
            label=firsts[key].label,
            colour=colour_of(firsts[key], colours),
            branches=counts[key],
        )
        for key in order
    ]


def model_filter(token: str, models: list[CompareModel]) -> CompareModelFilter | None:
    """`?model=`: the model asked for, or why nothing is filtered (a token of no model here:
    an edited URL, or the model's futures were deleted since)."""
    token = token.strip()
    if not token:
        return None
    choice = next((m for m in models if m.token == token), None)
    if choice is None:
        return CompareModelFilter(
            choice=None,
            error=(
                f"No branch of this trajectory was made by the model asked for "
                f"(model={token[:40]}): columns of every model are shown."
            ),
        )
    return CompareModelFilter(choice=choice)
