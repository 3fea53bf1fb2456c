"""A colour per world model, the same on the tree, compare and the outcome chart of a page:
colours go to models in the order they first appear there (`model_key` of
`studio.services.model_identity`), from a palette readable on white and told apart by
colour-blind readers (Okabe-Ito), the baseline always grey."""

from __future__ import annotations

from collections.abc import Iterable

from studio.services.model_identity import ModelIdentity

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#8C6D1F", "#000000")
BASELINE_COLOUR = "#8A8A8A"
RECORDED_COLOUR = "#444444"


def colour_map(identities: Iterable[ModelIdentity | None]) -> dict[str, str]:
    """model_key -> colour, for the identities of one page (None: recorded, skipped)."""
    colours: dict[str, str] = {}
    used = 0
    for identity in identities:
        if identity is None or identity.model_key in colours:
            continue
        if identity.is_baseline:
            colours[identity.model_key] = BASELINE_COLOUR
        else:
            colours[identity.model_key] = PALETTE[used % len(PALETTE)]
            used += 1
    return colours


def colour_of(identity: ModelIdentity | None, colours: dict[str, str]) -> str:
    if identity is None:
        return RECORDED_COLOUR
    return colours.get(identity.model_key, BASELINE_COLOUR)
