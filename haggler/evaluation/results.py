"""Results files: JSON lines, appended one finished negotiation at a time, compacted atomically.

A record is keyed by (seller, cell_id); a later record supersedes an earlier one. A run that is
killed can leave at most one half-written last line: readers drop it, and ``compact`` rewrites the
file (via a temporary file and an atomic rename) so that each key appears exactly once. Any other
unreadable line is an error naming the line: results are never silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from haggler.core.jsonl import write_lines_atomically

Record = dict[str, Any]
Key = tuple[str, str]


class ResultsError(ValueError):
    """A results file that cannot be read without losing data."""


def key_of(record: Record) -> Key:
    return (record["seller"], record["cell_id"])


def read_records(path: str | Path) -> list[Record]:
    """Every complete record in file order; a truncated final line (from a kill) is dropped."""
    path = Path(path)
    if not path.exists():
        return []
    records: list[Record] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key_of(record)
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            if i == last:  # no newline after it: the write was cut off
                continue
            raise ResultsError(f"{path}:{i + 1}: unreadable result record ({err}); fix or remove that line") from None
        records.append(record)
    return records


def latest(records: list[Record]) -> dict[Key, Record]:
    out: dict[Key, Record] = {}
    for r in records:
        out[key_of(r)] = r
    return out


def read_latest(path: str | Path) -> dict[Key, Record]:
    return latest(read_records(path))


def compact(path: str | Path) -> dict[Key, Record]:
    """Rewrite the file so that it holds each key once (its latest record), atomically."""
    current = read_latest(path)
    write_lines_atomically(path, (json.dumps(record, ensure_ascii=False) for record in current.values()))
    return current


class Appender:
    """Appends one record per line and flushes it, so a kill loses at most the line being written."""

    def __init__(self, path: str | Path) -> None:
        self._fh = Path(path).open("a", encoding="utf-8")

    def write(self, record: Record) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
