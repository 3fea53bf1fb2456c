"""The mode of a file the studio writes under a temporary name and moves into place (dataset
exports, project archives): `tempfile.mkstemp` makes it 0600 whatever the umask, so once
written it gets the mode a plain `open()` would have given it, 0666 less the process's umask
(a deployment that shares its exports with a group sets a umask that lets it)."""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()


def process_umask() -> int:
    """The process's umask. Linux says it in /proc (read-only); elsewhere it is read by
    setting it and setting it back, under a lock so threads of this module never race."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0666 less the umask."""
    return 0o666 & ~process_umask()
