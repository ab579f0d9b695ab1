"""haggler scenarios as NegMAS objects: the outcome space and each side's utility function.

Built from haggler's parsed scenario (never from NegMAS's own Genius loader, which mis-reads some
Genius files), so NegMAS and haggler evaluate exactly the same preferences.
"""

from __future__ import annotations

from typing import Any

from haggler.core.scenario import Scenario
from haggler.core.types import Outcome, Side


def outcome_space(scenario: Scenario) -> Any:
    from negmas import make_issue, make_os

    return make_os([make_issue(list(i.options), name=i.name) for i in scenario.issues])


def ufun(scenario: Scenario, side: Side, space: Any | None = None, with_reservation: bool = True) -> Any:
    """The side's utility function; ``with_reservation=False`` makes every outcome rational, which NegMAS's
    analytics need to see the whole outcome space (they otherwise keep only outcomes above reservation)."""
    from negmas.preferences import LinearAdditiveUtilityFunction, TableFun

    prefs = scenario.preferences(side)
    return LinearAdditiveUtilityFunction(
        values=[TableFun(dict(prefs.values[i.name])) for i in scenario.issues],
        weights=[prefs.weights[i.name] for i in scenario.issues],
        outcome_space=space if space is not None else outcome_space(scenario),
        reserved_value=prefs.reservation if with_reservation else float("-inf"),
    )


def to_negmas_outcome(scenario: Scenario, outcome: Outcome) -> tuple[str, ...]:
    return tuple(issue.options[o] for issue, o in zip(scenario.issues, outcome))


def from_negmas_outcome(scenario: Scenario, outcome: tuple[Any, ...]) -> Outcome:
    if len(outcome) != len(scenario.issues):
        raise ValueError(f"NegMAS outcome {outcome!r} does not assign all {len(scenario.issues)} issues")
    return tuple(issue.options.index(v) for issue, v in zip(scenario.issues, outcome))
