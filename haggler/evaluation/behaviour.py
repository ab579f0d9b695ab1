"""What a seller did in one negotiation, in its own utility: the figures that explain a change of score.

A seller that scores better may open higher, concede less, accept only better offers, stop accepting
losses, or walk away less; these say which. Every figure is read from the negotiation's turns and the
scenario's utilities (never from the agents' text), and is None where it does not apply (a seller that never
offered has no opening offer).
"""

from __future__ import annotations

from typing import Any

from haggler.core.protocol import Negotiation
from haggler.core.types import Accept, Offer


def seller_behaviour(negotiation: Negotiation) -> dict[str, Any]:
    """The seller's opening offer and concession (own utility), the share of its offers worth less than no deal,
    the utility of the offer it accepted, whether it agreed to a deal below its reservation and whether that deal
    was its own offer taken by the buyer, how often it accepted offers worth less and more than no deal, who
    walked away, turns to agreement, the buyer's utility."""
    scenario = negotiation.scenario
    own = scenario.seller.reservation
    offers = [t.action.outcome for t in negotiation.turns if t.speaker == "seller" and isinstance(t.action, Offer)]
    utilities = [scenario.utility("seller", o) for o in offers]
    deal = negotiation.agreement
    seller_u = scenario.utility("seller", deal) if deal is not None else None
    # An accept binds the counterpart's offer on the table, exactly: the deal is the offer the seller accepted.
    closed_by_seller = deal is not None and negotiation.turns[-1].speaker == "seller"
    accepted = seller_u if closed_by_seller else None
    loss = seller_u is not None and seller_u < own
    return {
        "opening_offer_utility": utilities[0] if utilities else None,
        "concession": utilities[0] - utilities[-1] if utilities else None,
        "seller_offers": len(utilities),
        # An offer below its reservation is one the buyer may bind at once: a loss the seller proposed itself.
        "offers_below_no_deal": sum(u < own for u in utilities) / len(utilities) if utilities else None,
        "accepted_offer_utility": accepted,
        "loss_accepted": loss,
        "loss_by_own_offer": loss and not closed_by_seller,
        **accept_rates(negotiation),
        "seller_walked_away": negotiation.walked_away_by == "seller",
        "buyer_walked_away": negotiation.walked_away_by == "buyer",
        "turns_to_agreement": len(negotiation.turns) if deal is not None else None,
        "buyer_utility": scenario.utility("buyer", deal) if deal is not None else None,
    }


def accept_rates(negotiation: Negotiation) -> dict[str, float | None]:
    """Of the seller's turns that faced a buyer's offer worth less (more) than its reservation value, the share it
    accepted (None without such a turn). The accept decision is where a small seller errs most: the ideal is 0
    below and, at its last turn at least, 1 above."""
    scenario = negotiation.scenario
    own = scenario.seller.reservation
    faced: dict[str, list[bool]] = {"below": [], "above": []}
    table = None  # the buyer's offer the seller could accept; an offer by either side replaces it
    for t in negotiation.turns:
        if t.speaker == "seller" and table is not None:
            u = scenario.utility("seller", table)
            if u != own:
                faced["below" if u < own else "above"].append(isinstance(t.action, Accept))
        if isinstance(t.action, Offer):
            table = t.action.outcome if t.speaker == "buyer" else None
    return {f"accepted_{k}_no_deal": sum(v) / len(v) if v else None for k, v in faced.items()}
