"""Who reads whom: a block stack's receptive field by gradient, attention mass near the diagonal.

`abs_jacobian_rows` is the `(T, T)` map `Σ_ij |∂f(x)_{t,i} / ∂x_{s,j}|`, one output position at
a time (so a `small` stack at `T = 128` fits in memory); `receptive_field` reads from it the
largest lag a block stack reaches and compares it with a sliding window's `L (w − 1)`;
`window_mass` is the mean attention mass of trained heads within the last `w` keys. Used by the
`sliding-window` claim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments import models


def abs_jacobian_rows(f, x_TD: jax.Array) -> jax.Array:
  """`Σ_ij |∂f(x)_{t,i} / ∂x_{s,j}|` for every `(t, s)`: the `(T, T)` map of who reads whom.

  One output position at a time (`lax.map` over `t`, a `vmap` of the VJP over its `D` units),
  so the memory is `D` backward passes, not the `T · D` of `jax.jacrev(f)` at once (18.5 GB
  for a `small` stack at `T = 128`, which the OOM killer stopped). Each entry is the same VJP
  `jacrev` takes, so the zero pattern is the same.

  Args:
    f: `(T, D) -> (T, D)`.
    x_TD: the point.

  Returns:
    `(T, T)`, float32.
  """
  T, D = x_TD.shape

  @jax.jit
  def rows(x_TD):
    _, vjp = jax.vjp(f, x_TD)
    eye_DD = jnp.eye(D, dtype=x_TD.dtype)

    def row(t):
      cot_DTD = jnp.zeros((D, T, D), x_TD.dtype).at[:, t, :].set(eye_DD)
      (g_DTD,) = jax.vmap(vjp)(cot_DTD)
      return jnp.abs(g_DTD).sum((0, 2))

    return jax.lax.map(row, jnp.arange(T))

  return rows(x_TD)


def receptive_field(params, cfg: transformer.Config, seq_len: int, key,
                    window: int | None = None) -> dict:
  """Measured reach of the block stack by gradient, against `L (w − 1)`.

  Args:
    params, cfg: the model (its blocks only: `x_TD` enters the first block).
    seq_len: positions of the random input.
    key: PRNG key of the input.
    window: the `w` to compare with (default `cfg.window`).

  Returns:
    `{"reach": max lag with a nonzero gradient, "expected": L (w − 1), "rf_exact": 1.0 when
    the nonzero lags are exactly 0 … L (w − 1), else 0.0}`.
  """
  f_l = transformer.block_fn(cfg)

  def stack(x_TD):
    for layer in range(cfg.n_layers):
      x_TD = f_l(transformer.layer(params, layer), x_TD)
    return x_TD

  x_TD = jax.random.normal(key, (seq_len, cfg.d_model))
  J_TS = np.asarray(abs_jacobian_rows(stack, x_TD))
  lag_TS = np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :]
  expected = cfg.n_layers * ((window or cfg.window) - 1)
  reach_mask = (lag_TS >= 0) & (lag_TS <= expected)
  nonzero = J_TS > 0
  return {"reach": float(lag_TS[nonzero].max()), "expected": float(expected),
          "rf_exact": float(np.array_equal(nonzero, reach_mask))}


def window_mass(params, cfg: transformer.Config, tokens_BT, window: int) -> dict:
  """Mean mass of trained full-attention heads within the last `window` keys."""
  weights = models.intermediates(params, cfg, tokens_BT)["blocks"]["attn"]["weights"]
  mass_LBH = np.asarray(analysis.local_mass(weights, window))  # mean over query rows
  per_head = mass_LBH.mean(1)  # (L, H)
  return {"local_mass": float(mass_LBH.mean()),
          "heads_mostly_local": float((per_head > 0.5).mean()),
          "local_mass_min_head": float(per_head.min())}
