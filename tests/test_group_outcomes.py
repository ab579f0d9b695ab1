"""benchmarks/group_outcomes.py's figures, on groups made by hand: what batch-study's premise was judged by."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "group_outcomes.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("group_outcomes", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(deal, score, tokens=1, invalid_share=0.0):
    return {"buyer": "b", "deal": deal, "score": score, "outcome": 0, "invalid_share": invalid_share, "tokens": tokens}


def test_split_groups_share_of_the_advantage_mass_per_scaling():
    """A split group (0.6 dealt, 0.4 not) beside a group that all dealt at 0.52 and 0.48. Scaled per group each has
    |advantages| of 1/sqrt(2) a copy: half the mass each. Scaled by the batch's spread, each keeps the size of its
    score differences: 0.2 against 0.04, so the split group holds 0.2 / 0.24 of it."""
    groups = {"split": [_row(True, 0.6), _row(False, 0.4)], "dealt": [_row(True, 0.52), _row(True, 0.48)]}
    share = _benchmark().split_groups_share(groups, "score", penalty=0.0)
    assert share["group"] == pytest.approx(0.5, abs=1e-3)
    assert share["batch"] == pytest.approx(0.2 / 0.24, abs=1e-3)


def test_split_groups_share_weights_copies_by_their_sampled_tokens_and_takes_the_format_penalty():
    """Tokens weight a copy's advantage as loss_type dapo does; the penalty enters the reward as in training: a
    penalty that makes the all-dealt group's copies equal leaves it no mass at all."""
    groups = {"split": [_row(True, 0.6, tokens=3), _row(False, 0.4, tokens=1)],
              "dealt": [_row(True, 0.52, invalid_share=0.4), _row(True, 0.48)]}
    share = _benchmark().split_groups_share(groups, "score", penalty=0.1)
    assert share["group"] == pytest.approx(1.0) and share["batch"] == pytest.approx(1.0)
    unpenalised = _benchmark().split_groups_share(groups, "score", penalty=0.0)
    # per group: the split group's mass is (3 + 1) / sqrt(2), the dealt group's 2 / sqrt(2)
    assert unpenalised["group"] == pytest.approx(4 / 6, abs=1e-3)
