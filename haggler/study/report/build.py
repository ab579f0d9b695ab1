"""From results files to a report a paper can use: per-arm figures, paired comparisons, plots, tables.

Given only results files, every pair of sellers is compared on the cells both completed. Given the study
config (and its arms), each arm's base, size, learning rate and seed are known: RL arms are compared with
their base, learning rates with each other at one size, and every arm with every reference seller, each
family Holm-corrected; intervals of multi-seed arms include training-seed variation. Everything is also
broken down per evaluation buyer. Errored cells are excluded from every score and counted.

Writes ``summary.json``, ``report.md``, a self-contained ``report.html`` (plots inlined, every transcript
browsable by arm, buyer and scenario, no network), ``plots/*.png`` and ``tables/*.csv``.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haggler.evaluation.results import latest, read_records
from haggler.study.stats import cluster_bootstrap, holm, paired

POOLED = "all buyers"


@dataclass
class ArmInfo:
    name: str
    kind: str = "seller"  # base | rl | reference | seller (results only)
    base: str | None = None
    size: float | None = None
    size_label: str | None = None
    learning_rate: float | None = None
    max_steps: int | None = None
    train_dirs: list[str] = field(default_factory=list)
    specs: dict[str, int | None] = field(default_factory=dict)  # seller spec -> training seed


def load_results(paths: list[str | Path]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for p in paths:
        if not Path(p).exists():
            raise ValueError(f"{p}: no such results file")
        records.extend(latest(read_records(p)).values())
    if not records:
        raise ValueError("the results files hold no records")
    return records


def arm_table(records: list[dict[str, Any]], arms: list[Any] | None) -> dict[str, ArmInfo]:
    """Seller specs grouped into arms: from the study's arms, else one arm per seller spec."""
    table: dict[str, ArmInfo] = {}
    if arms:
        for a in arms:
            info = table.setdefault(a.name, ArmInfo(a.name, a.kind, a.base, a.size, a.size_label, a.learning_rate,
                                                    a.max_steps))
            info.specs[a.spec] = a.seed
            if a.train_dir:
                info.train_dirs.append(a.train_dir)
    known = {s for a in table.values() for s in a.specs}
    for r in records:
        if r["seller"] not in known:
            table.setdefault(r["seller"], ArmInfo(r["seller"])).specs[r["seller"]] = None
            known.add(r["seller"])
    return table


def _seller_turns(r: dict[str, Any]) -> int:
    return sum(1 for t in r.get("transcript") or [] if t.get("speaker") == "seller")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def arm_figures(records: list[dict[str, Any]], seeds: dict[str, int | None], n_boot: int) -> dict[str, Any]:
    done = [r for r in records if r["ended_by"] != "error"]
    errored = len(records) - len(done)
    out: dict[str, Any] = {"cells": len(records), "completed": len(done), "errored": errored,
                           "errored_share": errored / len(records) if records else None}
    if not done:
        return out
    scores = [r["seller_score"] for r in done]
    multi = len({seeds.get(r["seller"]) for r in done}) > 1
    ci = cluster_bootstrap(scores, [r["scenario_id"] for r in done],
                           [seeds.get(r["seller"]) for r in done] if multi else None, n_boot=n_boot)
    deals = [r for r in done if r["deal"]]
    turns = sum(_seller_turns(r) for r in done)
    invalid = sum((r.get("invalid_actions") or {}).get("seller", 0) for r in done)
    out.update({
        "seller_score": ci.to_json(),
        "deal_rate": len(deals) / len(done),
        "seller_utility_given_deal": _mean([r["seller_utility"] for r in deals]),
        "buyer_utility": _mean([r["buyer_utility"] for r in done]),
        "pareto_optimal_rate": len([r for r in done if r["pareto_optimal"]]) / len(done),
        "nash_distance": _mean([r["nash_distance"] for r in done if r["nash_distance"] is not None]),
        "invalid_action_rate": invalid / turns if turns else None,
        "irrational_deal_rate": len([r for r in deals if r["individually_irrational"]]) / len(done),
        "seeds": len({seeds.get(r["seller"]) for r in done}),
    })
    if multi:
        per_seed = defaultdict(list)
        for r in done:
            per_seed[seeds.get(r["seller"])].append(r["seller_score"])
        means = {str(k): sum(v) / len(v) for k, v in per_seed.items()}
        vals = list(means.values())
        sd = math.sqrt(sum((v - sum(vals) / len(vals)) ** 2 for v in vals) / (len(vals) - 1))
        out["seed_means"], out["seed_sd"] = means, sd
    return out


