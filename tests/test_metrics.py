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
