"""The one tuner (`experiments.lab.edge.tune`, the registered edge rule) on hand-worked cases."""

import math

import numpy as np
import pytest

from experiments.lab import edge


def _run(loss_of, excluded_of=lambda r: False):
  seen = []

  def run(rates):
    seen.append(list(rates))
    return [loss_of(r) for r in rates], [excluded_of(r) for r in rates]

  return run, seen


def test_an_interior_best_runs_the_grid_alone():
  run, seen = _run(lambda r: abs(math.log10(r) + 2.5))  # best at 3e-3
  t = edge.tune(run, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert seen == [[1e-3, 3e-3, 1e-2, 3e-2]]
  assert (t.learning_rate, t.index, t.at_edge) == (3e-3, 1, False)


def test_a_best_top_edge_is_extended_once_and_brackets():
  run, seen = _run(lambda r: abs(math.log10(r) + 1.4))  # best near 0.04
  t = edge.tune(run, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert len(seen) == 2 and seen[1] == [pytest.approx(9e-2)]
  assert t.learning_rate == 3e-2 and not t.at_edge and len(t.grid) == 5
  assert list(t.grid) == sorted(t.grid) and t.to_dict()["grid"] == list(t.grid)


def test_a_best_still_at_the_edge_after_extension_is_flagged():
  run, _ = _run(lambda r: r)  # lower rate always better: runs off the bottom
  t = edge.tune(run, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert t.learning_rate == pytest.approx(1e-3 / 3) and t.at_edge and t.index == 0
  np.testing.assert_allclose(t.losses, t.grid)
  assert edge.tune(run, (1e-3, 3e-3), extend=0).at_edge  # no extension: flagged at once


def test_excluded_and_failed_rates_never_win_and_all_failed_raises():
  # the lowest loss belongs to an excluded (diverged) rate: the next best wins, and is inside
  run, _ = _run(lambda r: -r, excluded_of=lambda r: r > 5e-3)
  t = edge.tune(run, (1e-3, 3e-3, 1e-2, 3e-2), extend=1)
  assert t.learning_rate == 3e-3 and not t.at_edge and t.excluded == (False, False, True, True)
  run, _ = _run(lambda r: float("nan") if r > 5e-3 else -r)
  assert edge.tune(run, (1e-3, 3e-3, 1e-2), extend=1).learning_rate == 3e-3
  with pytest.raises(ValueError, match="every rate"):
    edge.tune(lambda rates: ([math.inf] * len(rates), [False] * len(rates)), (1e-3, 1e-2))
  with pytest.raises(ValueError, match="increasing"):
    edge.tune(lambda rates: (rates, [False] * len(rates)), (1e-2, 1e-3))
  with pytest.raises(ValueError, match="two rates"):
    edge.tune(lambda rates: (rates, [False]), (1e-2,), extend=1)
  with pytest.raises(ValueError, match="one of each per rate"):
    edge.tune(lambda rates: ([1.0], [False]), (1e-3, 1e-2))
