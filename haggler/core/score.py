"""From a finished negotiation to its outcome figures: utilities, the seller's score, efficiency flags.

The seller's score is the RL reward later: the seller's utility of the deal, or, without a deal,
its reservation value (``no_deal="reservation"``, the default) or zero (``no_deal="zero"``). Its surplus over
no deal (utility minus reservation, 0 without a deal) is what separates a skill from refusing every offer.
Without a deal both sides get their reservation value: that is what "utility of no deal" means.
An errored negotiation has no outcome: every figure is None, and it is never scored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from haggler.core.analysis import analyze
from haggler.core.protocol import Negotiation

NoDealScore = Literal["reservation", "zero"]
NO_DEAL_SCORES: tuple[str, ...] = ("reservation", "zero")


@dataclass(frozen=True)
class OutcomeFigures:
    deal: bool | None
    seller_utility: float | None
    buyer_utility: float | None
    seller_score: float | None
    seller_advantage: float | None  # NegMAS's advantage: (u - r) / (max u - r), 0 without a deal
    pareto_optimal: bool | None
    nash_distance: float | None
    individually_irrational: bool | None  # a deal below some side's reservation value
    # what the negotiation gained the seller over no deal (its utility minus its reservation; 0 without a deal):
    # a seller that refuses everything scores exactly 0, so only a positive mean is a skill beyond refusing
    seller_surplus: float | None = None
    good_deal: bool | None = None  # a deal worth more to the seller than no deal

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_NONE = OutcomeFigures(None, None, None, None, None, None, None, None)


def advantage(utility: float, reservation: float, best: float) -> float:
    span = best - reservation
    return (utility - reservation) / span if span > 0 else 0.0


def score(negotiation: Negotiation, no_deal: NoDealScore = "reservation") -> OutcomeFigures:
    if no_deal not in NO_DEAL_SCORES:
        raise ValueError(f"no_deal must be one of {NO_DEAL_SCORES}, got {no_deal!r}")
    if negotiation.ended_by == "error" or not negotiation.done:
        return _NONE
    scenario = negotiation.scenario
    a = analyze(scenario)
    rs, rb = scenario.seller.reservation, scenario.buyer.reservation
    if negotiation.agreement is None:
        return OutcomeFigures(
            deal=False,
            seller_utility=rs,
            buyer_utility=rb,
            seller_score=rs if no_deal == "reservation" else 0.0,
            seller_advantage=0.0,
            pareto_optimal=False,
            nash_distance=a.nash_distance(rs, rb),
            individually_irrational=False,
            seller_surplus=0.0,
            good_deal=False,
        )
    deal = negotiation.agreement
    us, ub = scenario.utility("seller", deal), scenario.utility("buyer", deal)
    return OutcomeFigures(
        deal=True,
        seller_utility=us,
        buyer_utility=ub,
        seller_score=us,
        seller_advantage=advantage(us, rs, float(a.seller_utils.max())),
        pareto_optimal=a.is_pareto_optimal(deal),
        nash_distance=a.nash_distance(us, ub),
        individually_irrational=bool(us < rs or ub < rb),
        seller_surplus=us - rs,
        good_deal=bool(us > rs),
    )
