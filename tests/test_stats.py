"""Scenario-clustered statistics against scipy and statsmodels, on data where the answer is known."""

import numpy as np
import pytest

scipy_stats = pytest.importorskip("scipy.stats")
sm = pytest.importorskip("statsmodels.api")

from haggler.evaluation.stats import cluster_bootstrap, clustered_t, holm, paired, tost  # noqa: E402


def clustered_data(n_clusters=30, per=(1, 6), effect=0.05, cluster_sd=0.1, cell_sd=0.05, seed=1):
    rng = np.random.default_rng(seed)
    values, clusters = [], []
    for g in range(n_clusters):
        shift = rng.normal(0, cluster_sd)
        for _ in range(rng.integers(per[0], per[1] + 1)):
            values.append(effect + shift + rng.normal(0, cell_sd))
            clusters.append(f"s{g}")
    return np.array(values), clusters


def test_cluster_bootstrap_matches_scipy_resampling_whole_scenarios():
    x, clusters = clustered_data()
    ours = cluster_bootstrap(x, clusters, n_boot=20_000, rng=3)
    ids = sorted(set(clusters))
    sums = np.array([x[[c == i for c in clusters]].sum() for i in ids])
    counts = np.array([sum(c == i for c in clusters) for i in ids], dtype=float)
    ref = scipy_stats.bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis) / c.sum(axis), paired=True,
                                vectorized=True, method="percentile", n_resamples=20_000, random_state=4,
                                confidence_level=0.95)
    assert ours.estimate == pytest.approx(x.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.004)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.004)
    assert ours.n_clusters == 30 and ours.n_cells == len(x)


def test_with_one_cell_per_scenario_it_is_the_ordinary_bootstrap():
    x = np.random.default_rng(5).normal(0.3, 0.2, 80)
    ours = cluster_bootstrap(x, list(range(80)), n_boot=20_000, rng=1)
    ref = scipy_stats.bootstrap((x,), np.mean, method="percentile", n_resamples=20_000, random_state=2)
    assert (ours.low, ours.high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=0.005)


def test_clustering_widens_the_interval_when_scenarios_are_correlated():
    x, clusters = clustered_data(cluster_sd=0.2, cell_sd=0.01, per=(6, 6))
    clustered = cluster_bootstrap(x, clusters)
    naive = cluster_bootstrap(x, list(range(len(x))))
    assert (clustered.high - clustered.low) > 1.8 * (naive.high - naive.low)


def test_training_seed_variation_widens_the_interval():
    rng = np.random.default_rng(0)
    x, clusters = clustered_data(cluster_sd=0.02, cell_sd=0.02, per=(4, 4))
    seeds_x, seeds_c, seeds = [], [], []
    for s, shift in enumerate(rng.normal(0, 0.1, 4)):
        seeds_x += list(x + shift)
        seeds_c += clusters
        seeds += [s] * len(x)
    with_seeds = cluster_bootstrap(seeds_x, seeds_c, seeds)
    without = cluster_bootstrap(seeds_x, seeds_c)
    assert with_seeds.n_seeds == 4
    assert (with_seeds.high - with_seeds.low) > 3 * (without.high - without.low)


def test_clustered_t_is_statsmodels_ols_with_cluster_robust_errors():
    x, clusters = clustered_data()
    ours = clustered_t(x, clusters)
    groups = np.unique(clusters, return_inverse=True)[1]
    fit = sm.OLS(x, np.ones_like(x)).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    assert ours.se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert ours.p_value == pytest.approx(float(fit.pvalues[0]), rel=1e-6)
    assert ours.df == len(set(clusters)) - 1


def test_tost_is_statsmodels_ttost_with_one_cell_per_scenario():
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(2)
    a, b = rng.normal(0.50, 0.1, 60), rng.normal(0.51, 0.1, 60)
    ours = tost(a - b, list(range(60)), margin=0.05)
    p, _, _ = ttost_paired(a, b, -0.05, 0.05)
    assert ours.p_value == pytest.approx(p, rel=1e-6)


def test_equivalence_is_found_where_it_holds_and_not_where_it_does_not():
    near, clusters = clustered_data(effect=0.005, cluster_sd=0.01, cell_sd=0.01, n_clusters=60)
    far, clusters_far = clustered_data(effect=0.08, cluster_sd=0.01, cell_sd=0.01, n_clusters=60)
    assert tost(near, clusters, margin=0.03).equivalent
    assert not tost(far, clusters_far, margin=0.03).equivalent
    noisy, c = clustered_data(effect=0.0, cluster_sd=0.3, n_clusters=8)  # no difference, but no evidence either
    eq = tost(noisy, c, margin=0.03)
    assert not eq.equivalent and eq.low < -0.03 < 0.03 < eq.high


def test_holm_matches_the_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.2]
    # sorted: 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08 -> monotone 0.09, 0.2*1=0.2
    assert holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2])


def test_paired_uses_common_cells_and_counts_the_rest():
    a = {f"c{i}": (0.6, f"s{i // 2}") for i in range(20)}
    b = {f"c{i}": (0.5, f"s{i // 2}") for i in range(2, 22)}
    cmp = paired("rl", a, "base", b, margin=0.2)
    assert cmp.common_cells == 18 and cmp.excluded_cells == 4
    assert cmp.difference.estimate == pytest.approx(0.1)
