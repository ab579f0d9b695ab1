"""The report's plots (matplotlib, headless): gain over base by size, score per buyer, training reward."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from haggler.study.report.assemble import POOLED, ArmInfo


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Any, ax: Any, path: Path, title: str, ylabel: str, legend_size: int = 8) -> bool:
    """Every plot ends here: labels, legend, saved at one resolution, closed."""
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


def make_plots(comparisons: list[dict], per_buyer: dict[str, dict[str, dict]], table: dict[str, ArmInfo],
               out: Path) -> dict[str, str]:
    """Draw every plot there is data for into out/plots/; name -> path relative to out."""
    plots = {}
    if plot_gain_vs_size(comparisons, table, out / "plots" / "gain_vs_size.png"):
        plots["gain_vs_size"] = "plots/gain_vs_size.png"
    if plot_per_buyer(per_buyer, out / "plots" / "per_buyer.png"):
        plots["per_buyer"] = "plots/per_buyer.png"
    if plot_training(training_curves(table), out / "plots" / "training_reward.png"):
        plots["training_reward"] = "plots/training_reward.png"
    return plots
