"""The report's behaviour table: per arm and buyer, what the seller did in its own utility, so that a change of
score can be explained (opening higher, conceding less, accepting better offers, fewer losses, walk-aways)."""

from __future__ import annotations

from typing import Any

from haggler.evaluation.figures import fmt
from haggler.evaluation.summary import BEHAVIOUR

BEHAVIOUR_HEADER = ["arm", "buyer", *BEHAVIOUR]
BEHAVIOUR_NOTE = ("Means over completed negotiations, in the seller's own utility: its first offer, its concession "
                  "(first minus last offer), the share of its offers worth less than its reservation value, the offers "
                  "it accepted; losses: deals below its reservation value, and those that were its own offer taken by "
                  "the buyer; accepts below/above no deal: the share of the buyer's offers worth less/more than its "
                  "reservation value that it accepted; walks: walk-aways by each side; buyer utility over deals.")


def behaviour_rows(per_buyer: dict[str, dict[str, dict]], pooled: str) -> list[list[Any]]:
    rows = []
    arms = list(dict.fromkeys(a for figures in per_buyer.values() for a in figures))
    for arm in arms:
        for buyer in [b for b in per_buyer if b != pooled] + [pooled]:
            b = per_buyer[buyer].get(arm, {}).get("behaviour")
            if b:
                rows.append([arm, buyer, *(fmt(b[k], 3) for k in BEHAVIOUR.values())])
    return rows
