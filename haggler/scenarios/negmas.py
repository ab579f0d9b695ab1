"""haggler scenarios as NegMAS objects: the outcome space and each side's utility function.

Built from haggler's parsed scenario (never from NegMAS's own Genius loader, which mis-reads some
Genius files), so NegMAS and haggler evaluate exactly the same preferences.

Each issue is categorical and its NegMAS values are haggler's option indices (0, 1, ...), not the option
names. Why: NegMAS keeps outcomes in sets and dicts and breaks ties among equally good outcomes in their
iteration order; with string values that order follows Python's per-process string hashing, so the same
negotiation between the same NegMAS agents ends differently from one process to the next (measured on
NegMAS 0.16: 11 of 13 common classes, all but CAB and WAR, changed their games when only PYTHONHASHSEED
changed). Integers hash the same in every process, so games built from these objects replay exactly.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

from haggler.core.scenario import Scenario
from haggler.core.types import Outcome, Side


def outcome_space(scenario: Scenario) -> Any:
    from negmas import make_os
    from negmas.outcomes import CategoricalIssue

    return make_os([CategoricalIssue(list(range(len(i.options))), name=i.name) for i in scenario.issues])


def ufun(scenario: Scenario, side: Side, space: Any | None = None, with_reservation: bool = True) -> Any:
    """The side's utility function; ``with_reservation=False`` makes every outcome rational, which NegMAS's
    analytics need to see the whole outcome space (they otherwise keep only outcomes above reservation)."""
    from negmas.preferences import LinearAdditiveUtilityFunction, TableFun

    prefs = scenario.preferences(side)
    return LinearAdditiveUtilityFunction(
        values=[TableFun({k: prefs.values[i.name][o] for k, o in enumerate(i.options)}) for i in scenario.issues],
        weights=[prefs.weights[i.name] for i in scenario.issues],
        outcome_space=space if space is not None else outcome_space(scenario),
        reserved_value=prefs.reservation if with_reservation else float("-inf"),
    )


def to_negmas_outcome(scenario: Scenario, outcome: Outcome) -> tuple[int, ...]:
    if len(outcome) != len(scenario.issues):
        raise ValueError(f"outcome {outcome!r} does not assign all {len(scenario.issues)} issues")
    return tuple(int(o) for o in outcome)


def from_negmas_outcome(scenario: Scenario, outcome: tuple[Any, ...]) -> Outcome:
    """haggler's outcome for a NegMAS one; anything outside the scenario's options is refused."""
    if len(outcome) != len(scenario.issues):
        raise ValueError(f"NegMAS outcome {outcome!r} does not assign all {len(scenario.issues)} issues")
    for issue, v in zip(scenario.issues, outcome):
        if not (isinstance(v, Integral) and 0 <= v < len(issue.options)):  # numpy ints too
            raise ValueError(f"NegMAS outcome {outcome!r}: {v!r} is not an option of issue {issue.name!r}")
    return tuple(int(v) for v in outcome)
