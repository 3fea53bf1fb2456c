"""Terminal output: ANSI SGR colour codes become spans with classes; every other escape
sequence and control character is dropped; all text is escaped."""

from __future__ import annotations

import re

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString

from inference.simulation.meaning import TERMINAL_ESCAPE
from studio.rendering.safe import join

# CSI (ESC [ params final), OSC (ESC ] ... BEL or ESC \), and two-byte escapes: the same
# definition as the one meaning uses, so what is hidden here is what a diff ignores.
_ESCAPE_RE = TERMINAL_ESCAPE
# C0 controls other than tab and newline (carriage returns are handled before).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def has_ansi(text: str) -> bool:
    return "\x1b" in text


def strip_ansi(text: str) -> str:
    """The text a terminal shows, without its colours: escape sequences and control
    characters dropped (tabs and newlines kept). For plain-text views of terminal output
    (diffs, excerpts), where a raw escape would show as a box and "[0;1;31m"."""
    if "\x1b" not in text and not _CONTROL_RE.search(text):
        return text
    return _CONTROL_RE.sub("", _ESCAPE_RE.sub("", text.replace("\r\n", "\n")))


def _overstrike_lines(text: str) -> str:
    """A bare carriage return rewinds the line (progress bars): keep what a terminal shows."""
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            shown = ""
            for segment in line.split("\r"):
                shown = segment + shown[len(segment) :]
            line = shown
        lines.append(line)
    return "\n".join(lines)


class _Style:
    __slots__ = ("bold", "dim", "italic", "underline", "inverse", "fg", "bg")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.bold = self.dim = self.italic = self.underline = self.inverse = False
        self.fg: str | None = None
        self.bg: str | None = None

    def classes(self) -> str:
        names = []
        for flag in ("bold", "dim", "italic", "underline", "inverse"):
            if getattr(self, flag):
                names.append(f"ansi-{flag}")
        if self.fg:
            names.append(f"ansi-fg-{self.fg}")
        if self.bg:
            names.append(f"ansi-bg-{self.bg}")
        return " ".join(names)

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in re.split(r"[;:]", params)] if params else [0]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code == 0:
                self.reset()
            elif code == 1:
                self.bold = True
            elif code == 2:
                self.dim = True
            elif code == 3:
                self.italic = True
            elif code == 4:
                self.underline = True
            elif code == 7:
                self.inverse = True
            elif code == 22:
                self.bold = self.dim = False
            elif code == 23:
                self.italic = False
            elif code == 24:
                self.underline = False
            elif code == 27:
                self.inverse = False
            elif 30 <= code <= 37:
                self.fg = str(code - 30)
            elif 90 <= code <= 97:
                self.fg = str(code - 90 + 8)
            elif code == 39:
                self.fg = None
            elif 40 <= code <= 47:
                self.bg = str(code - 40)
            elif 100 <= code <= 107:
                self.bg = str(code - 100 + 8)
            elif code == 49:
                self.bg = None
            elif code in (38, 48):
                # 256-colour (5;n) keeps the 16 base colours; true colour (2;r;g;b) is skipped.
                mode = codes[i + 1] if i + 1 < len(codes) else None
                if mode == 5 and i + 2 < len(codes):
                    n = codes[i + 2]
                    value = str(n) if n < 16 else None
                    if code == 38:
                        self.fg = value
                    else:
                        self.bg = value
                    i += 2
                elif mode == 2:
                    i += 4
            i += 1


def ansi_to_html(text: str) -> SafeString:
    """Escaped HTML for terminal text, with SGR colours as `ansi-*` spans."""
    text = _overstrike_lines(text)
    out: list[str] = []
    style = _Style()
    pos = 0

    def emit(chunk: str) -> None:
        chunk = _CONTROL_RE.sub("", chunk)
        if not chunk:
            return
        classes = style.classes()
        if classes:
            out.append(format_html('<span class="{}">{}</span>', classes, chunk))
        else:
            out.append(escape(chunk))

    for match in _ESCAPE_RE.finditer(text):
        emit(text[pos : match.start()])
        pos = match.end()
        if match.group(2) == "m" and not (match.group(1) or "").startswith("?"):
            style.apply(match.group(1) or "")
    emit(text[pos:])
    return join(out)
