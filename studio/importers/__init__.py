"""Trajectory importers: one module per format, a registry and content-based detection.

Each format module defines `NAME`, a default `DOMAIN`, `sniff(kind, sample) -> bool` and
`parse(source) -> Iterator[ParsedTrajectory]`; `studio.services.imports` writes the result.
"""

from studio.importers.base import (
    ImportError_,
    ImportFailure,
    LimitExceeded,
    ParsedStep,
    ParsedTrajectory,
    Source,
)

__all__ = [
    "ImportError_",
    "ImportFailure",
    "LimitExceeded",
    "ParsedStep",
    "ParsedTrajectory",
    "Source",
]
