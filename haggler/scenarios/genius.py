"""Import bilateral domains from the Genius negotiation platform (XML) as haggler scenarios.

Utilities follow Genius's own definitions: an option's value is its evaluation divided by the
largest evaluation of its issue (``EvaluatorDiscrete.normalize``), issue weights are normalised
to sum to 1, and the reservation value is the utility of no deal (0 when the file gives none,
as in Genius). Discount factors are recorded, not applied: haggler's utilities are undiscounted.
Only discrete issues are supported; a real- or integer-valued issue is refused by name.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from haggler.core.scenario import Issue, Preferences, Scenario, ScenarioError

DISCRETE = {"discrete", ""}


class GeniusImportError(ScenarioError):
    """A Genius file that cannot be imported faithfully; the message names the file and the element."""


def _parse(path: Path) -> ET.Element:
    if not path.exists():
        raise GeniusImportError(f"{path}: no such file")
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as err:
        raise GeniusImportError(f"{path}: not well-formed XML ({err})") from None


def _utility_space(root: ET.Element, path: Path) -> ET.Element:
    space = root if root.tag == "utility_space" else root.find(".//utility_space")
    if space is None:
        raise GeniusImportError(f"{path}: no <utility_space> element")
    return space


def _issue_kind(el: ET.Element) -> str:
    # Genius writes the kind in any of three attributes; "real", "integer" or "price" in any of them
    # means a non-discrete issue that a discrete-only importer must not read as discrete.
    kinds = {el.get(a, "").strip().lower() for a in ("type", "vtype", "etype")}
    non_discrete = kinds - DISCRETE
    return sorted(non_discrete)[0] if non_discrete else "discrete"


def _float_attr(el: ET.Element, attr: str, path: Path, what: str) -> float:
    raw = el.get(attr)
    if raw is None:
        raise GeniusImportError(f"{path}: {what} has no {attr!r} attribute")
    try:
        value = float(raw)
    except ValueError:
        raise GeniusImportError(f"{path}: {what} has {attr}={raw!r}, which is not a number") from None
    if not math.isfinite(value):
        raise GeniusImportError(f"{path}: {what} has {attr}={raw!r}, which is not finite")
    return value


def read_domain(path: str | Path) -> tuple[str, list[Issue]]:
    """The domain's objective name and its discrete issues, in file order."""
    path = Path(path)
    space = _utility_space(_parse(path), path)
    objective = space.find(".//objective")
    name = objective.get("name", "") if objective is not None else ""
    if name.lower() in ("", "root"):  # many Genius files call the objective "root": the file says more
        name = path.stem.removesuffix("_domain")
    issues: list[Issue] = []
    for el in space.iter("issue"):
        issue_name = el.get("name")
        if not issue_name:
            raise GeniusImportError(f"{path}: an <issue> (index {el.get('index')}) has no name")
        kind = _issue_kind(el)
        if kind != "discrete":
            raise GeniusImportError(
                f"{path}: issue {issue_name!r} is {kind}-valued; haggler imports discrete issues only"
                " (discretize it into named options in the domain file first)"
            )
        options = [item.get("value") for item in el.findall("item")]
        if not options or any(o is None or o == "" for o in options):
            raise GeniusImportError(f"{path}: issue {issue_name!r} has no options or an option without a value")
        try:
            issues.append(Issue(name=issue_name, options=tuple(options)))  # type: ignore[arg-type]
        except ValueError as err:
            raise GeniusImportError(f"{path}: issue {issue_name!r}: {err}") from None
    if not issues:
        raise GeniusImportError(f"{path}: no <issue> elements found")
    return name, issues


def _discount_factor(space: ET.Element, path: Path) -> float | None:
    el = space.find(".//discount_factor")
    if el is None:
        return None
    if el.get("value") is not None:
        return _float_attr(el, "value", path, "<discount_factor>")
    child = el.find("value")
    text = (child.text if child is not None else el.text) or ""
    try:
        return float(text.strip())
    except ValueError:
        raise GeniusImportError(f"{path}: <discount_factor> holds {text.strip()!r}, not a number") from None


