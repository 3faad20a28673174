"""Acc@n, Best@n and the unbiased pass@k."""

from __future__ import annotations

import itertools
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balagg.evaluation.scoring.metrics import benchmark_metrics, pass_at_k


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_combinatorial_estimator(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_equals_the_share_of_k_subsets_with_a_success():
    flags = [1, 0, 0, 1, 0, 0]
    for k in range(1, 7):
        subsets = list(itertools.combinations(flags, k))
        assert pass_at_k(6, 2, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_1_is_accuracy_and_pass_at_n_is_any_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 0, 8) == 0.0


@pytest.mark.parametrize("n, c, k", [(4, 1, 8), (8, 2, 0), (8, 9, 1), (0, 0, 1), (8, -1, 1)])
def test_refuses_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_benchmark_metrics_on_8_1_0_correct():
    flags = [[1] * 8, [1] + [0] * 7, [0] * 8]
    metrics = benchmark_metrics(flags, ks=(1, 8))
    assert metrics["acc"] == pytest.approx(9 / 24)
    assert metrics["best"] == pytest.approx(2 / 3)
    assert metrics["pass@1"] == pytest.approx(metrics["acc"])
    assert metrics["pass@8"] == pytest.approx(metrics["best"])


def test_benchmark_metrics_refuses_ragged_or_empty_input_and_k_above_n():
    with pytest.raises(ValueError, match="same number"):
        benchmark_metrics([[1, 0], [1]])
    with pytest.raises(ValueError, match="no problems"):
        benchmark_metrics([])
    with pytest.raises(ValueError, match="pass@3"):
        benchmark_metrics([[1, 0]], ks=(3,))


# ------------------------------------------------------------------------------------------------
# Best@n (bootstrap): verl's best@n/mean
# ------------------------------------------------------------------------------------------------


def verl_best_at_n_mean(problems, seed=42, n_bootstrap=1000):
    """verl's bootstrap best@n/mean of one data source, re-implemented step by step after
    ``process_validation_metrics`` / ``bootstrap_metric`` in verl/trainer/ppo/metric_utils.py
    (volcengine/verl 07c9cf13): for every problem (uid) with n = len(its scores) > 1 samples,
    ``np.random.seed(seed)``, then ``n_bootstrap`` times ``np.random.choice(n, size=n, replace=True)``
    and ``np.max`` of the chosen scores; the problem's value is ``np.mean`` of those maxima, and the
    data source's value ``np.mean`` over problems. Uses numpy's global RNG, as verl does."""
    import numpy as np

    state = np.random.get_state()
    try:
        per_problem = []
        for scores in problems:
            np.random.seed(seed)
            maxima = []
            for _ in range(n_bootstrap):
                chosen = np.random.choice(len(scores), size=len(scores), replace=True)
                maxima.append(np.max([scores[i] for i in chosen]))
            per_problem.append(np.mean(maxima))
        return float(np.mean(per_problem))
    finally:
        np.random.set_state(state)


def test_bootstrap_best_equals_verls_arithmetic_exactly():
    import numpy as np

    from balagg.evaluation.scoring.metrics import bootstrap_best_at_n

    rng = np.random.default_rng(7)
    problems = [list(row) for row in rng.integers(0, 2, size=(12, 8)) * (rng.random((12, 1)) < 0.7)]
    problems += [[0, 0, 0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0, 0, 0]]  # the order of the samples matters to verl
    ours = benchmark_metrics(problems)
    assert ours["best_bootstrap"] == verl_best_at_n_mean(problems)  # bit for bit
    per_problem = bootstrap_best_at_n(np.array(problems))
    assert per_problem[-1] != per_problem[-2]
    assert per_problem[-1] == verl_best_at_n_mean([problems[-1]])


def test_bootstrap_best_hand_values():
    from balagg.evaluation.scoring.metrics import bootstrap_best_at_n

    # all correct / none correct: every resample says so
    assert benchmark_metrics([[1] * 8, [0] * 8])["best_bootstrap"] == 0.5
    # one sample: the bootstrap of one sample is that sample
    assert benchmark_metrics([[1], [0], [1]])["best_bootstrap"] == pytest.approx(2 / 3)
    # 1 of 8 correct: literal Best@8 is 1, the bootstrap about 1 - (7/8)^8 = 0.656 (1000 resamples: sd 0.015)
    one = float(bootstrap_best_at_n([[1, 0, 0, 0, 0, 0, 0, 0]])[0])
    assert abs(one - (1 - (7 / 8) ** 8)) < 0.05 and one < 1
    metrics = benchmark_metrics([[1] * 8, [1] + [0] * 7, [0] * 8])
    assert metrics["best"] == pytest.approx(2 / 3) and metrics["acc"] < metrics["best_bootstrap"] < metrics["best"]
    # the value is a multiple of 1/1000 per problem (share of the 1000 resamples that hit a correct sample)
    assert round(one * 1000) == pytest.approx(one * 1000, abs=1e-9)
    with pytest.raises(ValueError, match="flags"):
        bootstrap_best_at_n([1, 0, 1])