def _cells(records: list[dict[str, Any]], seeds: dict[str, int | None], multi: bool) -> tuple[dict, dict | None]:
    """Completed cells as key -> (score, scenario); keyed by (seed, cell) for a multi-seed arm."""
    cells, seed_of = {}, {}
    for r in records:
        if r["ended_by"] == "error":
            continue
        if multi:
            key = (seeds.get(r["seller"]), r["cell_id"])
            cells[key] = (r["seller_score"], r["scenario_id"])
            seed_of[key] = seeds.get(r["seller"])
        else:
            cells[r["cell_id"]] = (r["seller_score"], r["scenario_id"])
    return cells, (seed_of if multi else None)


def comparison_pairs(table: dict[str, ArmInfo], with_study: bool) -> list[tuple[str, str, str]]:
    """(family, a, b): a is compared with b as a - b."""
    names = list(table)
    if not with_study:
        return [("pairs", a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    pairs = []
    rl = [a for a in table.values() if a.kind == "rl"]
    for a in rl:
        if a.base in table:
            pairs.append(("rl_vs_base", a.name, a.base))
    by_base = defaultdict(list)
    for a in rl:
        by_base[a.base].append(a)
    for group in by_base.values():
        group = sorted(group, key=lambda x: x.learning_rate or 0)
        for i, hi in enumerate(group):
            for lo in group[:i]:
                pairs.append(("learning_rates", hi.name, lo.name))
    refs = [a.name for a in table.values() if a.kind == "reference"]
    for a in table.values():
        if a.kind in ("base", "rl"):
            for ref in refs:
                pairs.append(("vs_reference", a.name, ref))
    return pairs


def compare(records_by_arm: dict[str, list[dict]], table: dict[str, ArmInfo], with_study: bool, margin: float,
            n_boot: int) -> list[dict[str, Any]]:
    rows = []
    for family, a, b in comparison_pairs(table, with_study):
        ra, rb = records_by_arm.get(a, []), records_by_arm.get(b, [])
        seeds_a = table[a].specs
        multi_a = len({s for s in seeds_a.values()}) > 1
        ca, seed_of = _cells(ra, seeds_a, multi_a)
        cb, _ = _cells(rb, table[b].specs, False)
        try:
            cmp = paired(a, ca, b, cb, margin=margin, n_boot=n_boot, a_seeds=seed_of)
        except ValueError as err:
            rows.append({"family": family, "a": a, "b": b, "error": str(err)})
            continue
        row = {"family": family, **cmp.to_json(), "a_kind": table[a].kind, "b_kind": table[b].kind}
        # cells either arm played but not both completed (errored or missing): excluded, and counted
        row["excluded_cells"] = len({r["cell_id"] for r in ra} | {r["cell_id"] for r in rb}) - cmp.common_cells
        rows.append(row)
    for family in {r["family"] for r in rows}:
        members = [r for r in rows if r["family"] == family and "error" not in r and not math.isnan(r["p_value"])]
        for r, p in zip(members, holm([r["p_value"] for r in members])):
            r["p_holm"] = p
    return rows


def verdict(row: dict[str, Any]) -> str:
    """What a comparison shows, in plain words."""
    if "error" in row:
        return f"not compared: {row['error']}"
    d = row["difference"]
    est, lo, hi = d["estimate"], d["low"], d["high"]
    p = row.get("p_holm") if row.get("p_holm") is not None else row["p_value"]
    words = f"{row['a']} - {row['b']} = {est:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}; Holm p = {p:.3g})"
    eq = row.get("equivalence")
    if (lo > 0 or hi < 0) and p < 0.05:
        words += ": a detectable difference"
    elif lo > 0 or hi < 0:
        words += ": the interval excludes zero, but the test does not hold after Holm's correction (not conclusive)"
    elif eq and eq["equivalent"]:
        words += f": the interval includes zero, and the two are equivalent within +/-{eq['margin']:g} (TOST)"
    else:
        words += ": the interval includes zero (no detectable difference)"
        if eq:
            words += f", and equivalence within +/-{eq['margin']:g} is not shown either"
    if d.get("n_seeds", 1) <= 1 and "rl" in (row.get("a_kind"), row.get("b_kind")):
        words += "; one training seed: the interval covers evaluation noise only"
    return words


# ---- plots ----

def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Any, ax: Any, path: Path, title: str, ylabel: str, legend_size: int = 8) -> bool:
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return True


def plot_gain_vs_size(comparisons: list[dict], table: dict[str, ArmInfo], path: Path) -> bool:
    rows = [c for c in comparisons if c["family"] == "rl_vs_base" and "error" not in c
            and table[c["a"]].size is not None and c.get("buyer") == POOLED]
    if not rows:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    by_rate = defaultdict(list)
    for c in rows:
        by_rate[table[c["a"]].learning_rate].append(c)
    for rate, cs in sorted(by_rate.items(), key=lambda kv: kv[0] or 0):
        cs = sorted(cs, key=lambda c: table[c["a"]].size)
        x = [table[c["a"]].size for c in cs]
        y = [c["difference"]["estimate"] for c in cs]
        err = [[c["difference"]["estimate"] - c["difference"]["low"] for c in cs],
               [c["difference"]["high"] - c["difference"]["estimate"] for c in cs]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, label=f"lr {rate:g}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("model size (billions of parameters)")
    return _finish(fig, ax, path, "Gain over base by size", "RL - base seller score (95% CI)", 10)


def plot_per_buyer(per_buyer: dict[str, dict[str, dict]], path: Path) -> bool:
    buyers = [b for b in per_buyer if b != POOLED]
    arms = list(per_buyer.get(POOLED, {}))
    if not buyers or not arms:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(arms) * len(buyers) / 2 + 3), 4))
    width = 0.8 / len(buyers)
    for j, buyer in enumerate(buyers):
        xs, ys, lo, hi = [], [], [], []
        for i, arm in enumerate(arms):
            s = per_buyer[buyer].get(arm, {}).get("seller_score")
            if not s:
                continue
            xs.append(i + j * width)
            ys.append(s["estimate"])
            lo.append(s["estimate"] - s["low"])
            hi.append(s["high"] - s["estimate"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=buyer)
    ax.set_xticks([i + width * (len(buyers) - 1) / 2 for i in range(len(arms))])
    ax.set_xticklabels(arms, rotation=20, ha="right", fontsize=8)
    return _finish(fig, ax, path, "Seller score per evaluation buyer", "mean seller score (95% CI)")


def training_curves(table: dict[str, ArmInfo]) -> dict[str, list[tuple[int, float]]]:
    curves = {}
    for arm in table.values():
        for d in arm.train_dirs:
            log = Path(d) / "train_log.jsonl"
            if log.is_file():
                pts = []
                for line in log.read_text().splitlines():
                    h = json.loads(line)
                    if "reward" in h and "step" in h:
                        pts.append((int(h["step"]), float(h["reward"])))
                if pts:
                    curves[f"{arm.name} ({Path(d).name})"] = pts
    return curves


def plot_training(curves: dict[str, list[tuple[int, float]]], path: Path) -> bool:
    if not curves:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in curves.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name)
    ax.set_xlabel("GRPO step")
    return _finish(fig, ax, path, "Training reward", "mean reward (seller score)", 7)


