import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haggler.scenarios import negmas as nb
from haggler.core.analysis import analyze, pareto_frontier
from haggler.scenarios.generate import generate_scenarios
from haggler.scenarios.genius import import_genius
from tests.conftest import DOMAINS


def _negmas_figures(s):
    from negmas.preferences import max_welfare_points, nash_points
    from negmas.preferences import pareto_frontier as negmas_frontier

    space = nb.outcome_space(s)
    # NegMAS keeps only outcomes above reservation in its frontier; without reservations it sees them all.
    free = [nb.ufun(s, side, space, with_reservation=False) for side in ("seller", "buyer")]
    front, _ = negmas_frontier(free, issues=space.issues)
    real = [nb.ufun(s, side, space) for side in ("seller", "buyer")]
    rational_front, _ = negmas_frontier(real, issues=space.issues)
    # NegMAS measures gains from min utility when a reservation lies below it; the Nash point is defined
    # over gains above the reservation values, so give it those ranges explicitly.
    ranges = [(s.reservation(side), 1.0) for side in ("seller", "buyer")]
    nash = nash_points(real, rational_front, ranges=ranges) if rational_front else ()
    welfare = max_welfare_points(free, front, outcome_space=space)
    return front, rational_front, nash, welfare


def _points(pairs):
    return {(round(float(a), 9), round(float(b), 9)) for a, b in pairs}


def _check_against_negmas(s):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        front, rational_front, nash, welfare = _negmas_figures(s)
    a = analyze(s)
    assert _points(a.pareto_utilities) == _points(front)
    rational = [(x, y) for x, y in a.pareto_utilities if x >= s.seller.reservation and y >= s.buyer.reservation]
    assert _points(rational) == _points(rational_front)
    if a.nash is None:
        assert not nash
    else:
        assert a.nash.utilities == pytest.approx(tuple(float(x) for x in nash[0][0]), abs=1e-9)
    assert a.max_welfare.utilities == pytest.approx(tuple(float(x) for x in welfare[0][0]), abs=1e-9)


@pytest.mark.parametrize("seed", [1, 2])
def test_matches_negmas_on_random_scenarios(seed):
    for s in generate_scenarios(12, seed):
        _check_against_negmas(s)


@pytest.mark.parametrize("key", ["laptop", "camera", "itex", pytest.param("energy", marks=pytest.mark.slow)])
def test_matches_negmas_on_genius_domains(genius_dir, key):
    d, sp, bp = (genius_dir / p for p in DOMAINS[key])
    _check_against_negmas(import_genius(d, sp, bp))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40))
def test_pareto_frontier_equals_brute_force(points):
    # small integer grids force many exact ties, where frontier code usually goes wrong
    pts = np.array(points, dtype=float)
    got = set(pareto_frontier(pts[:, 0], pts[:, 1]).tolist())
    expected = {
        i for i, (a, b) in enumerate(pts)
        if not any(c >= a and d >= b and (c > a or d > b) for c, d in pts)
    }
    assert got == expected


def test_nash_and_flags_by_brute_force():
    for s in generate_scenarios(10, 4):
        a = analyze(s)
        rs, rb = s.seller.reservation, s.buyer.reservation
        best = max(
            ((a.seller_utils[i] - rs) * (a.buyer_utils[i] - rb), i)
            for i in range(s.n_outcomes)
            if a.seller_utils[i] >= rs and a.buyer_utils[i] >= rb
        )
        nash_product = (a.nash.utilities[0] - rs) * (a.nash.utilities[1] - rb)
        assert nash_product == pytest.approx(best[0], abs=1e-12)
        assert a.is_pareto_optimal(a.nash.outcome)
        assert a.nash_distance(*a.nash.utilities) == 0.0
        assert a.max_welfare.utilities[0] + a.max_welfare.utilities[1] == pytest.approx(
            float((a.seller_utils + a.buyer_utils).max())
        )
        worst = int(np.argmin(a.seller_utils + a.buyer_utils))
        assert not a.is_pareto_optimal(s.outcome_at(worst))
        assert a.nash_distance(1.0, 1.0) == pytest.approx(math.hypot(1 - a.nash.utilities[0], 1 - a.nash.utilities[1]))


def test_no_agreement_zone_has_no_nash(genius_dir):
    # Itex B100 (reservation 0.603) vs Cypress A10 (0.718): nothing acceptable to both
    d, sp, bp = (genius_dir / p for p in DOMAINS["itex"])
    a = analyze(import_genius(d, sp, bp))
    assert not a.has_agreement_zone and a.nash is None and a.nash_distance(0.5, 0.5) is None
