"""Scenarios: discrete issues, each side's private linear additive preferences, a turn limit.

Stored as JSON lines, one scenario per line. Loading validates every field and names the file,
the line, the scenario and the field of anything broken, so a bad file never half-loads.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from haggler.core.config import Strict, error_items
from haggler.core.jsonl import write_lines_atomically
from haggler.core.types import Outcome, Side

WEIGHT_TOLERANCE = 1e-6


class ScenarioError(ValueError):
    """A scenario file or a scenario in it is malformed; the message says where and what."""


class Issue(Strict):
    name: str = Field(min_length=1)
    options: tuple[str, ...] = Field(min_length=1)

    @field_validator("options")
    @classmethod
    def _options_unique(cls, options: tuple[str, ...]) -> tuple[str, ...]:
        if any(not o for o in options):
            raise ValueError("option names must be non-empty")
        if len(set(options)) != len(options):
            raise ValueError(f"option names must be unique, got {list(options)}")
        return options


class Preferences(Strict):
    """One side's private linear additive utility: u(o) = sum_i weights[i] * values[i][o_i]."""

    weights: dict[str, float]
    values: dict[str, dict[str, float]]
    reservation: float = Field(ge=0.0, le=1.0)

    @field_validator("weights")
    @classmethod
    def _weights_valid(cls, weights: dict[str, float]) -> dict[str, float]:
        for name, w in weights.items():
            if not (math.isfinite(w) and w >= 0):
                raise ValueError(f"weight of issue {name!r} must be a finite number >= 0, got {w}")
        total = sum(weights.values())
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"weights must sum to 1, they sum to {total:.9g}")
        return weights

    @field_validator("values")
    @classmethod
    def _values_in_unit_interval(cls, values: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for issue, table in values.items():
            for option, v in table.items():
                if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                    raise ValueError(f"value of option {option!r} of issue {issue!r} must be in [0, 1], got {v}")
        return values


class Scenario(Strict):
    id: str = Field(min_length=1)
    context: str = Field(min_length=1, description="the product in plain words, e.g. 'a used 2019 hatchback'")
    issues: tuple[Issue, ...] = Field(min_length=1)
    seller: Preferences
    buyer: Preferences
    max_turns: int = Field(ge=2, description="turns allowed in total, both sides counted; at the limit, no deal")
    source: dict[str, Any] = Field(default_factory=dict, description="provenance, e.g. the Genius files imported")

    @model_validator(mode="after")
    def _preferences_match_issues(self) -> Scenario:
        names = [i.name for i in self.issues]
        if len(set(names)) != len(names):
            raise ValueError(f"issue names must be unique, got {names}")
        for side in ("seller", "buyer"):
            prefs: Preferences = getattr(self, side)
            if set(prefs.weights) != set(names):
                raise ValueError(f"{side}.weights must name exactly the issues {names}, got {sorted(prefs.weights)}")
            if set(prefs.values) != set(names):
                raise ValueError(f"{side}.values must name exactly the issues {names}, got {sorted(prefs.values)}")
            for issue in self.issues:
                given = set(prefs.values[issue.name])
                if given != set(issue.options):
                    missing = sorted(set(issue.options) - given)
                    extra = sorted(given - set(issue.options))
                    raise ValueError(
                        f"{side}.values[{issue.name!r}] must value every option exactly once"
                        f" (missing {missing}, unknown {extra})"
                    )
        return self

    # ---- derived, cached: the hot paths index these instead of walking dicts ----

    def preferences(self, side: Side) -> Preferences:
        return self.seller if side == "seller" else self.buyer

    def reservation(self, side: Side) -> float:
        return self.preferences(side).reservation

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(i.options) for i in self.issues)

    @cached_property
    def n_outcomes(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def _weighted_tables(self) -> dict[Side, tuple[tuple[float, ...], ...]]:
        """Per side, per issue, per option: weight * value, so u(o) is one sum of lookups."""
        out: dict[Side, tuple[tuple[float, ...], ...]] = {}
        for side in ("seller", "buyer"):
            p = self.preferences(side)
            out[side] = tuple(
                tuple(p.weights[i.name] * p.values[i.name][o] for o in i.options) for i in self.issues
            )
        return out

    def weighted_table(self, side: Side) -> tuple[tuple[float, ...], ...]:
        return self._weighted_tables[side]

    def utility(self, side: Side, outcome: Outcome) -> float:
        table = self._weighted_tables[side]
        return sum(table[i][o] for i, o in enumerate(outcome))

    def outcome_at(self, index: int) -> Outcome:
        # Pure Python: called on every scripted offer, where numpy's per-call overhead dominates.
        out = []
        for n in reversed(self.shape):
            index, o = divmod(index, n)
            out.append(o)
        return tuple(reversed(out))

    def index_of(self, outcome: Outcome) -> int:
        index = 0
        for o, n in zip(outcome, self.shape):
            index = index * n + o
        return index

    # ---- names at the edges ----

    def names_of(self, outcome: Outcome) -> dict[str, str]:
        return {issue.name: issue.options[o] for issue, o in zip(self.issues, outcome)}

    def outcome_from_names(self, assignment: dict[str, str]) -> Outcome:
        """Exact-name lookup; raises KeyError naming what is missing or unknown."""
        out = []
        for issue in self.issues:
            if issue.name not in assignment:
                raise KeyError(f"no option given for issue {issue.name!r}")
            try:
                out.append(issue.options.index(assignment[issue.name]))
            except ValueError:
                raise KeyError(f"{assignment[issue.name]!r} is not an option of issue {issue.name!r}") from None
        extra = set(assignment) - {i.name for i in self.issues}
        if extra:
            raise KeyError(f"unknown issues {sorted(extra)}")
        return tuple(out)


def fingerprint(scenario: Scenario) -> str:
    """The same issues and preferences give the same fingerprint, whatever the id, wording or turn limit:
    what training compares against evaluation scenarios to keep the two apart."""
    body = scenario.model_dump(mode="json", include={"issues", "seller", "buyer"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def parse_scenario(data: Any, where: str) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: a scenario must be a JSON object, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        sid = data.get("id", "<no id>")
        fields = "; ".join(f"field {key or '(scenario)'}: {msg}" for key, msg in error_items(err))
        raise ScenarioError(f"{where}: scenario {sid!r}: {fields}") from None


def iter_scenarios(path: str | Path) -> Iterator[Scenario]:
    path = Path(path)
    if not path.exists():
        raise ScenarioError(f"{path}: no such scenario file")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise ScenarioError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
            yield parse_scenario(data, f"{path}:{lineno}")


def load_scenarios(path: str | Path) -> dict[str, Scenario]:
    """All scenarios of a JSONL file by id; duplicate ids are an error (cells refer to scenarios by id)."""
    out: dict[str, Scenario] = {}
    for s in iter_scenarios(path):
        if s.id in out:
            raise ScenarioError(f"{path}: scenario id {s.id!r} appears more than once")
        out[s.id] = s
    if not out:
        raise ScenarioError(f"{path}: holds no scenarios")
    return out


def dump_scenario(scenario: Scenario) -> str:
    return json.dumps(scenario.model_dump(mode="json"), sort_keys=False, ensure_ascii=False, separators=(",", ":"))


def write_scenarios(scenarios: Iterable[Scenario], path: str | Path) -> None:
    write_lines_atomically(path, (dump_scenario(s) for s in scenarios))
