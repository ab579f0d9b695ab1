import pytest

from haggler.core.protocol import Negotiation, play
from haggler.core.score import advantage, score
from haggler.core.types import Accept, Offer
from tests.conftest import small_scenario
from tests.conftest import Replay


def _deal(outcome, rs=0.3, rb=0.3):
    n = Negotiation(small_scenario(rs=rs, rb=rb))
    return play(n, Replay([Offer(outcome)]), Replay([Accept()]))


def test_deal_scores_the_sellers_utility():
    f = score(_deal((1, 1)))
    # seller: 0.8 * 0.5 + 0.2 * 1 = 0.6; buyer: 0.6 * 0.5 + 0.4 * 1 = 0.7
    assert (f.deal, f.seller_utility, f.buyer_utility, f.seller_score) == (True, pytest.approx(0.6), pytest.approx(0.7), pytest.approx(0.6))
    assert f.seller_advantage == pytest.approx((0.6 - 0.3) / (1.0 - 0.3))
    assert f.pareto_optimal is True and f.individually_irrational is False


def test_no_deal_conventions():
    n = Negotiation(small_scenario(rs=0.35, rb=0.3, max_turns=2))
    play(n, Replay([Offer((2, 1))]), Replay([Offer((0, 1))]))
    by_reservation, by_zero = score(n, "reservation"), score(n, "zero")
    assert by_reservation.seller_score == 0.35 and by_zero.seller_score == 0.0
    assert by_reservation.seller_utility == 0.35 and by_reservation.buyer_utility == 0.3
    assert by_reservation.seller_advantage == 0.0 and by_reservation.pareto_optimal is False
    with pytest.raises(ValueError, match="no_deal"):
        score(n, "half")


def test_irrational_and_dominated_deals_are_flagged():
    # $10 red: seller utility 0, below its reservation 0.3; dominated by $10 blue (both like blue)
    f = score(_deal((0, 0)))
    assert f.individually_irrational is True and f.pareto_optimal is False
    assert f.seller_advantage < 0
    assert f.nash_distance > 0


def test_advantage_edge_cases():
    assert advantage(0.5, 0.5, 0.5) == 0.0
    assert advantage(1.0, 0.0, 1.0) == 1.0


def test_surplus_over_no_deal_is_zero_without_a_deal_and_signs_a_good_deal_and_a_loss():
    good, loss = score(_deal((1, 1))), score(_deal((0, 0)))  # seller utility 0.6 and 0.0, reservation 0.3
    assert good.seller_surplus == pytest.approx(0.3) and good.good_deal is True
    assert loss.seller_surplus == pytest.approx(-0.3) and loss.good_deal is False
    n = Negotiation(small_scenario(rs=0.35, max_turns=2))
    play(n, Replay([Offer((2, 1))]), Replay([Offer((0, 1))]))
    for convention in ("reservation", "zero"):  # the surplus does not depend on how no deal is scored
        f = score(n, convention)
        assert f.seller_surplus == 0.0 and f.good_deal is False
