"""Exact analytics over a scenario's full outcome space: Pareto frontier, Nash point, max welfare.

Outcome spaces are small by construction (generated scenarios stay under ~10,000 outcomes; the
largest Genius domain here has 390,625), so everything is computed exactly with numpy.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from haggler.core.scenario import Scenario
from haggler.core.types import Outcome, Side

# Utilities are sums of floats; two outcomes whose utilities differ only by rounding noise are
# treated as tied, so that summation order (ours vs NegMAS's) cannot change who dominates whom.
DECIMALS = 12


@dataclass(frozen=True)
class Point:
    index: int
    outcome: Outcome
    utilities: tuple[float, float]  # (seller, buyer)


@dataclass(frozen=True)
class Analysis:
    scenario: Scenario
    seller_utils: np.ndarray
    buyer_utils: np.ndarray
    pareto_indices: np.ndarray  # outcome indices on the frontier, by descending seller utility
    nash: Point | None  # None when no outcome is acceptable to both sides
    max_welfare: Point
    has_agreement_zone: bool
    trivial: bool  # one side's best outcome is already acceptable to the other

    @property
    def pareto_utilities(self) -> list[tuple[float, float]]:
        return [(float(self.seller_utils[i]), float(self.buyer_utils[i])) for i in self.pareto_indices]

    def is_pareto_optimal(self, outcome: Outcome) -> bool:
        return bool(self._pareto_mask[self.scenario.index_of(outcome)])

    def nash_distance(self, seller_utility: float, buyer_utility: float) -> float | None:
        if self.nash is None:
            return None
        ns, nb = self.nash.utilities
        return math.hypot(seller_utility - ns, buyer_utility - nb)

    def ranking(self, side: str) -> tuple[list[float], list[int]]:
        """All outcomes by ascending utility to ``side``: (utilities, outcome indices), as lists for bisect."""
        return self._rankings[side]

    @cached_property
    def _rankings(self) -> dict[str, tuple[list[float], list[int]]]:
        out = {}
        for side, utils in (("seller", self.seller_utils), ("buyer", self.buyer_utils)):
            order = np.argsort(utils, kind="stable")
            out[side] = (utils[order].tolist(), order.tolist())
        return out

    @cached_property
    def _pareto_mask(self) -> np.ndarray:
        mask = np.zeros(self.scenario.n_outcomes, dtype=bool)
        mask[self.pareto_indices] = True
        return mask


def pareto_frontier(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Indices not weakly dominated (>= in both, > in one) by any other, by descending u1."""
    a, b = np.round(u1, DECIMALS), np.round(u2, DECIMALS)
    order = np.lexsort((-b, -a))  # by a descending, ties by b descending
    a_s, b_s = a[order], b[order]
    # Best b among outcomes with strictly greater a: running max of b, shifted to the start of each a-group.
    group_start = np.r_[True, a_s[1:] != a_s[:-1]]
    group_id = np.cumsum(group_start) - 1
    group_first = np.flatnonzero(group_start)
    group_best_b = b_s[group_first]  # sorted b descending within a group, so its first is its max
    prev_max = np.r_[-np.inf, np.maximum.accumulate(group_best_b)[:-1]]
    keep = (b_s == group_best_b[group_id]) & (b_s > prev_max[group_id])
    return order[keep]


def _point(scenario: Scenario, index: int, us: np.ndarray, ub: np.ndarray) -> Point:
    return Point(index=int(index), outcome=scenario.outcome_at(int(index)), utilities=(float(us[index]), float(ub[index])))


def _best_for(own: np.ndarray, other: np.ndarray) -> int:
    """The side's best outcome; among ties, the one best for the other side (the most generous reading)."""
    top = np.round(own, DECIMALS) == np.round(own.max(), DECIMALS)
    candidates = np.flatnonzero(top)
    return int(candidates[np.argmax(other[candidates])])


def all_utilities(scenario: Scenario, side: Side) -> np.ndarray:
    """Utilities of every outcome, flattened in C order (outcome index <-> ``scenario.outcome_at``)."""
    total = np.zeros(scenario.shape, dtype=np.float64)
    for axis, row in enumerate(scenario.weighted_table(side)):
        shape = [1] * len(scenario.shape)
        shape[axis] = len(row)
        total = total + np.asarray(row, dtype=np.float64).reshape(shape)
    return total.reshape(-1)


def _compute(scenario: Scenario) -> Analysis:
    us, ub = all_utilities(scenario, "seller"), all_utilities(scenario, "buyer")
    rs, rb = scenario.seller.reservation, scenario.buyer.reservation
    frontier = pareto_frontier(us, ub)
    acceptable = (us >= rs) & (ub >= rb)
    nash = None
    if acceptable.any():
        # The Nash product is maximised on the frontier; searching the frontier only is exact and cheap.
        f_ok = frontier[acceptable[frontier]]
        product = (us[f_ok] - rs) * (ub[f_ok] - rb)
        nash = _point(scenario, int(f_ok[int(np.argmax(product))]), us, ub)
    welfare = us[frontier] + ub[frontier]
    max_welfare = _point(scenario, int(frontier[int(np.argmax(welfare))]), us, ub)
    seller_best, buyer_best = _best_for(us, ub), _best_for(ub, us)
    trivial = bool(ub[seller_best] >= rb or us[buyer_best] >= rs)
    return Analysis(
        scenario=scenario,
        seller_utils=us,
        buyer_utils=ub,
        pareto_indices=frontier,
        nash=nash,
        max_welfare=max_welfare,
        has_agreement_zone=bool(acceptable.any()),
        trivial=trivial,
    )


_CACHE: OrderedDict[int, Analysis] = OrderedDict()
_CACHE_SIZE = 2048


def analyze(scenario: Scenario) -> Analysis:
    """Cached per scenario object: the runner asks once per negotiation, the frontier is computed once."""
    key = id(scenario)
    hit = _CACHE.get(key)
    if hit is not None and hit.scenario is scenario:
        _CACHE.move_to_end(key)
        return hit
    result = _compute(scenario)
    _CACHE[key] = result
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result
