"""report.md: the headline table, what the numbers show, per-buyer tables, seed spread, plots, settings."""

from __future__ import annotations

import json
from typing import Any

from haggler.evaluation.figures import fmt
from haggler.study.report.assemble import COST_HEADER, HEADLINE, HEADLINE_NOTE, POOLED, cost_rows, headline_rows
from haggler.study.report.behaviour_table import BEHAVIOUR_HEADER, BEHAVIOUR_NOTE, behaviour_rows
from haggler.study.report.security_table import SECURITY_HEADER, SECURITY_NOTE, security_rows


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _bullets(lines: list[str]) -> list[str]:
    """Lines as a list; a line indented by two spaces is nested under the one before."""
    return [f"  - {x.strip()}" if x.startswith("  ") else f"- {x.strip()}" for x in lines]


def render_markdown(summary: dict[str, Any]) -> str:
    lines = ["# haggler report", ""]
    lines += ["## Headline (pooled over evaluation buyers)", "",
              _md_table(HEADLINE, headline_rows(summary["per_buyer"])), "", HEADLINE_NOTE, ""]
    pooled = [c for c in summary["comparisons"] if c["buyer"] == POOLED]
    if pooled:
        lines += ["## What the numbers show", ""]
        lines += [f"- {c['verdict']}" for c in pooled]
        lines.append("")
    if summary.get("selection_lines"):
        lines += ["## Which RL arm the study puts forward (decided on validation, before the evaluation grid)", ""]
        lines += _bullets(summary["selection_lines"])
        lines += ["", "What the evaluation grid then says of it:", ""]
        lines += _bullets(summary["put_forward"])
        lines.append("")
    if summary.get("validation"):
        lines += ["## How each RL arm's model was kept (validation, never the evaluation grid)", ""]
        lines += [f"- {v['verdict']}" for v in summary["validation"]]
        lines.append("")
    lines += [*summary.get("notes", []), ""] if summary.get("notes") else []
    for buyer in summary["buyers"]:
        fam = summary["buyer_families"].get(buyer)
        lines += [f"## Buyer {buyer}" + (f" (family: {fam})" if fam else ""), "",
                  _md_table(HEADLINE, headline_rows({POOLED: summary["per_buyer"][buyer]})), ""]
        lines += [f"- {c['verdict']}" for c in summary["comparisons"] if c["buyer"] == buyer]
        lines.append("")
    seeds = {a: f for a, f in summary["per_buyer"].get(POOLED, {}).items() if "seed_sd" in f}
    if seeds:
        lines += ["## Training-seed spread", ""]
        lines += [f"- {a}: per-seed means " + ", ".join(f"seed {k} {v:.3f}" for k, v in f["seed_means"].items())
                  + f"; sd between seeds {f['seed_sd']:.3f}, against a 95% evaluation half-width of "
                  f"{f['evaluation_halfwidth']:.3f} for one seed" for a, f in seeds.items()]
        lines.append("")
    behaviour = behaviour_rows(summary["per_buyer"], POOLED)
    if behaviour:
        lines += ["## Seller behaviour", "", _md_table(BEHAVIOUR_HEADER, behaviour), "", BEHAVIOUR_NOTE, ""]
    if summary.get("security"):
        lines += ["## Security (adversarial buyers)", "", _md_table(SECURITY_HEADER, security_rows(summary["security"])),
                  "", SECURITY_NOTE, ""]
    costs = cost_rows(summary["per_buyer"])
    if costs:
        lines += ["## API calls, tokens and cost", "", _md_table(COST_HEADER, costs), "",
                  "Both sides' calls, errored cells included; prices per million tokens from the endpoints file.", ""]
    if summary["plots"]:
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in summary["plots"].items()] + [""]
    lines += ["## Settings", "", "```json", json.dumps(summary["settings"], indent=2, default=str)[:20000], "```", ""]
    lines += ["Errored cells are excluded from every score and counted in `cells completed`.", ""]
    return "\n".join(lines)