# ---- the report ----

ARM_COLUMNS = ["arm", "buyer", "completed", "errored", "seller_score", "ci_low", "ci_high", "deal_rate",
               "seller_utility_given_deal", "buyer_utility", "pareto_optimal_rate", "nash_distance",
               "invalid_action_rate", "irrational_deal_rate", "seeds"]


def _arm_rows(per_buyer: dict[str, dict[str, dict]]) -> list[dict[str, Any]]:
    rows = []
    for buyer, arms in per_buyer.items():
        for arm, f in arms.items():
            s = f.get("seller_score") or {}
            rows.append({"arm": arm, "buyer": buyer, "completed": f["completed"], "errored": f["errored"],
                         "seller_score": s.get("estimate"), "ci_low": s.get("low"), "ci_high": s.get("high"),
                         **{k: f.get(k) for k in ARM_COLUMNS[7:]}})
    return rows


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def headline_rows(per_buyer: dict[str, dict[str, dict]]) -> list[list[Any]]:
    rows = []
    for arm, f in per_buyer.get(POOLED, {}).items():
        s = f.get("seller_score") or {}
        rows.append([arm, s.get("estimate"), f"{_fmt(s.get('low'))} to {_fmt(s.get('high'))}" if s else "-",
                     f.get("deal_rate"), f.get("invalid_action_rate"), f.get("pareto_optimal_rate"),
                     f"{f['completed']}/{f['cells']}"])
    return rows


