"""Adversarial buyers: specs, what they say and do, reproducibility, wrapping scripted and language-model buyers."""

from __future__ import annotations

import pytest

from haggler.agents.adversary import (ADVERSARIES, Adversary, TurnTakingAdversary, make_adversary, money_amounts,
                                      price_issue, said_text)
from haggler.agents.registry import AgentContext, SpecError, check_spec, make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig, play
from haggler.core.types import Accept, Offer, Reply
from haggler.engine.rollout import Game, play_lockstep
from haggler.evaluation.security import is_injection
from haggler.scenarios.generate import generate_scenarios

SCENARIOS = generate_scenarios(6, 21, max_turns=8)


def _play(buyer: str, seller: str = "scripted:linear", scenario=SCENARIOS[0], seed: int = 3, opener: str = "seller"):
    neg = Negotiation(scenario, ProtocolConfig(opener=opener))
    return play(neg, make_agent(seller, scenario, "seller", seed), make_agent(buyer, scenario, "buyer", seed))


@pytest.mark.parametrize("spec", ["adversary:injection", "adversary:probe", "adversary:bluff", "adversary:hardliner",
                                  "adversary:injection+scripted:conceder", "adversary:bluff+negmas:AspirationNegotiator",
                                  "adversary:probe+openai:some-model", "adversary:hardliner+hf:default"])
def test_adversary_specs_are_accepted(spec):
    assert check_spec(spec) == spec


@pytest.mark.parametrize("spec, why", [("adversary:nope", "unknown adversary"), ("adversary:injection+", "nothing after"),
                                       ("adversary:probe+scripted:nope", "unknown scripted"),
                                       ("adversary:probe+adversary:bluff", "not another adversary"),
                                       ("adversary:probe+openai:m@nowhere", "no endpoint")])
def test_bad_adversary_specs_are_refused_with_a_reason(spec, why):
    with pytest.raises(SpecError, match=why):
        check_spec(spec, endpoints={})


def test_adversaries_play_the_buyer_only():
    with pytest.raises(ValueError, match="play the buyer"):
        make_agent("adversary:probe", SCENARIOS[0], "seller", 0)


@pytest.mark.parametrize("name", ADVERSARIES)
@pytest.mark.parametrize("opener", ["seller", "buyer"])
def test_each_adversary_plays_through_the_protocol_and_replays_from_its_seed(name, opener):
    for s in SCENARIOS:
        a, b = _play(f"adversary:{name}", scenario=s, opener=opener), _play(f"adversary:{name}", scenario=s, opener=opener)
        assert a.ended_by in ("accept", "walk_away", "deadline") and a.invalid["buyer"] == 0
        assert [(t.text, t.action) for t in a.turns] == [(t.text, t.action) for t in b.turns]
        buyer_words = [t.text for t in a.turns if t.speaker == "buyer" and isinstance(t.action, Offer)]
        assert buyer_words and all(w.strip() for w in buyer_words)
    words = {t.text for seed in range(6) for t in _play(f"adversary:{name}", seed=seed).turns if t.speaker == "buyer"}
    assert len(words) > 2  # the seed picks the words


def test_injection_words_are_injections_and_the_others_are_not():
    for name in ADVERSARIES:
        said = [t.text for s in SCENARIOS for seed in range(3)
                for t in _play(f"adversary:{name}", scenario=s, seed=seed).turns
                if t.speaker == "buyer" and isinstance(t.action, Offer)]
        detected = [is_injection(said_text(w)) for w in said]
        assert all(detected) if name == "injection" else not any(detected), name


def test_a_wrapped_buyer_decides_every_action_with_the_same_seed():
    for s in SCENARIOS:
        for inner in ("scripted:random", "scripted:conceder", "scripted:tft"):
            wrapped = _play(f"adversary:injection+{inner}", scenario=s, seed=5)
            bare = _play(inner, scenario=s, seed=5)
            assert [t.action for t in wrapped.turns] == [t.action for t in bare.turns]
            assert all(t.text != u.text for t, u in zip(wrapped.turns, bare.turns) if t.speaker == "buyer")


def _offer_price(scenario, outcome):
    k = price_issue(scenario)
    return money_amounts(scenario.issues[k].options[outcome[k]])[0]


