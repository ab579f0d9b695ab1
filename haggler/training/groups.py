"""What the G copies of one training task share, across the processes that play them.

GRPO's group is one task played G times (one scenario, buyer, buyer seed and opener; only the seller's sampling
differs), and with several processes a group can span ranks. These read and fill a rollout's rows per group.
"""

from __future__ import annotations


def earlier_copies(prompts: list[str], rank: int, processes: int) -> dict[str, int]:
    """How many copies of each task the ranks before this one play in this rollout. TRL hands each process its
    slice of the global batch, so a group of ``num_generations`` copies can span ranks: counting copies from 0 on
    every rank gave two ranks' copies the same seller seeds (the same negotiations, twice). Counted over the
    ranks' prompts in rank order, a copy's index is its index in the global batch, as on one process."""
    if processes == 1:
        return {}
    from accelerate.utils import gather_object  # lazy: accelerate is loaded with the trainer by now

    ranks = gather_object([list(prompts)])
    counts: dict[str, int] = {}
    for earlier in ranks[:rank]:
        for key in earlier:
            counts[key] = counts.get(key, 0) + 1
    return counts


def sign_against_no_deal(surplus: float | None) -> float:
    """``reward: outcome``: +1 for a deal above the seller's reservation, -1 for one below it, 0 for none (its
    surplus 0); the reservation whatever ``no_deal`` scores, as the evaluation's good deals and losses are."""
    surplus = surplus or 0.0
    return float((surplus > 0) - (surplus < 0))


def split_on_deal(rows: list[tuple[str, bool]]) -> float:
    """The share of groups (one task's copies; ``rows`` are (prompt, deal) of unerrored copies) in which some
    copies reached a deal and some did not. Only such a group tells GRPO whether closing paid: a group whose copies
    all deal compares prices alone, and rewards the copies that conceded least (benchmarks/group_outcomes.py)."""
    outcomes: dict[str, set[bool]] = {}
    for prompt, deal in rows:
        outcomes.setdefault(prompt, set()).add(bool(deal))
    return sum(len(o) > 1 for o in outcomes.values()) / len(outcomes) if outcomes else 0.0


def fill_errored_with_group_mean(prompts: list[str], scores: list[float | None],
                                  pool: list[tuple[str, float | None]] | None = None) -> None:
    """An errored rollout takes its group's mean reward: zero advantage, and the group's baseline unchanged.
    ``pool``: every rank's (prompt, score) rows, where a group spans ranks (default: these rows)."""
    known: dict[str, list[float]] = {}
    for p, value in pool if pool is not None else zip(prompts, scores):
        if value is not None:
            known.setdefault(p, []).append(value)
    for i, p in enumerate(prompts):
        if scores[i] is None:
            group = known.get(p)
            scores[i] = sum(group) / len(group) if group else 0.0
