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


def training_curves(table: dict[str, ArmInfo], key: str = "reward") -> dict[str, list[tuple[int, float]]]:
    """Per training run: (step, value of ``key``) from its train_log.jsonl, where logged."""
    curves = {}
    for arm in table.values():
        for d in arm.train_dirs:
            log = Path(d) / "train_log.jsonl"
            if log.is_file():
                rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
                pts = [(int(h["step"]), float(h[key])) for h in rows if key in h and "step" in h]
                if pts:
                    curves[f"{arm.name} ({Path(d).name})"] = pts
    return curves


def rollout_scores(table: dict[str, ArmInfo]) -> dict[str, list[tuple[int, float]]]:
    """Per training run: its rollouts' seller score per step, comparable across arms whatever each trained on
    (``reward: outcome`` is +-1); a log older than that figure gives its reward, the score less any format penalty."""
    return {**training_curves(table), **training_curves(table, "negotiation/seller_score")}


def validation_bands(table: dict[str, ArmInfo]) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per training run with validation: (step, score, low, high); the band is the step-0 score plus the
    paired, scenario-clustered 95% interval of the change since step 0."""
    score, low, high = (training_curves(table, k) for k in
                        ("validation/score", "validation/score_change_low", "validation/score_change_high"))
    bands = {}
    for name, pts in score.items():
        base = dict(pts).get(0, pts[0][1])
        lo, hi = dict(low.get(name, [])), dict(high.get(name, []))
        bands[name] = [(s, v, base + lo.get(s, v - base), base + hi.get(s, v - base)) for s, v in pts]
    return bands


def plot_training(table: dict[str, ArmInfo], path: Path) -> bool:
    """Learning curves side by side: held-out validation score (with its band), training reward, invalid
    actions (training rollouts solid, validation dashed)."""
    reward, bands = rollout_scores(table), validation_bands(table)
    if not reward and not bands:
        return False
    plt = _plt()
    fig, (val, rew, inv) = plt.subplots(1, 3, figsize=(15, 4))
    for name, pts in bands.items():
        line, = val.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name)
        val.fill_between([p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts], alpha=0.2,
                         color=line.get_color())
    for name, pts in reward.items():
        rew.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name)
    rew.set_title("Training rollouts' seller score", fontsize=9)
    for key, style in (("negotiation/invalid_action_rate", "-"), ("validation/invalid_rate", "--")):
        for name, pts in training_curves(table, key).items():
            inv.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=".", label=f"{name} {key.split('/')[0]}")
    inv.set_title("Invalid actions", fontsize=9)
    for ax in (val, rew, inv):
        ax.set_xlabel("GRPO step")
    for ax in (rew, inv):
        ax.legend(fontsize=6)
    return _finish(fig, val, path, "Validation score (held out; band: 95% CI of the change)", "mean seller score", 7)


def make_plots(comparisons: list[dict], per_buyer: dict[str, dict[str, dict]], table: dict[str, ArmInfo],
               out: Path) -> dict[str, str]:
    """Draw every plot there is data for into out/plots/; name -> path relative to out."""
    plots = {}
    if plot_gain_vs_size(comparisons, table, out / "plots" / "gain_vs_size.png"):
        plots["gain_vs_size"] = "plots/gain_vs_size.png"
    if plot_per_buyer(per_buyer, out / "plots" / "per_buyer.png"):
        plots["per_buyer"] = "plots/per_buyer.png"
    if plot_training(table, out / "plots" / "training_reward.png"):
        plots["training_reward"] = "plots/training_reward.png"
    return plots
