"""The small vocabulary every module speaks: sides, actions, replies and turns.

Kept free of heavy imports so the hot negotiation loop and the CLI can load it cheaply.
An outcome is a tuple of option indices, one per issue, in the scenario's issue order;
names only appear at the edges (transcripts, result files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

Side: TypeAlias = Literal["seller", "buyer"]
SIDES: tuple[Side, Side] = ("seller", "buyer")
Outcome: TypeAlias = tuple[int, ...]
EndedBy: TypeAlias = Literal["accept", "walk_away", "deadline", "error"]


def other(side: Side) -> Side:
    return "buyer" if side == "seller" else "seller"


@dataclass(frozen=True, slots=True)
class Offer:
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Accept:
    pass


@dataclass(frozen=True, slots=True)
class WalkAway:
    pass


@dataclass(frozen=True, slots=True)
class Invalid:
    """A turn whose action could not be read; it counts as a message only."""

    reason: str


Action: TypeAlias = Offer | Accept | WalkAway | Invalid


@dataclass(frozen=True, slots=True)
class Reply:
    """What an agent says on its turn: free text (never binding) and one action (binding); a model that thinks
    before it answers also has its thought, kept for the transcript, never shown to the other side."""

    text: str
    action: Action
    thought: str = ""


@dataclass(frozen=True, slots=True)
class Turn:
    index: int
    speaker: Side
    text: str
    action: Action
    thought: str = ""  # private to the speaker: never relayed, never parsed
