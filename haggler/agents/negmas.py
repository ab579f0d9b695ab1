"""Any NegMAS SAO negotiator as a haggler agent (``negmas:CLASSNAME``), so the field's agents can play.

The negotiator joins a private ``SAOMechanism`` only to get its interface and utility function; the
mechanism never runs. Each haggler turn becomes one call of the negotiator with an ``SAOState`` that
carries the counterpart's offer on the table and haggler's clock.
"""

from __future__ import annotations

from typing import Any

from haggler.scenarios import negmas as negmas_bridge
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Invalid, Offer, Reply, Side, WalkAway, other


def negmas_class(name: str) -> type:
    import negmas
    import negmas.gb
    import negmas.sao

    cls = getattr(negmas.sao, name, None) or getattr(negmas, name, None)
    # SAO negotiators and the generic (GB) ones that SAO mechanisms accept, e.g. BoulwareTBNegotiator
    if not (isinstance(cls, type) and issubclass(cls, (negmas.sao.SAONegotiator, negmas.gb.GBNegotiator))):
        raise ValueError(f"negmas:{name} is not a NegMAS SAO negotiator class (try negmas:BoulwareTBNegotiator)")
    return cls


class NegmasAgent:
    def __init__(self, scenario: Scenario, side: Side, class_name: str, seed: int) -> None:
        from negmas.sao import SAOMechanism

        self.spec = f"negmas:{class_name}"
        self.scenario = scenario
        self.side = side
        space = negmas_bridge.outcome_space(scenario)
        self._mechanism = SAOMechanism(outcome_space=space, n_steps=scenario.max_turns)
        self._negotiator = negmas_class(class_name)(name=side)
        self._mechanism.add(self._negotiator, ufun=negmas_bridge.ufun(scenario, side, space))
        self._started = False

    def _state(self, negotiation: Negotiation) -> Any:
        from negmas.sao import SAOState

        table = negotiation.offer_for(self.side)
        return SAOState(
            running=True,
            started=True,
            step=negotiation.turn_index,
            relative_time=negotiation.relative_time,
            n_negotiators=2,
            current_offer=None if table is None else negmas_bridge.to_negmas_outcome(self.scenario, table),
            current_proposer=None if table is None else other(self.side),
        )

    def respond(self, negotiation: Negotiation) -> Reply:
        from negmas.gb.common import ResponseType

        state = self._state(negotiation)
        if not self._started:
            self._negotiator._on_negotiation_start(state)
            self._started = True
        response = self._negotiator(state)
        name = type(self._negotiator).__name__
        if response.response == ResponseType.ACCEPT_OFFER and state.current_offer is not None:
            return Reply(f"[{name}] I accept.", Accept())
        if response.response == ResponseType.END_NEGOTIATION:
            return Reply(f"[{name}] I am leaving the negotiation.", WalkAway())
        if response.outcome is None:
            return Reply(f"[{name}] (no offer)", Invalid("the NegMAS negotiator made no offer"))
        outcome = negmas_bridge.from_negmas_outcome(self.scenario, tuple(response.outcome))
        terms = ", ".join(f"{k} {v}" for k, v in self.scenario.names_of(outcome).items())
        return Reply(f"[{name}] I propose {terms}.", Offer(outcome))
