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

from pydantic import BaseModel, ConfigDict, ValidationError

from haggler.core.config import error_items
from haggler.core.jsonl import write_lines_atomically


class Security(BaseModel):
    """What the seller gave away in one completed negotiation (``evaluation/security.py`` defines each figure)."""

    model_config = ConfigDict(extra="allow")

    leak: bool  # its words revealed its reservation (value or price-equivalent), a weight or a priority
    leak_turn: int | None = None  # the transcript turn of the first leak
    leaks: list[dict[str, Any]] = []  # each: turn, kind, evidence
    injection_attempts: int = 0  # buyer messages that attempted an injection
    injection_success: bool | None = None  # None: no injection was attempted
    injection_turn: int | None = None
    injection_how: str | None = None
    loss_accepted: bool = False  # a deal worth less to the seller than its reservation value


class Record(BaseModel):
    """One finished (or errored) negotiation, as one line of a results file.

    Keys this version does not know (from older or newer files) are kept and written back, after the
    known ones; keys a file does not hold (``agents``, absent before agents were recorded) are not added.
    """

    model_config = ConfigDict(extra="allow")

    cell_id: str
    scenario_id: str
    seller: str
    buyer: str
    opener: str
    seed: int
    deal: bool | None  # None when errored
    agreement: dict[str, str] | None  # issue -> option name
    ended_by: str  # accept | walk_away | deadline | error (a str: a newer file may know more endings)
    walked_away_by: str | None
    turns: int | None
    seller_utility: float | None
    buyer_utility: float | None
    seller_score: float | None
    seller_advantage: float | None
    pareto_optimal: bool | None
    nash_distance: float | None
    individually_irrational: bool | None
    # absent from files written before they were recorded: None there (score.py: surplus over no deal)
    seller_surplus: float | None = None
    good_deal: bool | None = None
    invalid_actions: dict[str, int]  # side -> invalid actions
    transcript: list[dict[str, Any]]
    error: str | None
    settings: dict[str, Any]  # RunSettings.to_json()
    agents: dict[str, Any] | None = None  # side -> what ran there
    security: Security | None = None  # completed negotiations since security was measured; absent before
    behaviour: dict[str, Any] | None = None  # the seller's moves in its own utility (evaluation/behaviour.py)

    def to_line(self) -> str:
        """The record as one JSON line (no newline): exactly the bytes a dict of its keys would give."""
        # Python-mode dump: values held as Any (settings, agents, transcript) go to json.dumps as they are
        return json.dumps(self.model_dump(exclude_unset=True), ensure_ascii=False)


Key = tuple[str, str]


class ResultsError(ValueError):
    """A results file that cannot be read without losing data."""


def key_of(record: Record) -> Key:
    return (record.seller, record.cell_id)


def _why(err: Exception) -> str:
    if isinstance(err, ValidationError):  # the first problem, on one line
        key, msg = error_items(err)[0]
        return f"{key or 'record'}: {msg}"
    return str(err)


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
            record = Record.model_validate(json.loads(line))
        except (ValueError, TypeError) as err:  # bad JSON or not a record (pydantic's errors are ValueErrors)
            if i == last:  # no newline after it: the write was cut off
                continue
            raise ResultsError(f"{path}:{i + 1}: unreadable result record ({_why(err)}); fix or remove that line") \
                from None
        records.append(record)
    return records


def latest(records: list[Record]) -> dict[Key, Record]:
    out: dict[Key, Record] = {}
    for r in records:
        out[key_of(r)] = r
    return out


def read_latest(path: str | Path) -> dict[Key, Record]:
    return latest(read_records(path))


def load_results(paths: list[str | Path]) -> list[Record]:
    """The latest record of each (seller, cell) of every file, in file order; every file must exist."""
    records: list[Record] = []
    for p in paths:
        if not Path(p).exists():
            raise ValueError(f"{p}: no such results file")
        records.extend(read_latest(p).values())
    if not records:
        raise ValueError("the results files hold no records")
    return records


def compact(path: str | Path) -> dict[Key, Record]:
    """Rewrite the file so that it holds each key once (its latest record), atomically."""
    current = read_latest(path)
    write_lines_atomically(path, (record.to_line() for record in current.values()))
    return current


class Appender:
    """Appends one record per line and flushes it, so a kill loses at most the line being written."""

    def __init__(self, path: str | Path) -> None:
        self._fh = Path(path).open("a", encoding="utf-8")

    def write(self, record: Record) -> None:
        self._fh.write(record.to_line() + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
