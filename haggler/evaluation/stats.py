"""Statistics for comparing sellers: scenario-clustered intervals, paired tests, Holm, equivalence.

Cells of one scenario are correlated (the same issues and preferences, played against several buyers
and openers), so every interval and test here treats the scenario, not the cell, as the unit:
- intervals: a percentile bootstrap that resamples scenarios with replacement (and, when an arm was
  trained with several seeds, resamples the seeds first, so the interval includes training-seed
  variation);
- p-values: a t-test on the mean with a cluster-robust (CR1) standard error and G - 1 degrees of freedom
  (G scenarios), which is statsmodels' OLS with ``cov_type="cluster"`` on an intercept;
- equivalence: two one-sided tests (TOST) at level alpha, i.e. the (1 - 2 alpha) cluster-robust t
  interval lies inside plus or minus the margin;
- multiple comparisons: Holm's step-down correction within a family (statsmodels' ``multipletests``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    level: float
    n_cells: int
    n_clusters: int
    n_seeds: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _groups(clusters: Sequence[Any]) -> list[np.ndarray]:
    index: dict[Any, list[int]] = {}
    for i, c in enumerate(clusters):
        index.setdefault(c, []).append(i)
    # in a fixed order (not the records' order, which follows completion): a seeded bootstrap then gives the
    # same interval for the same records however a run wrote them
    return [np.asarray(index[k]) for k in sorted(index, key=repr)]


def cluster_bootstrap(values: Sequence[float], clusters: Sequence[Any], seeds: Sequence[Any] | None = None,
                      level: float = 0.95, n_boot: int = 4000, rng: int | np.random.Generator = 0) -> Interval:
    """Mean of ``values`` with a percentile bootstrap interval resampling clusters (and seeds, if given).

    With seeds, the estimate is the mean over seeds of each seed's mean, and every bootstrap replicate
    resamples the seeds, then the clusters within each drawn seed.
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        raise ValueError("no values to summarize")
    if len(clusters) != len(x) or (seeds is not None and len(seeds) != len(x)):
        raise ValueError("values, clusters and seeds must have the same length")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    seed_ids = list(seeds) if seeds is not None else [0] * len(x)
    per_seed = []  # for each seed: per-cluster (sum, count)
    for rows in _groups(seed_ids):
        groups = _groups([clusters[i] for i in rows])
        sums = np.array([x[rows[g]].sum() for g in groups])
        counts = np.array([len(g) for g in groups], dtype=float)
        per_seed.append((sums, counts))
    estimate = float(np.mean([s.sum() / c.sum() for s, c in per_seed]))
    reps = np.empty(n_boot)
    for b in range(n_boot):
        drawn = gen.integers(0, len(per_seed), len(per_seed)) if len(per_seed) > 1 else [0]
        means = []
        for k in drawn:
            sums, counts = per_seed[k]
            pick = gen.integers(0, len(sums), len(sums))
            means.append(sums[pick].sum() / counts[pick].sum())
        reps[b] = np.mean(means)
    alpha = 1 - level
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return Interval(estimate, float(low), float(high), level, len(x),
                    len(set(clusters)), len(per_seed))


@dataclass(frozen=True)
class ClusteredT:
    estimate: float
    se: float
    df: int
    t: float
    p_value: float


def clustered_t(values: Sequence[float], clusters: Sequence[Any], null: float = 0.0) -> ClusteredT:
    """The mean, its cluster-robust (CR1) standard error, and the two-sided t-test against ``null``."""
    from scipy import stats as st

    x = np.asarray(values, dtype=float)
    n = len(x)
    groups = _groups(clusters)
    g = len(groups)
    if g < 2:
        raise ValueError("a clustered test needs at least two clusters (scenarios)")
    mean = float(x.mean())
    resid_sums = np.array([(x[idx] - mean).sum() for idx in groups])
    se = math.sqrt(g / (g - 1) * float((resid_sums**2).sum())) / n
    t = (mean - null) / se if se > 0 else (math.inf if mean != null else 0.0)
    p = float(2 * st.t.sf(abs(t), g - 1)) if math.isfinite(t) else 0.0
    return ClusteredT(mean, se, g - 1, t, p)


@dataclass(frozen=True)
class Equivalence:
    margin: float
    alpha: float
    low: float  # the (1 - 2 alpha) interval
    high: float
    p_value: float  # the larger of the two one-sided p-values
    equivalent: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tost(values: Sequence[float], clusters: Sequence[Any], margin: float, alpha: float = 0.05) -> Equivalence:
    """Two one-sided tests that the mean lies within plus or minus ``margin``, clustered by ``clusters``."""
    from scipy import stats as st

    if margin <= 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    c = clustered_t(values, clusters)
    if c.se == 0:
        inside = abs(c.estimate) < margin
        return Equivalence(margin, alpha, c.estimate, c.estimate, 0.0 if inside else 1.0, inside)
    p_low = float(st.t.sf((c.estimate + margin) / c.se, c.df))  # H0: mean <= -margin
    p_high = float(st.t.cdf((c.estimate - margin) / c.se, c.df))  # H0: mean >= +margin
    q = float(st.t.ppf(1 - alpha, c.df))
    low, high = c.estimate - q * c.se, c.estimate + q * c.se
    p = max(p_low, p_high)
    return Equivalence(margin, alpha, low, high, p, p < alpha)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (family-wise error), in the input order."""
    if not p_values:
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(p) for p in multipletests(list(p_values), method="holm")[1]]


@dataclass(frozen=True)
class PairedComparison:
    a: str
    b: str
    common_cells: int
    excluded_cells: int  # cells only one of the two completed (errored or missing on the other side)
    difference: Interval  # mean of a - b over common cells, scenario-clustered bootstrap
    p_value: float
    p_holm: float | None
    equivalence: Equivalence | None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["difference"] = self.difference.to_json()
        d["equivalence"] = self.equivalence.to_json() if self.equivalence else None
        return d


def paired(a_name: str, a: dict[str, tuple[float, Any]], b_name: str, b: dict[str, tuple[float, Any]],
           margin: float | None = None, level: float = 0.95, n_boot: int = 4000, rng: int = 0,
           a_seeds: dict[str, Any] | None = None) -> PairedComparison:
    """Compare two sellers on the cells both completed. ``a`` and ``b`` map a cell key to (score, scenario).

    ``a_seeds`` (cell key -> training seed) makes a's replicates resample training seeds as well; then
    ``a`` holds one entry per (seed, cell) under keys ``(seed, cell)``.
    """
    if a_seeds:
        keys = [k for k in a if k[1] in b]
        diffs = [a[k][0] - b[k[1]][0] for k in keys]
        clusters = [a[k][1] for k in keys]
        seeds = [a_seeds[k] for k in keys]
        union = {k[1] for k in a} | set(b)
        common = {k[1] for k in keys}
    else:
        common_keys = sorted(set(a) & set(b))
        diffs = [a[k][0] - b[k][0] for k in common_keys]
        clusters = [a[k][1] for k in common_keys]
        seeds = None
        union = set(a) | set(b)
        common = set(common_keys)
    if not diffs:
        raise ValueError(f"{a_name} and {b_name} have no completed cell in common")
    interval = cluster_bootstrap(diffs, clusters, seeds, level=level, n_boot=n_boot, rng=rng)
    test = clustered_t(diffs, clusters) if len(set(clusters)) > 1 else None
    eq = tost(diffs, clusters, margin) if (margin and test is not None) else None
    return PairedComparison(a_name, b_name, len(common), len(union - common), interval,
                            test.p_value if test else float("nan"), None, eq)