HEADLINE = ["arm", "seller score", "95% CI", "deal rate", "invalid actions", "Pareto-optimal", "cells completed"]


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
        from haggler.study.config import plan_arms

        arms = plan_arms(study)[0]
    table = arm_table(records, arms)
    arm_of = {spec: a.name for a in table.values() for spec in a.specs}
    by_arm: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_arm[arm_of[r["seller"]]].append(r)
    buyers = sorted({r["buyer"] for r in records})
    per_buyer: dict[str, dict[str, dict]] = {}
    for buyer in [POOLED, *buyers]:
        per_buyer[buyer] = {}
        for name in table:
            rs = [r for r in by_arm.get(name, []) if buyer == POOLED or r["buyer"] == buyer]
            if rs:
                per_buyer[buyer][name] = arm_figures(rs, table[name].specs, n_boot)
    comparisons = []
    for buyer in [POOLED, *buyers]:
        subset = {a: [r for r in rs if buyer == POOLED or r["buyer"] == buyer] for a, rs in by_arm.items()}
        for row in compare(subset, table, arms is not None, margin, n_boot):
            row["buyer"] = buyer
            row["verdict"] = verdict(row)
            comparisons.append(row)

    plots = {}
    if plot_gain_vs_size(comparisons, table, out / "plots" / "gain_vs_size.png"):
        plots["gain_vs_size"] = "plots/gain_vs_size.png"
    if plot_per_buyer(per_buyer, out / "plots" / "per_buyer.png"):
        plots["per_buyer"] = "plots/per_buyer.png"
    curves = training_curves(table)
    if plot_training(curves, out / "plots" / "training_reward.png"):
        plots["training_reward"] = "plots/training_reward.png"

    arm_rows = _arm_rows(per_buyer)
    _write_csv(out / "tables" / "arms.csv", ARM_COLUMNS, arm_rows)
    cmp_rows = [{"family": c["family"], "buyer": c["buyer"], "a": c["a"], "b": c["b"],
                 "difference": c.get("difference", {}).get("estimate"), "ci_low": c.get("difference", {}).get("low"),
                 "ci_high": c.get("difference", {}).get("high"), "p_value": c.get("p_value"),
                 "p_holm": c.get("p_holm"), "common_cells": c.get("common_cells"),
                 "excluded_cells": c.get("excluded_cells"),
                 "equivalent": (c.get("equivalence") or {}).get("equivalent"), "verdict": c["verdict"]}
                for c in comparisons]
    _write_csv(out / "tables" / "comparisons.csv", list(cmp_rows[0]) if cmp_rows else ["verdict"], cmp_rows)

    settings = _settings(records, study, study_path)
    summary = {"arms": {n: {"kind": a.kind, "base": a.base, "size": a.size, "size_label": a.size_label,
                            "learning_rate": a.learning_rate, "max_steps": a.max_steps, "specs": a.specs}
                        for n, a in table.items()},
               "per_buyer": per_buyer, "comparisons": comparisons, "margin": margin, "settings": settings,
               "plots": plots, "buyers": buyers,
               "buyer_families": {b.spec: b.family for b in study.buyers} if study is not None else {}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(summary))
    (out / "report.html").write_text(render_html(summary, records, out))
    return summary


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in columns})


