"""Old id -> new id of one model's rows, in 16 bytes a row: the archive writes each model's
rows by ascending id, so the old ids arrive sorted and a binary search finds them (a dict
would take about 100 bytes a row)."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator


class PkMap:
    def __init__(self) -> None:
        self._old = array("q")
        self._new = array("q")

    def add(self, old: int, new: int) -> None:
        if self._old and old <= self._old[-1]:
            raise ValueError(f"ids must arrive in ascending order ({old} after {self._old[-1]})")
        self._old.append(old)
        self._new.append(new)

    def get(self, old: int) -> int | None:
        i = bisect_left(self._old, old)
        if i < len(self._old) and self._old[i] == old:
            return self._new[i]
        return None

    def new_ids(self) -> Iterator[int]:
        return iter(self._new)

    def __len__(self) -> int:
        return len(self._old)

    def nbytes(self) -> int:
        return self._old.itemsize * len(self._old) + self._new.itemsize * len(self._new)
