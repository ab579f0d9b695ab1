"""Behaviour metrics on hand-played negotiations whose answers are known (the tiny scenario of conftest:
the seller's utility is 0.8 * price + 0.2 * colour, with $10/$20/$30 worth 0/0.5/1 and red/blue 0/1)."""

import pytest

from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.core.types import Accept, Invalid, Offer, Reply, WalkAway
from haggler.evaluation.behaviour import seller_behaviour
from tests.conftest import small_scenario


def play(opener, *actions, rs=0.3):
    neg = Negotiation(small_scenario(max_turns=8, rs=rs), ProtocolConfig(opener=opener))
    for a in actions:
        neg.step(Reply("", a))
    return neg


def test_opening_offer_concession_and_an_accepted_offer():
    # seller: ($30, blue) = 1.0, then ($20, blue) = 0.6; buyer offers ($20, red) = 0.4; the seller accepts it
    neg = play("seller", Offer((2, 1)), Offer((0, 0)), Offer((1, 1)), Offer((1, 0)), Accept())
    b = seller_behaviour(neg)
    assert b["opening_offer_utility"] == pytest.approx(1.0)
    assert b["concession"] == pytest.approx(0.4) and b["seller_offers"] == 2
    assert b["accepted_offer_utility"] == pytest.approx(0.4)
    assert b["loss_accepted"] is False  # 0.4 is above the seller's reservation of 0.3
    assert b["turns_to_agreement"] == 5
    assert b["buyer_utility"] == pytest.approx(0.6 * 0.5 + 0.4 * 0.25)
    assert not b["seller_walked_away"] and not b["buyer_walked_away"]


def test_a_deal_below_the_reservation_is_a_loss_even_when_the_buyer_closes_it():
    # the seller offers ($10, blue) = 0.2 < 0.5, and the buyer accepts: the seller agreed to a loss, not accepted one
    neg = play("buyer", Offer((0, 0)), Offer((0, 1)), Accept(), rs=0.5)
    b = seller_behaviour(neg)
    assert b["loss_accepted"] is True and b["accepted_offer_utility"] is None
    assert b["opening_offer_utility"] == pytest.approx(0.2) and b["concession"] == 0.0
    assert b["loss_by_own_offer"] is True and b["offers_below_no_deal"] == 1.0


def test_losses_split_by_who_closed_them_and_offers_below_no_deal_are_counted_per_offer():
    # rs 0.5. The seller offers ($30, red) = 0.8, then ($20, red) = 0.4 < 0.5: one of its two offers is below no deal.
    # The buyer takes it: a loss by its own offer.
    neg = play("seller", Offer((2, 0)), Offer((0, 0)), Offer((1, 0)), Accept(), rs=0.5)
    b = seller_behaviour(neg)
    assert b["offers_below_no_deal"] == pytest.approx(0.5) and b["seller_offers"] == 2
    assert b["loss_accepted"] is True and b["loss_by_own_offer"] is True
    # The seller accepts the buyer's ($10, blue) = 0.2: a loss, but not its own offer; its one offer, 0.8, is above
    neg = play("seller", Offer((2, 0)), Offer((0, 1)), Accept(), rs=0.5)
    b = seller_behaviour(neg)
    assert b["loss_accepted"] is True and b["loss_by_own_offer"] is False and b["offers_below_no_deal"] == 0.0
    # a tie is not below: ($30, red) = 0.8 at rs 0.8, taken, is neither a loss nor an offer below no deal
    neg = play("seller", Offer((2, 0)), Accept(), rs=0.8)
    assert neg.scenario.utility("seller", (2, 0)) == neg.scenario.seller.reservation  # a tie in floats too
    b = seller_behaviour(neg)
    assert b["offers_below_no_deal"] == 0.0 and b["loss_by_own_offer"] is False and b["loss_accepted"] is False


