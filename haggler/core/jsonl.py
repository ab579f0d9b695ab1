"""Atomic writes of line files: a temporary file beside the target, flushed, then renamed over it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def write_lines_atomically(path: str | Path, lines: Iterable[str]) -> None:
    """Either the old file or the complete new one exists at every moment, even if the process is killed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
