"""The alternating-offers protocol as a state machine: one ``Negotiation`` per game, one ``step`` per turn.

Agents never mutate a negotiation; whoever drives it (``play`` below for agents that answer at once,
the batched rollout engine for language models) asks the agent for a ``Reply`` and hands it to
``step``. Only actions bind; text never does. The rules:

- turns alternate from the opener; after ``scenario.max_turns`` turns without agreement, no deal;
- an offer must assign one valid option to every issue;
- accept binds the counterpart's offer on the table exactly as it was made (the table holds the
  latest valid offer by either side, so an accept after one's own counter-offer is invalid);
- walk away ends the negotiation without a deal;
- anything else is an invalid action, recorded with its reason; the turn counts as a message only,
  and after ``max_invalid`` invalid actions a side is taken to walk away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Action, EndedBy, Invalid, Offer, Outcome, Reply, Side, Turn, WalkAway, other


@dataclass(frozen=True)
class ProtocolConfig:
    opener: Side = "seller"
    max_invalid: int = 3  # invalid actions by one side before it is taken to walk away

    def __post_init__(self) -> None:
        if self.opener not in ("seller", "buyer"):
            raise ValueError(f"opener must be 'seller' or 'buyer', got {self.opener!r}")
        if self.max_invalid < 1:
            raise ValueError(f"max_invalid must be at least 1, got {self.max_invalid}")


class Agent(Protocol):
    """Anything that can take a turn. Scripted agents answer at once; LLM agents are driven in batches."""

    spec: str

    def respond(self, negotiation: Negotiation) -> Reply: ...


class Negotiation:
    __slots__ = (
        "scenario", "config", "turns", "table", "invalid", "ended_by", "agreement", "walked_away_by", "error",
    )

    def __init__(self, scenario: Scenario, config: ProtocolConfig | None = None) -> None:
        self.scenario = scenario
        self.config = config or ProtocolConfig()
        self.turns: list[Turn] = []
        self.table: tuple[Side, Outcome] | None = None  # (who offered, the offer)
        self.invalid: dict[Side, int] = {"seller": 0, "buyer": 0}
        self.ended_by: EndedBy | None = None
        self.agreement: Outcome | None = None
        self.walked_away_by: Side | None = None
        self.error: str | None = None

    # ---- what an agent may look at ----

    @property
    def done(self) -> bool:
        return self.ended_by is not None

    @property
    def to_move(self) -> Side:
        opener = self.config.opener
        return opener if len(self.turns) % 2 == 0 else other(opener)

    @property
    def turn_index(self) -> int:
        return len(self.turns)

    @property
    def turns_left(self) -> int:
        """Turns left including the current one."""
        return self.scenario.max_turns - len(self.turns)

    @property
    def relative_time(self) -> float:
        """0 at the first turn, 1 at the last allowed turn."""
        return len(self.turns) / (self.scenario.max_turns - 1)

    def offer_for(self, side: Side) -> Outcome | None:
        """The counterpart's offer that ``side`` could accept now, if any."""
        if self.table is not None and self.table[0] != side:
            return self.table[1]
        return None

    # ---- the rules ----

    def _validate(self, side: Side, action: Action | Sequence[Action]) -> Action:
        if isinstance(action, (list, tuple)):  # a reader that found several actions in one message
            if len(action) != 1:
                kinds = ", ".join(type(a).__name__.lower() for a in action) or "none"
                return Invalid(f"exactly one action per turn, found {len(action)} ({kinds})")
            action = action[0]
        if isinstance(action, Offer):
            shape = self.scenario.shape
            if len(action.outcome) != len(shape):
                return Invalid(f"incomplete offer: {len(action.outcome)} of {len(shape)} issues given")
            for issue, (o, n) in zip(self.scenario.issues, zip(action.outcome, shape)):
                if not (isinstance(o, int) and 0 <= o < n):
                    return Invalid(f"unknown option {o!r} for issue {issue.name!r}")
            return action
        if isinstance(action, Accept):
            if self.offer_for(side) is None:
                return Invalid("accept with no offer from the other side on the table")
            return action
        if isinstance(action, (WalkAway, Invalid)):
            return action
        return Invalid(f"not an action: {type(action).__name__}")

    def step(self, reply: Reply) -> Turn:
        if self.done:
            raise RuntimeError("the negotiation has ended; no more turns")
        side = self.to_move
        action = self._validate(side, reply.action)
        turn = Turn(index=len(self.turns), speaker=side, text=reply.text, action=action, thought=reply.thought)
        self.turns.append(turn)
        if isinstance(action, Offer):
            self.table = (side, action.outcome)
        elif isinstance(action, Accept):
            self.agreement = self.table[1]  # type: ignore[index]  # validated above
            self.ended_by = "accept"
        elif isinstance(action, WalkAway):
            self.walked_away_by = side
            self.ended_by = "walk_away"
        else:
            self.invalid[side] += 1
            if self.invalid[side] >= self.config.max_invalid:
                self.walked_away_by = side
                self.ended_by = "walk_away"
        if self.ended_by is None and len(self.turns) >= self.scenario.max_turns:
            self.ended_by = "deadline"
        return turn

    def fail(self, reason: str) -> None:
        """End as an error: something outside the rules broke (a server, a crashed agent). Never scored."""
        self.error = reason
        self.ended_by = "error"
        self.agreement = None


def action_to_json(scenario: Scenario, action: Action) -> dict[str, Any]:
    if isinstance(action, Offer):
        return {"type": "offer", "offer": scenario.names_of(action.outcome)}
    if isinstance(action, Accept):
        return {"type": "accept"}
    if isinstance(action, WalkAway):
        return {"type": "walk_away"}
    return {"type": "invalid", "reason": action.reason}


def transcript(negotiation: Negotiation) -> list[dict[str, Any]]:
    scenario = negotiation.scenario
    return [
        {"turn": t.index, "speaker": t.speaker, "text": t.text, "action": action_to_json(scenario, t.action),
         **({"thought": t.thought} if t.thought else {})}
        for t in negotiation.turns
    ]


def play(negotiation: Negotiation, seller: Agent, buyer: Agent) -> Negotiation:
    """Drive a negotiation to its end with agents that answer at once. An agent that raises ends it as an error."""
    agents = {"seller": seller, "buyer": buyer}
    while not negotiation.done:
        side = negotiation.to_move
        try:
            reply = agents[side].respond(negotiation)
        except Exception as err:  # noqa: BLE001 - any agent failure is recorded, never scored as a negotiation
            negotiation.fail(f"{side} agent {agents[side].spec!r} raised {type(err).__name__}: {err}")
            break
        negotiation.step(reply)
    return negotiation
