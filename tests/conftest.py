from __future__ import annotations

import os
from pathlib import Path

import pytest

from haggler.core.scenario import Issue, Preferences, Scenario

REPO = Path(__file__).resolve().parents[1]
GENIUS = Path(os.environ.get("HAGGLER_GENIUS_DIR", REPO.parent / "shared" / "genius-domains"))


@pytest.fixture
def genius_dir() -> Path:
    if not GENIUS.is_dir():
        pytest.skip(f"Genius domains not found at {GENIUS} (developer/CI data in ../shared; set HAGGLER_GENIUS_DIR)")
    return GENIUS


def small_scenario(max_turns: int = 6, rs: float = 0.3, rb: float = 0.3) -> Scenario:
    """Two issues, hand-valued: price is distributive, colour integrative (both like blue)."""
    return Scenario(
        id="tiny",
        context="a tiny test widget",
        issues=(Issue(name="price", options=("$10", "$20", "$30")), Issue(name="colour", options=("red", "blue"))),
        seller=Preferences(
            weights={"price": 0.8, "colour": 0.2},
            values={"price": {"$10": 0.0, "$20": 0.5, "$30": 1.0}, "colour": {"red": 0.0, "blue": 1.0}},
            reservation=rs,
        ),
        buyer=Preferences(
            weights={"price": 0.6, "colour": 0.4},
            values={"price": {"$10": 1.0, "$20": 0.5, "$30": 0.0}, "colour": {"red": 0.25, "blue": 1.0}},
            reservation=rb,
        ),
        max_turns=max_turns,
    )


@pytest.fixture
def tiny() -> Scenario:
    return small_scenario()


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded model's real tokenizer and chat template (the tiny test models are built around it)."""
    transformers = pytest.importorskip("transformers")
    from haggler.engine.backends.embedded import embedded_model_dir

    return transformers.AutoTokenizer.from_pretrained(embedded_model_dir())


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    """The (start, end) spans of consecutive 1s in a trajectory's mask: one per sampled segment."""
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            runs.append((start, i))
            start = None
    return runs
