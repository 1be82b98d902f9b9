"""The three stability claims (residual-eigenvalues, eigenvalue-constrained, layernorm-condition)
together: registered and built, and the rank statistics and condition maximum they read."""

import numpy as np
import pytest
import scipy.stats

from experiments.claims import CLAIMS
from experiments.lab import norm_training
from experiments.verdict.arithmetic import stats


@pytest.mark.parametrize("claim_id", ["residual-eigenvalues", "eigenvalue-constrained",
                                      "layernorm-condition"])
def test_claims_registered_and_built(claim_id):
  claim = CLAIMS[claim_id]
  assert claim.built and claim.thresholds and claim.anchors


def test_rankdata_and_spearman_match_scipy():
  rng = np.random.default_rng(0)
  for _ in range(5):
    x = rng.integers(0, 5, 12).astype(float)  # many ties
    y = rng.normal(size=12)
    np.testing.assert_allclose(stats.rankdata(x), scipy.stats.rankdata(x))
    np.testing.assert_allclose(stats.spearman(x, y), scipy.stats.spearmanr(x, y).statistic,
                               atol=1e-12)
  # Diverged runs (inf loss) rank last, as scipy ranks inf.
  y = np.array([1.0, np.inf, 2.0, np.inf])
  np.testing.assert_allclose(stats.rankdata(y), scipy.stats.rankdata(y))
  assert np.isnan(stats.spearman([1, 2], [2, 1]))  # too few values
  assert np.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))  # constant side


def test_kappa_max_ignores_non_finite():
  k = np.array([[2.0, 30.0], [np.nan, np.inf]])
  assert norm_training.kappa_max(k) == 30.0
  assert norm_training.kappa_max([k, np.array([[31.0, np.nan], [1.0, 1.0]])]) == 31.0
  assert np.isnan(norm_training.kappa_max(np.full((1, 2), np.nan)))