def _settings(records: list[dict], study: Any, study_path: str | None) -> dict[str, Any]:
    """Every parameter that shaped the numbers: the study config, the run settings and agents as recorded."""
    out: dict[str, Any] = {}
    if study is not None:
        out["study"] = study.model_dump(mode="json")
        if study_path:
            out["study_file"] = study_path
        try:
            from haggler.study.config import plan_arms

            out["training"] = {tc: cfg.model_dump(mode="json") for tc, cfg in plan_arms(study)[1].items()}
        except Exception as err:  # noqa: BLE001 - the report still renders; say why this part is missing
            out["training_error"] = str(err)
    runs = {}
    for r in records:
        runs.setdefault(r["seller"], {"run": r.get("settings"), "agents": r.get("agents")})
    out["runs"] = runs
    return out


def render_markdown(summary: dict[str, Any]) -> str:
    lines = ["# haggler report", ""]
    lines += ["## Headline (pooled over evaluation buyers)", "",
              _md_table(HEADLINE, headline_rows(summary["per_buyer"])), ""]
    pooled = [c for c in summary["comparisons"] if c["buyer"] == POOLED]
    if pooled:
        lines += ["## What the numbers show", ""]
        lines += [f"- {c['verdict']}" for c in pooled]
        lines.append("")
    for buyer in summary["buyers"]:
        fam = summary["buyer_families"].get(buyer)
        lines += [f"## Buyer {buyer}" + (f" (family: {fam})" if fam else ""), "",
                  _md_table(HEADLINE, headline_rows({POOLED: summary["per_buyer"][buyer]})), ""]
        lines += [f"- {c['verdict']}" for c in summary["comparisons"] if c["buyer"] == buyer]
        lines.append("")
    seeds = {a: f for a, f in summary["per_buyer"].get(POOLED, {}).items() if "seed_sd" in f}
    if seeds:
        lines += ["## Training-seed spread", ""]
        lines += [f"- {a}: per-seed means {f['seed_means']}, sd {f['seed_sd']:.3f}" for a, f in seeds.items()]
        lines.append("")
    if summary["plots"]:
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in summary["plots"].items()] + [""]
    lines += ["## Settings", "", "```json", json.dumps(summary["settings"], indent=2, default=str)[:20000], "```", ""]
    lines += ["Errored cells are excluded from every score and counted in `cells completed`.", ""]
    return "\n".join(lines)


