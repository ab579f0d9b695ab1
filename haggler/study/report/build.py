"""build_report: from results files to a report a paper can use, in one folder.

Writes ``summary.json``, ``report.md``, a self-contained ``report.html`` (plots inlined, every transcript
browsable by arm, buyer and scenario, no network), ``plots/*.png`` and ``tables/*.csv``. The numbers come
from ``assemble`` (results only), the pictures from ``plots``, the pages from ``markdown`` and ``html``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from haggler.evaluation.results import load_results
from haggler.study.config import plan_arms, study_dir
from haggler.study.selection import select_arms, selection_lines
from haggler.study.report.assemble import (ARM_COLUMNS, sampling_notes, all_comparisons, arm_rows, arm_table, by_arm,
                                           comparison_rows, per_buyer_figures, put_forward, run_settings,
                                           validation_verdicts)
from haggler.study.report.html import render_html
from haggler.study.report.markdown import render_markdown
from haggler.study.report.plots import make_plots
from haggler.study.report.security_table import (SECURITY_COLUMNS, security_by_buyer, security_csv_rows,
                                                 split_adversarial)


def build_report(results: list[str | Path], out_dir: str | Path, study: Any = None, arms: list[Any] | None = None,
                 study_path: str | None = None, n_boot: int | None = None,
                 margin: float | None = None) -> dict[str, Any]:
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    records = load_results(results)
    n_boot = n_boot or (study.bootstrap if study is not None else 4000)
    margin = margin or (study.margin if study is not None else 0.02)
    if study is not None and arms is None:
        arms = plan_arms(study)[0]
    table = arm_table(records, arms)
    scored, adversarial = split_adversarial(records)  # adversarial buyers get the security table instead
    records_by_arm = by_arm(scored, table)
    buyers = sorted({r.buyer for r in scored})
    per_buyer = per_buyer_figures(records_by_arm, table, buyers, n_boot)
    comparisons = all_comparisons(records_by_arm, table, buyers, arms is not None, margin, n_boot)
    plots = make_plots(comparisons, per_buyer, table, out)

    _write_csv(out / "tables" / "arms.csv", ARM_COLUMNS, arm_rows(per_buyer))
    security = security_by_buyer(by_arm(adversarial, table), {n: a.specs for n, a in table.items()}, n_boot)
    if security:
        _write_csv(out / "tables" / "security.csv", SECURITY_COLUMNS, security_csv_rows(security))
    cmp_rows = comparison_rows(comparisons)
    _write_csv(out / "tables" / "comparisons.csv", list(cmp_rows[0]) if cmp_rows else ["verdict"], cmp_rows)

    selection = study_selection(study, arms, n_boot)
    summary = {"arms": {n: a.to_json() for n, a in table.items()},
               "per_buyer": per_buyer, "comparisons": comparisons, "margin": margin,
               "settings": run_settings(records, study, study_path), "plots": plots, "buyers": buyers,
               "validation": validation_verdicts(table),
               "selection": selection, "selection_lines": selection_lines(selection) if selection else [],
               "put_forward": put_forward(selection, per_buyer, comparisons), "security": security, "adversarial_buyers": sorted(security), "notes": sampling_notes(records),
               "buyer_families": {b.spec: b.family for b in study.buyers} if study is not None else {}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(summary))
    (out / "report.html").write_text(render_html(summary, records, out))
    return summary


def study_selection(study: Any, arms: list[Any] | None, n_boot: int) -> dict[str, Any] | None:
    """The study's selection as written before its evaluation (``OUT/selection.json``); else decided now from
    the arms' validation logs (a report of a study run before selection was recorded); None without RL arms."""
    if study is not None:
        written = study_dir(study) / "selection.json"
        if written.is_file():
            return json.loads(written.read_text())
    if not arms or not any(a.kind == "rl" for a in arms):
        return None
    return select_arms(arms, n_boot)


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in columns})
