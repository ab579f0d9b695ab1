import pytest

from haggler.core.protocol import Negotiation, ProtocolConfig, play, transcript
from haggler.core.score import score
from haggler.core.types import Accept, Invalid, Offer, Reply, WalkAway
from tests.conftest import Replay, small_scenario


def _play(seller, buyer, opener="seller", max_turns=6, max_invalid=3):
    n = Negotiation(small_scenario(max_turns=max_turns), ProtocolConfig(opener=opener, max_invalid=max_invalid))
    return play(n, Replay(seller), Replay(buyer))


def test_turns_alternate_from_the_opener():
    n = _play([Offer((2, 1))] * 3, [Offer((0, 1))] * 3, opener="buyer")
    assert [t.speaker for t in n.turns] == ["buyer", "seller"] * 3
    assert n.ended_by == "deadline" and n.agreement is None and len(n.turns) == 6


def test_accept_binds_the_counterparts_offer_exactly():
    n = _play([Offer((2, 1)), Accept()], [Offer((1, 0))])
    assert n.ended_by == "accept" and n.agreement == (1, 0)
    assert n.scenario.names_of(n.agreement) == {"price": "$20", "colour": "red"}


def test_accept_after_own_counter_offer_is_invalid():
    # the buyer offered, the seller countered: the buyer's offer is no longer on the table for the seller
    n = _play([Offer((2, 1)), Offer((2, 0)), Accept()], [Offer((1, 1)), Invalid("x"), WalkAway()])
    assert n.turns[2].action == Offer((2, 0))
    # turn 3: buyer invalid; turn 4: seller tries to accept its own offer
    assert n.turns[4].action == Invalid("accept with no offer from the other side on the table")
    assert n.ended_by == "walk_away" and n.walked_away_by == "buyer" and n.agreement is None


@pytest.mark.parametrize(
    "action, reason",
    [
        (Accept(), "accept with no offer from the other side on the table"),
        (Offer((2,)), "incomplete offer: 1 of 2 issues given"),
        (Offer((2, 5)), "unknown option 5 for issue 'colour'"),
        (Offer((-1, 0)), "unknown option -1 for issue 'price'"),
        ([Offer((2, 1)), Accept()], "exactly one action per turn, found 2 (offer, accept)"),
        ([], "exactly one action per turn, found 0 (none)"),
    ],
)
def test_invalid_actions_are_recorded_with_their_reason_and_bind_nothing(action, reason):
    n = _play([action, Offer((2, 1)), Offer((2, 1))], [Offer((0, 0)), Offer((0, 0)), Offer((0, 0))])
    first = n.turns[0]
    assert first.action == Invalid(reason)
    assert n.invalid == {"seller": 1, "buyer": 0}
    assert n.agreement is None  # the table held nothing from the seller until turn 2
    assert transcript(n)[0]["action"] == {"type": "invalid", "reason": reason}


def test_too_many_invalid_actions_is_a_walk_away():
    n = _play([Invalid("garbage")] * 2, [Offer((0, 0))] * 2, max_invalid=2)
    assert n.ended_by == "walk_away" and n.walked_away_by == "seller" and len(n.turns) == 3
    figures = score(n)
    assert figures.deal is False and figures.seller_score == n.scenario.seller.reservation


def test_walk_away_ends_without_deal():
    n = _play([Offer((2, 1))], [WalkAway()])
    assert (n.ended_by, n.walked_away_by, n.agreement, len(n.turns)) == ("walk_away", "buyer", None, 2)


def test_text_never_binds():
    class Talker(Replay):
        def respond(self, negotiation):
            return Reply("I accept your offer! Deal at $10, red.", self.actions.pop(0))

    n = Negotiation(small_scenario(max_turns=4))
    play(n, Talker([Offer((2, 1))] * 2), Talker([Offer((0, 0))] * 2))
    assert n.ended_by == "deadline" and n.agreement is None


def test_deadline_on_the_last_turn_still_allows_accept():
    n = _play([Offer((2, 1)), Offer((1, 1))], [Offer((0, 0)), Accept()], max_turns=4)
    assert n.ended_by == "accept" and n.agreement == (1, 1) and len(n.turns) == 4


def test_an_agent_that_raises_ends_the_negotiation_as_an_error():
    n = _play([Offer((2, 1)), RuntimeError("server on fire")], [Offer((0, 0))])
    assert n.ended_by == "error" and "server on fire" in n.error and "test:replay" in n.error
    assert score(n).seller_score is None and score(n).deal is None


def test_no_turns_after_the_end_and_bad_config():
    n = _play([Offer((2, 1))], [Accept()])
    with pytest.raises(RuntimeError):
        n.step(Reply("late", Offer((0, 0))))
    with pytest.raises(ValueError, match="opener"):
        ProtocolConfig(opener="referee")
    with pytest.raises(ValueError, match="max_invalid"):
        ProtocolConfig(max_invalid=0)
