"""``haggler play``: a person plays the buyer in the terminal against any seller spec."""

from __future__ import annotations

from collections.abc import Callable

from haggler.agents.human import HumanAgent
from haggler.agents.registry import AgentContext, check_spec, make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.core.scenario import Scenario
from haggler.core.score import score
from haggler.core.types import Side
from haggler.engine.rollout import Game, play_lockstep


def play_against(seller: str, scenario: Scenario, opener: Side = "seller", seed: int = 0, temperature: float = 1.0,
                 say: Callable[[str], None] = print) -> Negotiation:
    """Play one negotiation with the person as buyer; say how it ended and what each side got."""
    check_spec(seller)
    human = HumanAgent(scenario, "buyer")
    agent = make_agent(seller, scenario, "seller", seed, AgentContext(temperature=temperature))
    game = Game(Negotiation(scenario, ProtocolConfig(opener=opener)), {"seller": agent, "buyer": human})
    play_lockstep([game])
    neg = game.negotiation
    if neg.turns and neg.turns[-1].speaker == "seller":
        say(f"\nseller: {neg.turns[-1].text}")
    figures = score(neg)
    say(f"\nEnded by {neg.ended_by}" + (f" ({neg.error})" if neg.error else ""))
    if neg.agreement is not None:
        say("Agreement: " + ", ".join(f"{k}: {v}" for k, v in scenario.names_of(neg.agreement).items()))
    if figures.deal is not None:
        say(f"Your utility (buyer): {figures.buyer_utility:.3f} (no deal: {scenario.buyer.reservation:.3f})")
        say(f"Seller's utility: {figures.seller_utility:.3f} (no deal: {scenario.seller.reservation:.3f})")
    return neg
