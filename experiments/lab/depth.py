"""Readings of a depth sweep: over depths, and over the layers of one stack.

`residual-eigenvalues` measures each layer's `max |λ(J_l) − 1|` (`stability.depth_point`,
`stability.trained_point`); a stack of 128 layers gives a distribution of them, and one
outlying layer is not the stack. `layer_distribution` reads that distribution (its median,
and the fraction of layers near 1); `sweep_metrics` reads a depth sweep's rows across depths
(the shallowest against the deepest) and the deepest stack's layers. Both are plain float64
numpy on the lists the measurements return.
"""

from __future__ import annotations

import numpy as np


def layer_distribution(dist_L, near: float) -> dict[str, float]:
  """The distribution over layers of `max |λ(J_l) − 1|` (`dist_from_one`), in float64: its
  median, and the fraction of layers near 1 (`< near`).

  Example:
    >>> from experiments.lab.depth import layer_distribution
    >>> layer_distribution([0.1, 0.2, 0.3, 28.8], near=0.5)
    {'median_dist': 0.25, 'frac_near': 0.75}
  """
  d = np.asarray(dist_L, np.float64)
  if d.ndim != 1 or d.size == 0:
    raise ValueError(f"layer_distribution: dist_L must be one value per layer, got shape "
                     f"{d.shape}. Fix: pass a depth point's `dist_from_one` list.")
  return {"median_dist": float(np.median(d)), "frac_near": float(np.mean(d < near))}


def sweep_metrics(rows: dict[int, dict], near: float) -> dict[str, float]:
  """One arm's depth sweep `{L: depth_point(...)}` -> flat metrics over depths.

  `max_dist_all` / `min_dist_all`: the largest / smallest over depths of `max_l |λ(J_l) − 1|`;
  `dist_shrink`: that value at the deepest over at the shallowest depth; `e2e_growth`: the same
  ratio for the end-to-end `σ_max`; `dist_L{L}`, `e2e_sigma_L{L}`, `rms_ratio_L{L}` per depth;
  `init_median_dist`, `init_frac_near`: `layer_distribution` of the deepest stack's layers.

  Example:
    >>> from experiments.lab.depth import sweep_metrics
    >>> rows = {1: {"max_dist_from_one": 0.2, "e2e_sigma_max": 1.0, "stream_rms_in": 1.0,
    ...             "stream_rms_out": 2.0, "dist_from_one": [0.2]},
    ...         4: {"max_dist_from_one": 0.9, "e2e_sigma_max": 3.0, "stream_rms_in": 1.0,
    ...             "stream_rms_out": 1.0, "dist_from_one": [0.9, 0.1, 0.1, 0.2]}}
    >>> m = sweep_metrics(rows, near=0.5)
    >>> m["max_dist_all"], m["dist_shrink"], m["e2e_growth"], m["init_frac_near"]
    (0.9, 4.5, 3.0, 0.75)
  """
  depths = sorted(rows)
  dist = np.array([rows[L]["max_dist_from_one"] for L in depths], np.float64)
  e2e = np.array([rows[L]["e2e_sigma_max"] for L in depths], np.float64)
  out = {"max_dist_all": float(dist.max()), "min_dist_all": float(dist.min()),
         "dist_shrink": float(dist[-1] / dist[0]), "e2e_growth": float(e2e[-1] / e2e[0]),
         "e2e_sigma_max_all": float(e2e.max())}
  for L, d, s in zip(depths, dist, e2e, strict=True):
    out[f"dist_L{L}"] = float(d)
    out[f"e2e_sigma_L{L}"] = float(s)
    out[f"rms_ratio_L{L}"] = rows[L]["stream_rms_out"] / rows[L]["stream_rms_in"]
  deepest = layer_distribution(rows[depths[-1]]["dist_from_one"], near)
  return {**out, **{f"init_{k}": v for k, v in deepest.items()}}
