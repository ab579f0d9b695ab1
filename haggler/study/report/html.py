"""report.html: one self-contained page rendered from templates/report.html.j2.

Tables, plots inlined as data URIs, every transcript behind arm/buyer/scenario filters; the page's style
and script are files next to the template, inlined into the page. ``report.html#t12`` opens transcript 12.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from haggler.evaluation.figures import fmt
from haggler.evaluation.results import Record
from haggler.study.report.behaviour_table import BEHAVIOUR_HEADER, BEHAVIOUR_NOTE, behaviour_rows
from haggler.study.report.assemble import COST_HEADER, HEADLINE, HEADLINE_NOTE, POOLED, cost_rows, headline_rows
from haggler.study.report.security_table import SECURITY_HEADER, SECURITY_NOTE, security_rows

SETTINGS_CHARS = 50_000  # the settings block is cut here


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("haggler.study.report", "templates"), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined)


def _cells(rows: list[list[Any]]) -> list[list[str]]:
    return [[fmt(c) for c in r] for r in rows]


def _buyer_sections(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": buyer, "family": summary["buyer_families"].get(buyer),
             "rows": _cells(headline_rows({POOLED: summary["per_buyer"][buyer]})),
             "verdicts": [c["verdict"] for c in summary["comparisons"] if c["buyer"] == buyer]}
            for buyer in summary["buyers"]]


def _plots(summary: dict[str, Any], out: Path) -> list[dict[str, str]]:
    return [{"name": name, "title": name.replace("_", " "),
             "data": base64.b64encode((out / rel).read_bytes()).decode()}
            for name, rel in summary["plots"].items()]


def _outcome(r: Record) -> str:
    if r.ended_by == "error":
        return "error: " + (r.error or "")
    return f"{'deal' if r.deal else 'no deal'} ({r.ended_by}), seller score {fmt(r.seller_score)}"


def _transcripts(records: list[Record], arm_of: dict[str, str]) -> list[dict[str, Any]]:
    """Every negotiation, by arm, buyer and scenario; its id (t0, t1, ...) is its place in that order."""
    ordered = sorted(records, key=lambda r: (arm_of.get(r.seller, r.seller), r.buyer, r.scenario_id))
    return [{"id": f"t{i}", "arm": arm_of.get(r.seller, r.seller), "buyer": r.buyer, "scenario": r.scenario_id,
             "opener": r.opener, "outcome": _outcome(r),
             "turns": [{"speaker": t["speaker"], "text": t.get("text") or "", "action": json.dumps(t.get("action"))}
                       for t in r.transcript or []]}
            for i, r in enumerate(ordered)]


def page_context(summary: dict[str, Any], records: list[Record], out: Path) -> dict[str, Any]:
    """What the template shows, as plain values (text, not markup: the template escapes all of it)."""
    arm_of = {spec: n for n, a in summary["arms"].items() for spec in a["specs"]}
    filters = {"arm": sorted({arm_of.get(r.seller, r.seller) for r in records}),
               "buyer": summary["buyers"] + summary.get("adversarial_buyers", []),
               "scenario": sorted({r.scenario_id for r in records})}
    return {"headline_header": HEADLINE, "headline_note": HEADLINE_NOTE,
            "validation_verdicts": [v["verdict"] for v in summary.get("validation", [])],
            "selection_lines": summary.get("selection_lines", []), "put_forward": summary.get("put_forward", []), "headline": _cells(headline_rows(summary["per_buyer"])),
            "pooled_verdicts": [c["verdict"] for c in summary["comparisons"] if c["buyer"] == POOLED],
            "notes": summary.get("notes", []),
            "buyers": _buyer_sections(summary), "plots": _plots(summary, out), "filters": filters,
            "cost_header": COST_HEADER, "costs": _cells(cost_rows(summary["per_buyer"])),
            "behaviour_header": BEHAVIOUR_HEADER, "behaviour": _cells(behaviour_rows(summary["per_buyer"], POOLED)),
            "behaviour_note": BEHAVIOUR_NOTE,
            "security_header": SECURITY_HEADER, "security": _cells(security_rows(summary.get("security") or {})),
            "security_note": SECURITY_NOTE,
            "transcripts": _transcripts(records, arm_of),
            "settings": json.dumps(summary["settings"], indent=2, default=str)[:SETTINGS_CHARS]}


def render_html(summary: dict[str, Any], records: list[Record], out: Path) -> str:
    """One self-contained page: tables, plots inlined as data URIs, and every transcript behind filters."""
    return _environment().get_template("report.html.j2").render(page_context(summary, records, out))
