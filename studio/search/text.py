"""What the index reads of a step's text: terminal escape sequences taken out first.

A recorded terminal's colours are escape sequences glued to the words they colour
("\\x1b[34mdpkg"); turned into spaces with the rest of the punctuation, they would leave
"34mdpkg" in the index and `dpkg` unfound. The same sequences go on both databases:
PostgreSQL's function (migration 0027) uses `PG_ANSI`, SQLite's triggers call
`SQLITE_FUNCTION`, which every connection is given (`register_sqlite_function`)."""

from __future__ import annotations

from typing import Any

from inference.simulation.meaning import TERMINAL_ESCAPE

# the one definition of a terminal's escape sequences (CSI: colours, cursor moves; OSC:
# titles, links; two-byte escapes; a lone ESC), as the page's renderer and the diffs use it
ANSI = TERMINAL_ESCAPE
# the same in PostgreSQL's regular expressions (AREs take \x escapes, in brackets too);
# tests/test_search_deferred.py checks the two agree
PG_ANSI = r"\x1b\[[0-9;:?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x1b"
SQLITE_FUNCTION = "studio_without_ansi"


def without_ansi(text: str | None) -> str | None:
    if text is None or "\x1b" not in text:
        return text
    return ANSI.sub("", text)


def register_sqlite_function(sqlite_connection: Any) -> None:
    """Give a sqlite3 connection the function the index's triggers call."""
    sqlite_connection.create_function(SQLITE_FUNCTION, 1, without_ansi, deterministic=True)


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor == "sqlite":
        register_sqlite_function(connection.connection)
