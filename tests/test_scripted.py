import pytest

from haggler.agents.registry import SpecError, check_spec, make_agent
from haggler.agents.scripted import TimeDependentAgent
from haggler.core.analysis import analyze
from haggler.scenarios.generate import generate_scenarios
from haggler.core.protocol import Negotiation, ProtocolConfig, play, transcript
from haggler.core.types import Accept, Offer
from tests.conftest import Replay

SCENARIOS = generate_scenarios(6, 21, max_turns=12)


def _game(seller, buyer, scenario, opener="seller", seed=5):
    n = Negotiation(scenario, ProtocolConfig(opener=opener))
    return play(n, make_agent(seller, scenario, "seller", seed), make_agent(buyer, scenario, "buyer", seed + 1))


def _own_offers(n, side):
    return [(t.index, t.action.outcome) for t in n.turns if t.speaker == side and isinstance(t.action, Offer)]


@pytest.mark.parametrize("name, e", [("boulware", 0.2), ("linear", 1.0), ("conceder", 2.0)])
def test_time_dependent_offers_the_closest_outcome_at_or_above_the_target(name, e):
    s = SCENARIOS[0]
    n = _game(f"scripted:{name}", "scripted:hardliner", s)
    agent = make_agent(f"scripted:{name}", s, "seller", 0)
    assert isinstance(agent, TimeDependentAgent) and agent.exponent == e
    utils = analyze(s).seller_utils
    r, best = s.seller.reservation, float(utils.max())
    for index, outcome in _own_offers(n, "seller"):
        t = index / (s.max_turns - 1)
        target = r + (best - r) * (1 - t ** (1 / e))
        u = s.utility("seller", outcome)
        assert u >= target - 1e-9
        assert not ((utils >= target - 1e-9) & (utils < u - 1e-9)).any(), "a closer outcome above the target existed"
    assert _own_offers(n, "seller")[0][1] in {s.outcome_at(i) for i in range(s.n_outcomes) if utils[i] == best}


def test_boulware_concedes_later_than_conceder():
    for s in SCENARIOS:
        mid = s.max_turns // 2
        u = {}
        for name in ("boulware", "conceder"):
            n = _game(f"scripted:{name}", "scripted:hardliner", s)
            u[name] = [s.utility("seller", o) for i, o in _own_offers(n, "seller") if i <= mid][-1]
        assert u["boulware"] >= u["conceder"]


def test_never_offers_below_reservation_and_hardliner_never_moves():
    for s in SCENARIOS:
        for name in ("boulware", "linear", "conceder", "tft", "random"):
            n = _game(f"scripted:{name}", "scripted:boulware", s, opener="buyer")
            assert all(s.utility("seller", o) >= s.seller.reservation - 1e-9 for _, o in _own_offers(n, "seller"))
        n = _game("scripted:hardliner", "scripted:conceder", s)
        best = float(analyze(s).seller_utils.max())
        assert all(s.utility("seller", o) == pytest.approx(best) for _, o in _own_offers(n, "seller"))
        assert n.agreement is None  # generated scenarios are non-trivial: the seller's best is unacceptable


def test_ac_next_accepts_exactly_when_the_offer_beats_the_next_own_offer():
    s = SCENARIOS[1]
    utils = analyze(s).seller_utils
    for idx in range(0, s.n_outcomes, max(1, s.n_outcomes // 40)):
        offer = s.outcome_at(idx)
        n = Negotiation(s, ProtocolConfig(opener="buyer"))
        n.step(Replay([Offer(offer)]).respond(n))
        agent = make_agent("scripted:linear", s, "seller", 3)
        nxt = agent.target(n.relative_time)
        nxt_u = min(u for u in utils if u >= nxt - 1e-12)
        reply = agent.respond(n)
        should = utils[idx] >= nxt_u - 1e-12 and utils[idx] >= s.seller.reservation
        assert isinstance(reply.action, Accept) == should


def test_tit_for_tat_mirrors_the_opponents_concession():
    s = SCENARIOS[2]
    ranked = sorted(range(s.n_outcomes), key=lambda i: s.utility("seller", s.outcome_at(i)))
    lo, mid = s.outcome_at(ranked[0]), s.outcome_at(ranked[len(ranked) // 2])
    conceded = s.utility("seller", mid) - s.utility("seller", lo)
    n = Negotiation(s, ProtocolConfig(opener="buyer"))
    tft = make_agent("scripted:tft", s, "seller", 1)
    n.step(Replay([Offer(lo)]).respond(n))
    n.step(tft.respond(n))
    assert tft.aspiration == pytest.approx(float(analyze(s).seller_utils.max()))
    n.step(Replay([Offer(mid)]).respond(n))
    tft.respond(n)
    assert tft.aspiration == pytest.approx(max(s.seller.reservation, tft.pmax - conceded))


def test_same_seed_same_transcript_and_messages_read_as_negotiation():
    s = SCENARIOS[3]
    a = transcript(_game("scripted:random", "scripted:tft", s, seed=9))
    b = transcript(_game("scripted:random", "scripted:tft", s, seed=9))
    c = transcript(_game("scripted:random", "scripted:tft", s, seed=10))
    assert a == b and a != c
    first = a[0]
    assert s.context in first["text"] and all(v in first["text"] for v in first["action"]["offer"].values())


def test_negmas_negotiators_can_play_a_side():
    s = SCENARIOS[4]
    n = _game("negmas:BoulwareTBNegotiator", "scripted:conceder", s)
    assert n.ended_by in ("accept", "deadline") and n.error is None
    assert all(t.action.__class__.__name__ in ("Offer", "Accept") for t in n.turns)
    n2 = _game("scripted:conceder", "negmas:NaiveTitForTatNegotiator", s, opener="buyer")
    assert n2.error is None and len(n2.turns) >= 2


@pytest.mark.parametrize("spec", ["scripted:nope", "negmas:NotAClass", "negmas:Issue", "human:bob", "boulware"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(SpecError):
        check_spec(spec)