def render_html(summary: dict[str, Any], records: list[dict[str, Any]], out: Path) -> str:
    """One self-contained page: tables, plots inlined as data URIs, and every transcript behind filters."""
    e = html.escape

    def table(header: list[str], rows: list[list[Any]], ident: str = "") -> str:
        head = "".join(f"<th>{e(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{e(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
        return f'<table{f" id={ident!r}" if ident else ""}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    parts = ["<h1>haggler report</h1>", "<h2>Headline (pooled over evaluation buyers)</h2>",
             table(HEADLINE, headline_rows(summary["per_buyer"]), "headline")]
    pooled = [c for c in summary["comparisons"] if c["buyer"] == POOLED]
    if pooled:
        parts.append("<h2>What the numbers show</h2><ul>" + "".join(f"<li>{e(c['verdict'])}</li>" for c in pooled)
                     + "</ul>")
    for buyer in summary["buyers"]:
        fam = summary["buyer_families"].get(buyer)
        parts.append(f"<h2>Buyer {e(buyer)}{f' (family: {e(fam)})' if fam else ''}</h2>")
        parts.append(table(HEADLINE, headline_rows({POOLED: summary["per_buyer"][buyer]})))
        parts.append("<ul>" + "".join(f"<li>{e(c['verdict'])}</li>" for c in summary["comparisons"]
                                      if c["buyer"] == buyer) + "</ul>")
    for name, rel in summary["plots"].items():
        data = base64.b64encode((out / rel).read_bytes()).decode()
        parts.append(f'<h2>{e(name.replace("_", " "))}</h2><img class="plot" alt="{e(name)}" '
                     f'src="data:image/png;base64,{data}">')
    arm_of = {spec: n for n, a in summary["arms"].items() for spec in a["specs"]}
    items = []
    for r in sorted(records, key=lambda r: (arm_of.get(r["seller"], r["seller"]), r["buyer"], r["scenario_id"])):
        arm = arm_of.get(r["seller"], r["seller"])
        turns = "".join(
            f"<li><b>{e(t['speaker'])}</b>: {e(t.get('text') or '')} <i>[{e(json.dumps(t.get('action')))}]</i></li>"
            for t in r.get("transcript") or [])
        outcome = "error: " + (r.get("error") or "") if r["ended_by"] == "error" else \
            f"{'deal' if r['deal'] else 'no deal'} ({r['ended_by']}), seller score {_fmt(r['seller_score'])}"
        tid = f"t{len(items)}"
        items.append(f'<details class="transcript" id="{tid}" data-arm="{e(arm)}" data-buyer="{e(r["buyer"])}" '
                     f'data-scenario="{e(r["scenario_id"])}"><summary>{e(arm)} vs {e(r["buyer"])}, '
                     f'{e(r["scenario_id"])}, {e(r["opener"])} opens: {e(outcome)}</summary><ol>{turns}</ol></details>')

    def options(key: str, values: list[str]) -> str:
        return (f'<select id="f-{key}"><option value="">every {key}</option>'
                + "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in values) + "</select>")

    arms_list = sorted({arm_of.get(r["seller"], r["seller"]) for r in records})
    parts.append("<h2>Transcripts</h2><p>" + options("arm", arms_list) + options("buyer", summary["buyers"])
                 + options("scenario", sorted({r["scenario_id"] for r in records}))
                 + ' <span id="shown"></span></p><div id="transcripts">' + "".join(items) + "</div>")
    parts.append("<h2>Settings</h2><pre>" + e(json.dumps(summary["settings"], indent=2, default=str)[:50000])
                 + "</pre>")
    script = """
const sel = k => document.getElementById('f-' + k);
function filter() {
  let n = 0;
  for (const d of document.querySelectorAll('details.transcript')) {
    const ok = ['arm', 'buyer', 'scenario'].every(k => !sel(k).value || d.dataset[k] === sel(k).value);
    d.style.display = ok ? '' : 'none';
    if (ok) n++;
  }
  document.getElementById('shown').textContent = n + ' shown';
}
['arm', 'buyer', 'scenario'].forEach(k => sel(k).addEventListener('change', filter));
filter();
// report.html#t12 opens transcript 12: a link to one negotiation
const target = location.hash && document.getElementById(location.hash.slice(1));
if (target && target.tagName === 'DETAILS') { target.open = true; target.scrollIntoView(); }
"""
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}img.plot{max-width:100%}"
             "details{margin:2px 0}summary{cursor:pointer}pre{white-space:pre-wrap;font-size:12px}")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>haggler report</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}<script>{script}</script></body></html>\n")
