"""Scripted negotiators from the automated-negotiation literature, usable on either side.

- time-dependent concession (Faratin et al.): target utility ``p(t) = Pmin + (Pmax - Pmin) * (1 - t**(1/e))``
  with e = 0.2 (Boulware), 1 (linear), 2 (Conceder), 0 (hardliner: never concedes);
- naive tit-for-tat: concede, in one's own utility, as much as the opponent's last offer improved on
  its previous one (also measured in one's own utility: the other side's utility is private);
- random: a seeded uniformly random offer among those at or above one's reservation value;
- no-deal: walks away at its first turn, so every negotiation ends at both sides' reservation values: the
  reference arm that a seller must beat to show more than refusing every offer (its surplus is exactly 0).

All accept by AC_next: accept the opponent's offer when it is worth at least as much as the offer one
would make next, and at least one's reservation value. Offers are the outcome whose own utility is
closest at or above the target; exact ties are broken at random (seeded). Pmin is the reservation
value, Pmax the best outcome. Each reply carries a short plain-language message.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right

from haggler.core.analysis import analyze
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Offer, Outcome, Reply, Side, WalkAway

TIE = 1e-12

EXPONENTS = {"boulware": 0.2, "linear": 1.0, "conceder": 2.0, "hardliner": 0.0}

_OFFER_TEXT = {
    "seller": (
        "Thanks for your interest in {context}. I can offer {terms}.",
        "Here is what I can do: {terms}. That is a fair deal for {context}.",
        "Let me meet you part of the way: {terms}.",
        "My offer stands at {terms}.",
    ),
    "buyer": (
        "I am interested in {context}. I would agree to {terms}.",
        "How about {terms}?",
        "I can move a little: {terms}.",
        "My proposal is {terms}.",
    ),
}
_ACCEPT_TEXT = ("That works for me. Deal.", "Agreed, let's close on your terms.", "Fine, I accept your offer.")


def describe_terms(scenario: Scenario, outcome: Outcome) -> str:
    parts = [f"{issue.name} {issue.options[o]}" for issue, o in zip(scenario.issues, outcome)]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


class ScriptedAgent:
    """Shared machinery: the own-utility ranking, AC_next acceptance, messages."""

    def __init__(self, scenario: Scenario, side: Side, seed: int, spec: str) -> None:
        self.scenario = scenario
        self.side = side
        self.spec = spec
        self.rng = random.Random(seed)
        self.utils, self.indices = analyze(scenario).ranking(side)
        self.reservation = scenario.reservation(side)
        self.pmax = self.utils[-1]
        self.pmin = self.reservation

    def _at_or_above(self, target: float) -> int:
        """Position in the ranking of the outcome closest at or above ``target`` (ties at random)."""
        n = len(self.utils)
        j = bisect_left(self.utils, target - TIE)
        if j >= n:
            return n - 1
        k = bisect_right(self.utils, self.utils[j] + TIE)
        return j if k - j == 1 else self.rng.randrange(j, k)

    def next_offer(self, negotiation: Negotiation) -> tuple[Outcome, float]:
        raise NotImplementedError

    def respond(self, negotiation: Negotiation) -> Reply:
        mine, mine_u = self.next_offer(negotiation)
        theirs = negotiation.offer_for(self.side)
        if theirs is not None:
            u = self.scenario.utility(self.side, theirs)
            if u >= mine_u - TIE and u >= self.reservation - TIE:
                return Reply(_ACCEPT_TEXT[negotiation.turn_index % len(_ACCEPT_TEXT)], Accept())
        texts = _OFFER_TEXT[self.side]
        text = texts[negotiation.turn_index // 2 % len(texts)].format(
            context=self.scenario.context, terms=describe_terms(self.scenario, mine)
        )
        return Reply(text, Offer(mine))

    def _offer_at(self, position: int) -> tuple[Outcome, float]:
        return self.scenario.outcome_at(self.indices[position]), self.utils[position]


class TimeDependentAgent(ScriptedAgent):
    def __init__(self, scenario: Scenario, side: Side, seed: int, spec: str, exponent: float) -> None:
        super().__init__(scenario, side, seed, spec)
        self.exponent = exponent

    def target(self, t: float) -> float:
        if self.exponent == 0.0:
            return self.pmax
        return self.pmin + (self.pmax - self.pmin) * (1.0 - t ** (1.0 / self.exponent))

    def next_offer(self, negotiation: Negotiation) -> tuple[Outcome, float]:
        return self._offer_at(self._at_or_above(self.target(negotiation.relative_time)))


class TitForTatAgent(ScriptedAgent):
    def __init__(self, scenario: Scenario, side: Side, seed: int, spec: str) -> None:
        super().__init__(scenario, side, seed, spec)
        self.aspiration = self.pmax
        self.offers_seen = 0  # concede once per new opponent offer, however often asked

    def next_offer(self, negotiation: Negotiation) -> tuple[Outcome, float]:
        theirs = [
            t.action.outcome for t in negotiation.turns if t.speaker != self.side and isinstance(t.action, Offer)
        ]
        if len(theirs) > self.offers_seen:
            self.offers_seen = len(theirs)
            if len(theirs) >= 2:
                u = self.scenario.utility
                conceded = u(self.side, theirs[-1]) - u(self.side, theirs[-2])
                self.aspiration = max(self.pmin, self.aspiration - max(conceded, 0.0))
        return self._offer_at(self._at_or_above(self.aspiration))


class RandomAgent(ScriptedAgent):
    def next_offer(self, negotiation: Negotiation) -> tuple[Outcome, float]:
        lo = min(bisect_left(self.utils, self.reservation - TIE), len(self.utils) - 1)
        return self._offer_at(self.rng.randrange(lo, len(self.utils)))


class NoDealAgent(ScriptedAgent):
    def respond(self, negotiation: Negotiation) -> Reply:
        return Reply("I will pass on this one.", WalkAway())


SCRIPTED = ("boulware", "linear", "conceder", "hardliner", "tft", "random", "no-deal")


def make_scripted(name: str, scenario: Scenario, side: Side, seed: int) -> ScriptedAgent:
    spec = f"scripted:{name}"
    if name in EXPONENTS:
        return TimeDependentAgent(scenario, side, seed, spec, EXPONENTS[name])
    if name == "tft":
        return TitForTatAgent(scenario, side, seed, spec)
    if name == "random":
        return RandomAgent(scenario, side, seed, spec)
    if name == "no-deal":
        return NoDealAgent(scenario, side, seed, spec)
    raise ValueError(f"unknown scripted negotiator {name!r}; known: {', '.join(SCRIPTED)}")
