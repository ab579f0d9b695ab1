"""The two number helpers every table shares: a mean that is None for nothing, and a cell's text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def mean(xs: Sequence[float]) -> float | None:
    """sum / count (the report's figures are computed this way, bit for bit); None for an empty list."""
    return sum(xs) / len(xs) if xs else None


def fmt(x: Any, digits: int = 3, missing: str = "-") -> str:
    """A float to ``digits`` places; None and NaN as ``missing``; anything else as str()."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)
