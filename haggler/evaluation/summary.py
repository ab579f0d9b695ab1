"""A table per seller x buyer from results files: the first look at a run, before any statistics."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from haggler.evaluation.figures import fmt, mean
from haggler.evaluation.results import Record


@dataclass(frozen=True)
class SummaryRow:
    seller: str
    buyer: str
    negotiations: int  # completed (not errored)
    errors: int
    deal_rate: float | None
    mean_seller_score: float | None
    mean_buyer_utility: float | None
    pareto_rate: float | None  # share of completed negotiations that ended in a Pareto-optimal deal
    invalid_per_negotiation: dict[str, float | None]


def summarize(records: list[Record]) -> list[SummaryRow]:
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.seller, r.buyer)].append(r)
    rows = []
    for (seller, buyer), recs in sorted(groups.items()):
        ok = [r for r in recs if r.ended_by != "error"]
        rows.append(
            SummaryRow(
                seller=seller,
                buyer=buyer,
                negotiations=len(ok),
                errors=len(recs) - len(ok),
                deal_rate=mean([float(r.deal) for r in ok]),
                mean_seller_score=mean([r.seller_score for r in ok]),
                mean_buyer_utility=mean([r.buyer_utility for r in ok]),
                pareto_rate=mean([float(bool(r.pareto_optimal)) for r in ok]),
                invalid_per_negotiation={
                    side: mean([float(r.invalid_actions[side]) for r in ok]) for side in ("seller", "buyer")
                },
            )
        )
    return rows


def render(rows: list[SummaryRow], title: str = "haggler summary") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("seller", "buyer", "negotiations", "errors", "deal rate", "seller score", "buyer utility",
                "Pareto-opt.", "invalid/neg (S)", "invalid/neg (B)"):
        table.add_column(col, justify="left" if col in ("seller", "buyer") else "right")
    for r in rows:
        table.add_row(
            r.seller, r.buyer, str(r.negotiations), str(r.errors), fmt(r.deal_rate), fmt(r.mean_seller_score),
            fmt(r.mean_buyer_utility), fmt(r.pareto_rate), fmt(r.invalid_per_negotiation["seller"], 2),
            fmt(r.invalid_per_negotiation["buyer"], 2),
        )
    Console(width=160).print(table)