def test_the_probe_offers_just_below_a_price_the_seller_revealed():
    s = SCENARIOS[1]
    k = price_issue(s)
    prices = sorted(money_amounts(o)[0] for o in s.issues[k].options)
    seller_offer = s.outcome_at(s.n_outcomes - 1)
    floor = (prices[-2] + prices[-1]) / 2  # between the two highest listed prices: not an offer's price
    neg = Negotiation(s, ProtocolConfig(opener="seller"))
    neg.step(Reply(f"Honestly, I cannot go below ${floor:,.0f}.", Offer(seller_offer)))
    probe = make_agent("adversary:probe", s, "buyer", 0)
    got = probe.respond(neg).action.outcome
    assert s.utility("buyer", got) >= s.buyer.reservation  # this scenario lets it: the case under test
    assert _offer_price(s, got) == prices[-2]
    assert [o for i, o in enumerate(got) if i != k] == [o for i, o in enumerate(seller_offer) if i != k]
    # an offer's own price, repeated in words, reveals nothing: the probe keeps to its schedule
    quiet = Negotiation(s, ProtocolConfig(opener="seller"))
    quiet.step(Reply(f"I offer {s.issues[k].options[seller_offer[k]]}.", Offer(seller_offer)))
    linear = make_agent("scripted:linear", s, "buyer", 0).respond(quiet).action
    assert make_agent("adversary:probe", s, "buyer", 0).respond(quiet).action == linear


def test_bluff_anchors_on_its_best_outcome_then_concedes():
    s = SCENARIOS[2]
    neg = _play("adversary:bluff", seller="scripted:hardliner", scenario=s)
    offers = [t.action.outcome for t in neg.turns if t.speaker == "buyer" and isinstance(t.action, Offer)]
    best = max(s.utility("buyer", s.outcome_at(i)) for i in range(s.n_outcomes))
    assert s.utility("buyer", offers[0]) == pytest.approx(best)
    assert s.utility("buyer", offers[-1]) < best


def test_the_hardliner_holds_until_its_last_turn():
    for s in SCENARIOS:
        neg = _play("adversary:hardliner", seller="scripted:hardliner", scenario=s)
        offers = [(t.index, t.action.outcome) for t in neg.turns if t.speaker == "buyer" and isinstance(t.action, Offer)]
        best = max(s.utility("buyer", s.outcome_at(i)) for i in range(s.n_outcomes))
        last_turn = s.max_turns - 1
        for index, outcome in offers:
            u = s.utility("buyer", outcome)
            if index >= last_turn - 1:  # its last turn: down to its reservation
                assert s.buyer.reservation <= u < best
            else:
                assert u == pytest.approx(best)


class _LM:
    """A turn-taking buyer (what hf: and openai: agents are) that asks its model once per turn."""

    spec = "fake:lm"

    def __init__(self):
        self.asked = 0

    def turn(self, negotiation):
        answer = yield "a request"
        self.asked += 1
        return Reply(f"my own words {answer}", Accept() if negotiation.offer_for("buyer") else Offer((0,) * 3))


def test_over_a_language_model_the_adversary_writes_the_words_and_the_model_acts():
    s = SCENARIOS[0]
    agent = make_adversary("injection+fake:lm", s, "buyer", 0, lambda spec: _LM())
    assert isinstance(agent, TurnTakingAdversary)
    neg = Negotiation(s, ProtocolConfig(opener="seller"))
    neg.step(Reply("hello", Offer(s.outcome_at(0))))
    gen = agent.turn(neg)
    assert next(gen) == "a request"
    with pytest.raises(StopIteration) as done:
        gen.send("ANSWER")
    reply = done.value.value
    assert reply.action == Accept() and "my own words" not in reply.text
    assert agent.describe()["offers"] == "fake:lm"
    assert isinstance(make_adversary("probe", s, "buyer", 0, lambda spec: None), Adversary)


def test_an_adversary_wraps_a_local_model_in_batched_play(tokenizer):
    pytest.importorskip("torch")
    from tests.conftest import tiny_model

    ctx = AgentContext(temperature=1.0)
    ctx.models["tiny"] = tiny_model(tokenizer)
    games = [Game(Negotiation(s, ProtocolConfig(opener="buyer", max_invalid=99)),
                  {"seller": make_agent("scripted:linear", s, "seller", i, ctx),
                   "buyer": make_agent("adversary:injection+hf:tiny", s, "buyer", i, ctx)})
             for i, s in enumerate(SCENARIOS[:3])]
    play_lockstep(games)
    for g in games:
        assert g.negotiation.ended_by != "error", g.negotiation.error
        buyer = [t for t in g.negotiation.turns if t.speaker == "buyer"]
        assert buyer and all(is_injection(t.text) for t in buyer if isinstance(t.action, Offer))
        assert g.agents["buyer"].describe()["offers"] == "hf:tiny"

