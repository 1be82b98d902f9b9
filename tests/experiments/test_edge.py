"""The registered edge rule (`experiments.lab.edge.edge_search`) against hand-worked cases."""

import math

import numpy as np
import pytest

from experiments.lab.edge import edge_search


def _calls(scores_by_rate):
  seen = []

  def score(rates):
    seen.append(list(rates))
    return [scores_by_rate(r) for r in rates]

  return score, seen


def test_an_interior_best_runs_the_grid_alone():
  score, seen = _calls(lambda r: abs(math.log10(r) + 2.5))  # best at 3e-3
  r = edge_search(score, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert seen == [[1e-3, 3e-3, 1e-2, 3e-2]]
  assert (r["learning_rate"], r["index"], r["at_edge"]) == (3e-3, 1, False)


def test_a_best_top_edge_is_extended_once_and_brackets():
  score, seen = _calls(lambda r: abs(math.log10(r) + 1.4))  # best near 0.04
  r = edge_search(score, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert len(seen) == 2 and seen[1] == [pytest.approx(9e-2)]
  assert r["learning_rate"] == 3e-2 and not r["at_edge"]
  assert r["grid"] == sorted(r["grid"]) and len(r["grid"]) == 5


def test_a_best_still_at_the_edge_after_extension_is_flagged():
  score, _ = _calls(lambda r: r)  # lower rate always better: runs off the bottom
  r = edge_search(score, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert r["learning_rate"] == pytest.approx(1e-3 / 3) and r["at_edge"] and r["index"] == 0
  np.testing.assert_allclose(r["scores"], sorted(r["grid"]))


def test_failed_rates_never_win_and_all_failed_raises():
  score, _ = _calls(lambda r: float("nan") if r > 5e-3 else -r)  # diverges above 5e-3
  r = edge_search(score, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert r["learning_rate"] == 3e-3 and not r["at_edge"] and math.isinf(r["scores"][-1])
  with pytest.raises(ValueError, match="every rate"):
    edge_search(lambda rates: [float("inf")] * len(rates), (1e-3, 1e-2), extend=1)
  with pytest.raises(ValueError, match="increasing"):
    edge_search(lambda rates: rates, (1e-2, 1e-3))
  with pytest.raises(ValueError, match="two rates"):
    edge_search(lambda rates: rates, (1e-2,), extend=1)
