"""The evaluation grid: one line per negotiation cell (scenario x buyer x opener x repeat), with its seed.

Seeds are derived from the cell's identity and the grid seed by hashing, so a cell keeps its seed
whatever else the grid holds, and two grids built from the same arguments are byte-identical.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import Field, ValidationError

from haggler.core.config import Strict, error_items
from haggler.core.jsonl import write_lines_atomically
from haggler.core.types import Side


class GridError(ValueError):
    """A grid file or grid request that is malformed; the message says where and what."""


class Cell(Strict):
    cell_id: str = Field(min_length=1)
    scenario_id: str = Field(min_length=1)
    buyer: str = Field(min_length=1)
    opener: Side
    repeat: int = Field(ge=0)
    seed: int = Field(ge=0)


def cell_seed(cell_id: str, grid_seed: int) -> int:
    digest = hashlib.sha256(f"{grid_seed}|{cell_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def make_grid(
    scenario_ids: Sequence[str], buyers: Sequence[str], openers: Sequence[str], repeats: int = 1, seed: int = 0
) -> list[Cell]:
    if not scenario_ids:
        raise GridError("a grid needs at least one scenario")
    if not buyers:
        raise GridError("a grid needs at least one buyer spec")
    bad = [o for o in openers if o not in ("seller", "buyer")]
    if bad or not openers:
        raise GridError(f"openers must be 'seller' and/or 'buyer', got {list(openers)}")
    if repeats < 1:
        raise GridError(f"repeats must be at least 1, got {repeats}")
    for label, items in (("scenario id", scenario_ids), ("buyer", buyers), ("opener", openers)):
        dupes = sorted({x for x in items if list(items).count(x) > 1})
        if dupes:
            raise GridError(f"{label}s must be unique, repeated: {dupes}")
    cells = []
    for sid in scenario_ids:
        for buyer in buyers:
            for opener in openers:
                for r in range(repeats):
                    cid = f"{sid}|{buyer}|{opener}|{r}"
                    cells.append(
                        Cell(cell_id=cid, scenario_id=sid, buyer=buyer, opener=opener, repeat=r, seed=cell_seed(cid, seed))
                    )
    return cells


def write_grid(cells: Iterable[Cell], path: str | Path) -> None:
    write_lines_atomically(path, (json.dumps(c.model_dump(mode="json"), separators=(",", ":")) for c in cells))


def load_grid(path: str | Path) -> list[Cell]:
    path = Path(path)
    if not path.exists():
        raise GridError(f"{path}: no such grid file")
    cells: list[Cell] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                cell = Cell.model_validate(json.loads(line))
            except json.JSONDecodeError as err:
                raise GridError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            except ValidationError as err:
                fields = "; ".join(f"field {key}: {msg}" for key, msg in error_items(err))
                raise GridError(f"{path}:{lineno}: {fields}") from None
            if cell.cell_id in seen:
                raise GridError(f"{path}:{lineno}: cell id {cell.cell_id!r} appears more than once")
            seen.add(cell.cell_id)
            cells.append(cell)
    if not cells:
        raise GridError(f"{path}: holds no cells")
    return cells