def read_profile(path: str | Path, issues: list[Issue]) -> tuple[Preferences, dict[str, Any]]:
    """One side's preferences over the domain's issues, plus what the file said that we do not use."""
    path = Path(path)
    space = _utility_space(_parse(path), path)
    by_name = {el.get("name"): el for el in space.iter("issue")}
    weights_by_index = {w.get("index"): w for w in space.iter("weight")}

    raw_weights: dict[str, float] = {}
    values: dict[str, dict[str, float]] = {}
    for issue in issues:
        el = by_name.get(issue.name)
        if el is None:
            raise GeniusImportError(f"{path}: the profile does not evaluate issue {issue.name!r} of the domain")
        kind = _issue_kind(el)
        if kind != "discrete":
            raise GeniusImportError(f"{path}: issue {issue.name!r} is {kind}-valued; haggler imports discrete issues only")
        w = weights_by_index.get(el.get("index"))
        if w is None:
            raise GeniusImportError(f"{path}: no <weight> with index {el.get('index')!r} for issue {issue.name!r}")
        raw_weights[issue.name] = _float_attr(w, "value", path, f"the weight of issue {issue.name!r}")
        if raw_weights[issue.name] < 0:
            raise GeniusImportError(f"{path}: the weight of issue {issue.name!r} is negative")

        evaluations: dict[str, float] = {}
        for item in el.findall("item"):
            option = item.get("value")
            what = f"option {option!r} of issue {issue.name!r}"
            evaluations[option] = _float_attr(item, "evaluation", path, what)  # type: ignore[index]
            if evaluations[option] < 0:  # type: ignore[index]
                raise GeniusImportError(f"{path}: {what} has a negative evaluation")
        missing = [o for o in issue.options if o not in evaluations]
        unknown = [o for o in evaluations if o not in issue.options]
        if missing or unknown:
            raise GeniusImportError(
                f"{path}: issue {issue.name!r} options differ from the domain's (missing {missing}, unknown {unknown})"
            )
        top = max(evaluations.values())
        values[issue.name] = {o: (evaluations[o] / top if top > 0 else 0.0) for o in issue.options}

    total = sum(raw_weights.values())
    if total <= 0:
        raise GeniusImportError(f"{path}: issue weights sum to {total}, cannot normalise")
    weights = {k: v / total for k, v in raw_weights.items()}

    res_el = space.find(".//reservation")
    reservation = 0.0 if res_el is None else _float_attr(res_el, "value", path, "<reservation>")
    if not 0.0 <= reservation <= 1.0:
        raise GeniusImportError(f"{path}: reservation value {reservation} is outside [0, 1]")
    meta = {
        "file": path.name,
        "reservation_given": res_el is not None,
        "discount_factor": _discount_factor(space, path),
        "raw_weight_sum": total,
    }
    try:
        return Preferences(weights=weights, values=values, reservation=reservation), meta
    except ValueError as err:
        raise GeniusImportError(f"{path}: {err}") from None


def import_genius(
    domain: str | Path,
    seller: str | Path,
    buyer: str | Path,
    *,
    scenario_id: str | None = None,
    context: str | None = None,
    max_turns: int = 20,
) -> Scenario:
    domain, seller, buyer = Path(domain), Path(seller), Path(buyer)
    name, issues = read_domain(domain)
    seller_prefs, seller_meta = read_profile(seller, issues)
    buyer_prefs, buyer_meta = read_profile(buyer, issues)
    return Scenario(
        id=scenario_id or f"genius-{name}-{seller.stem}-{buyer.stem}",
        context=context or f"a deal in the {name} domain",
        issues=tuple(issues),
        seller=seller_prefs,
        buyer=buyer_prefs,
        max_turns=max_turns,
        source={
            "kind": "genius",
            "domain": domain.name,
            "objective": name,
            "seller": seller_meta,
            "buyer": buyer_meta,
            "note": "utilities are undiscounted; discount factors are recorded only",
        },
    )
