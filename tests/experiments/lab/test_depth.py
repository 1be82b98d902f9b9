"""`experiments.lab.depth`: a depth sweep's ratios, and the distribution over layers against a
sorted-by-hand float64 reference."""

import numpy as np
import pytest

from experiments.lab import depth


def test_sweep_metrics_ratios():
  rows = {L: {"max_dist_from_one": d, "e2e_sigma_max": s, "stream_rms_in": 1.0,
              "stream_rms_out": 1.0, "dist_from_one": [d] * L}
          for L, d, s in ((1, 0.4, 1.0), (8, 0.1, 1.5), (2, 0.2, 3.0))}
  m = depth.sweep_metrics(rows, near=0.5)
  assert m["max_dist_all"] == 0.4 and m["min_dist_all"] == 0.1
  assert m["dist_shrink"] == pytest.approx(0.25) and m["e2e_growth"] == pytest.approx(1.5)
  assert m["e2e_sigma_max_all"] == 3.0
  assert m["init_median_dist"] == 0.1 and m["init_frac_near"] == 1.0  # the deepest, L = 8


def test_layer_distribution_matches_a_sorted_reference():
  # Independent reference: the median from the sorted values by hand, the fraction by counting.
  rng = np.random.default_rng(0)
  for n in (1, 7, 128):
    d = np.exp(rng.normal(-1.0, 1.5, n))  # heavy right tail, as v5's trained layers (max 28.8)
    d[0] = 0.5  # a layer exactly at the margin is not near 1
    got = depth.layer_distribution(d.astype(np.float32).tolist(), near=0.5)
    x = sorted(float(v) for v in d.astype(np.float32))
    median = x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2
    assert got["median_dist"] == pytest.approx(median, rel=1e-12)
    assert got["frac_near"] == sum(v < 0.5 for v in x) / n
  # One outlying layer moves the maximum, not the median or the fraction.
  base = [0.25] * 127
  assert depth.layer_distribution(base + [28.8], 0.5) == pytest.approx(
      {"median_dist": 0.25, "frac_near": 127 / 128})
  with pytest.raises(ValueError, match="one value per layer"):
    depth.layer_distribution([], 0.5)