def test_no_deal_walk_aways_and_a_seller_that_never_offered():
    neg = play("seller", Invalid("garbage"), Offer((0, 0)), WalkAway())
    b = seller_behaviour(neg)
    assert b["opening_offer_utility"] is None and b["concession"] is None and b["seller_offers"] == 0
    assert b["seller_walked_away"] and not b["buyer_walked_away"]
    assert b["turns_to_agreement"] is None and b["buyer_utility"] is None and b["loss_accepted"] is False
    assert b["offers_below_no_deal"] is None and b["loss_by_own_offer"] is False
    b = seller_behaviour(play("seller", Offer((2, 1)), WalkAway()))
    assert b["buyer_walked_away"] and not b["seller_walked_away"]


def test_every_record_summary_and_report_carry_the_behaviour(tmp_path):
    from haggler.core.scenario import write_scenarios
    from haggler.evaluation.grid import make_grid, write_grid
    from haggler.evaluation.results import read_records
    from haggler.evaluation.runner import run
    from haggler.evaluation.summary import summarize
    from haggler.scenarios.generate import generate_scenarios
    from haggler.study.report import build_report

    scenarios = generate_scenarios(3, 4, max_turns=6)
    sp, gp, out = tmp_path / "s.jsonl", tmp_path / "g.jsonl", tmp_path / "r.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["scripted:conceder"], ["seller", "buyer"]), gp)
    run(gp, sp, "scripted:boulware", out, progress=False)
    records = read_records(out)
    assert all(r.behaviour is not None for r in records)
    (row,) = summarize(records)
    openings = [r.behaviour["opening_offer_utility"] for r in records]
    assert row.behaviour["opening_offer_utility"] == pytest.approx(sum(openings) / len(openings))
    below = [r.behaviour["offers_below_no_deal"] for r in records]
    assert row.behaviour["offers_below_no_deal"] == pytest.approx(sum(below) / len(below))
    build_report([out], tmp_path / "report", n_boot=200)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Seller behaviour" in text and "losses by own offer" in text and "offers below no deal" in text


def test_accept_rates_split_the_sellers_decisions_by_whether_the_offer_beat_no_deal():
    # rs 0.3. The buyer offers ($10, blue) = 0.2 (below): the seller offers; then ($20, red) = 0.4 (above): it
    # offers again; then ($10, red) = 0.0 (below): it accepts. Below: 1 of 2 accepted; above: 0 of 1.
    neg = play("buyer", Offer((0, 1)), Offer((2, 1)), Offer((1, 0)), Offer((2, 0)), Offer((0, 0)), Accept())
    b = seller_behaviour(neg)
    assert b["accepted_below_no_deal"] == pytest.approx(0.5) and b["accepted_above_no_deal"] == 0.0
    neg = play("buyer", Offer((1, 0)), Accept())
    b = seller_behaviour(neg)
    assert b["accepted_above_no_deal"] == 1.0 and b["accepted_below_no_deal"] is None
    # the seller's own offer replaces the buyer's on the table: after the buyer's invalid turn it faces nothing.
    # ($20, blue) = 0.6 above: countered; the buyer's turn is invalid; ($20, red) = 0.4 above: accepted. 1 of 2.
    neg = play("buyer", Offer((1, 1)), Offer((2, 1)), Invalid("?"), Offer((2, 1)), Offer((1, 0)), Accept())
    b = seller_behaviour(neg)
    assert b["accepted_above_no_deal"] == pytest.approx(0.5) and b["accepted_below_no_deal"] is None
    neg = play("seller", Offer((2, 1)), Offer((1, 1)), Invalid("?"), Offer((0, 0)), WalkAway())
    b = seller_behaviour(neg)  # the invalid turn faced ($20, blue) = 0.6: above, not accepted; then 0.0: walked
    assert b["accepted_above_no_deal"] == 0.0 and b["accepted_below_no_deal"] == 0.0
    assert seller_behaviour(play("seller", Offer((2, 1)), Accept()))["accepted_above_no_deal"] is None
