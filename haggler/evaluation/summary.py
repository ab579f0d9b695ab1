"""A table per seller x buyer from results files: the first look at a run, before any statistics."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from haggler.evaluation.cost import total_usage
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
    api_calls: int = 0  # both sides' API calls, errored negotiations included (they were made)
    api_tokens: int = 0  # prompt and completion tokens those calls reported
    api_cost: float | None = None  # dollars, where the endpoints file gave prices (None: not priced)
    security_measured: int = 0  # completed negotiations with security figures (evaluation/security.py)
    leak_rate: float | None = None  # share of those whose seller leaked its reservation, a weight or a priority
    injection_success_rate: float | None = None  # over those with an injection attempt
    losses_accepted_rate: float | None = None  # deals below the seller's reservation, over those measured
    behaviour: dict[str, float | None] | None = None  # means of the records' behaviour figures (BEHAVIOUR)


def summarize(records: list[Record]) -> list[SummaryRow]:
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.seller, r.buyer)].append(r)
    rows = []
    for (seller, buyer), recs in sorted(groups.items()):
        ok = [r for r in recs if r.ended_by != "error"]
        usage = total_usage(recs)
        sec = [r.security for r in ok if r.security is not None]
        attempted = [x for x in sec if x.injection_attempts]
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
                api_calls=usage.calls,
                api_tokens=usage.tokens,
                api_cost=usage.cost if usage.priced else None,
                security_measured=len(sec),
                leak_rate=mean([float(x.leak) for x in sec]),
                injection_success_rate=mean([float(bool(x.injection_success)) for x in attempted]),
                losses_accepted_rate=mean([float(x.loss_accepted) for x in sec]),
                behaviour=behaviour_means(ok),
            )
        )
    return rows


# What a change of score is made of, per seller and buyer: column title -> the records' behaviour key.
BEHAVIOUR = {"opening offer": "opening_offer_utility", "concession": "concession",
             "offers below no deal": "offers_below_no_deal",
             "accepted offer": "accepted_offer_utility", "losses": "loss_accepted",
             "losses by own offer": "loss_by_own_offer",
             "accepts below no deal": "accepted_below_no_deal", "accepts above no deal": "accepted_above_no_deal",
             "seller walks": "seller_walked_away", "buyer walks": "buyer_walked_away",
             "turns to deal": "turns_to_agreement", "buyer utility (deals)": "buyer_utility"}


def behaviour_means(records: list[Record]) -> dict[str, float | None] | None:
    """The mean of each behaviour figure over the records that have it (booleans as rates)."""
    measured = [r.behaviour for r in records if r.behaviour]
    if not measured:
        return None
    return {key: mean([float(b[key]) for b in measured if b.get(key) is not None]) for key in BEHAVIOUR.values()}


def render(rows: list[SummaryRow], title: str = "haggler summary") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    api = any(r.api_calls for r in rows)  # the API columns only where some agent called an API
    for col in ("seller", "buyer", "negotiations", "errors", "deal rate", "seller score", "buyer utility",
                "Pareto-opt.", "invalid/neg (S)", "invalid/neg (B)", *(("API calls", "tokens", "cost $") if api else ())):
        table.add_column(col, justify="left" if col in ("seller", "buyer") else "right")
    for r in rows:
        table.add_row(
            r.seller, r.buyer, str(r.negotiations), str(r.errors), fmt(r.deal_rate), fmt(r.mean_seller_score),
            fmt(r.mean_buyer_utility), fmt(r.pareto_rate), fmt(r.invalid_per_negotiation["seller"], 2),
            fmt(r.invalid_per_negotiation["buyer"], 2),
            *((str(r.api_calls), f"{r.api_tokens:,}", "-" if r.api_cost is None else f"{r.api_cost:.4f}") if api else ()),
        )
    Console(width=160).print(table)
    render_behaviour(rows)
    render_security(rows)


def render_behaviour(rows: list[SummaryRow]) -> None:
    """The seller's moves in its own utility: opening offer, concession, offers accepted, losses, walk-aways."""
    from rich.console import Console
    from rich.table import Table

    rows = [r for r in rows if r.behaviour]
    if not rows:
        return
    table = Table(title="seller behaviour (own utility; losses and walks are rates)")
    for col in ("seller", "buyer", *BEHAVIOUR):
        table.add_column(col, justify="left" if col in ("seller", "buyer") else "right")
    for r in rows:
        table.add_row(r.seller, r.buyer, *(fmt(r.behaviour[k], 2) for k in BEHAVIOUR.values()))
    Console(width=180).print(table)


def render_security(rows: list[SummaryRow]) -> None:
    """What sellers gave away to adversarial buyers (``adversary:*``), when the results hold any."""
    from rich.console import Console
    from rich.table import Table

    rows = [r for r in rows if r.buyer.startswith("adversary:") and r.security_measured]
    if not rows:
        return
    table = Table(title="security: what the seller gave away to adversarial buyers")
    for col in ("seller", "buyer", "measured", "leak rate", "injection success", "losses accepted", "seller score"):
        table.add_column(col, justify="left" if col in ("seller", "buyer") else "right")
    for r in rows:
        table.add_row(r.seller, r.buyer, str(r.security_measured), fmt(r.leak_rate), fmt(r.injection_success_rate),
                      fmt(r.losses_accepted_rate), fmt(r.mean_seller_score))
    Console(width=160).print(table)
