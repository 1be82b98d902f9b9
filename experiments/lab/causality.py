"""What the `causal-mask` claim reads of the sentence itself: the future's weight, and how much
every earlier token moves every later position, as the model computes it (float32).

`future_weight` is the largest sown attention weight above the diagonal (a masked score is
`finfo.min` before the softmax, so its weight is exactly 0: the proof, verified on the very
matrices measured). `token_reads` differentiates the whole stack of layers
(`analysis.stack_fn`) with respect to the residual stream entering it (`analysis.stream_input`):
`D[i, j] ≈ ‖∂x_L,i / ∂x_0,j‖` by forward-mode products along random directions (no finite
differences; `dependency`). A later token's influence on an earlier position (`j > i`) is exactly 0
for a causal model; an earlier token whose influence on position `i` is below float32's
machine epsilon of the largest influence on `i` is *unread* in float32: a change in it moves
position `i` by less than the rounding of its largest term.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer

EPS32 = float(np.finfo(np.float32).eps)


def future_weight(weights) -> float:
  """The largest attention weight above the diagonal of `weights (..., T, T)` (0 if causal).

  Example:
    >>> import numpy as np
    >>> from experiments.lab.causality import future_weight
    >>> future_weight(np.tril(np.ones((2, 4, 4)))), future_weight(np.ones((4, 4)))
    (0.0, 1.0)
  """
  w = np.asarray(weights)
  T = w.shape[-1]
  return float(np.abs(np.where(np.triu(np.ones((T, T), bool), 1), w, 0)).max())


@functools.partial(jax.jit, static_argnums=(0, 3))
def _dependency(cfg: transformer.Config, blocks, x_TD, directions: int, key):
  T, D = x_TD.shape
  _, f_jvp = jax.linearize(functools.partial(analysis.stack_fn(cfg), blocks), x_TD)
  u_KTD = jax.random.normal(key, (directions, T, D), x_TD.dtype)

  def column(j):  # ‖∂x_L,i/∂x_0,j · u‖ for every i, each direction u: one JVP each
    tangents = jnp.zeros((directions, T, D), x_TD.dtype).at[:, j, :].set(u_KTD[:, j, :])
    dy_KTD = jax.vmap(f_jvp)(tangents)
    return jnp.sqrt(jnp.mean(jnp.sum(jnp.square(dy_KTD), axis=-1), axis=0))

  return jax.lax.map(column, jnp.arange(T)).T


def dependency(params, cfg: transformer.Config, tokens_T, *, directions: int = 4,
               seed: int = 0) -> np.ndarray:
  """`D (T, T)`: `D[i, j] ≈ ‖∂x_L,i / ∂x_0,j‖_F`, the stack's token-to-token influence, in the
  model's dtype (float32), for one window of tokens `(T,)`.

  Each token's block is read along `directions` Gaussian directions `u`
  (`E ‖J u‖² = ‖J‖_F²`, so `D` is the root mean square over them): one forward-mode product
  per token and direction instead of `d` (`analysis.token_dependency`, the exact norm, costs
  `d / directions` times more). A block that is exactly zero gives exactly 0 along any `u`, and
  a non-zero one almost surely does not, so the future's zeros are read exactly.
  """
  x_TD = analysis.stream_input(params, cfg, jnp.asarray(tokens_T))
  return np.asarray(_dependency(cfg, params["blocks"], x_TD, directions, jax.random.key(seed)),
                    np.float64)


def reads(D_TS, eps: float = EPS32) -> dict:
  """What one window's influence matrix `D (T, T)` says about the past and the future.

  Returns:
    `future_influence_max`: the largest `D[i, j]`, `j > i` (0 for a causal model);
    `past_unread`: the fraction of pairs `j < i` with `D[i, j] < eps · max_{j' ≤ i} D[i, j']`
    (exact zeros included); `past_pairs`: how many pairs `j < i` there are.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.causality import reads
    >>> D = np.array([[1.0, 0, 0], [0.5, 1, 0], [1e-9, 0.3, 1]])
    >>> out = reads(D); out["future_influence_max"], round(out["past_unread"], 4)
    (0.0, 0.3333)
  """
  D = np.asarray(D_TS, np.float64)
  T = D.shape[-1]
  past = np.tril(np.ones((T, T), bool), -1)
  top = np.max(np.where(np.tril(np.ones((T, T), bool)), D, 0), axis=-1, keepdims=True)
  unread = (D < eps * top) & past
  return {"future_influence_max": float(np.where(np.triu(np.ones((T, T), bool), 1), D, 0).max()),
          "past_unread": float(unread.sum() / past.sum()), "past_pairs": int(past.sum())}


def window_reads(params, cfg: transformer.Config, tokens_BT) -> dict:
  """`reads` over windows `(B, T)`: the largest future influence, and the fraction of every
  window's earlier pairs unread in float32."""
  per = [reads(dependency(params, cfg, t, seed=b)) for b, t in enumerate(np.asarray(tokens_BT))]
  return {"future_influence_max": max(r["future_influence_max"] for r in per),
          "past_unread_f32": float(np.mean([r["past_unread"] for r in per]))}


def rank_figure(per_T: dict, heads: dict, seq_lens) -> dict:
  """`rank.png`, declared as data: the fraction of heads rank deficient in float32 and
  certified full rank against T, and each head's float32 condition number at the largest T
  (`per_T`: `{arm: {metric: per seed}}`, `heads`: `{arm: per-head arrays}` of `causal-mask`)."""
  # init and trained are both certified full rank at every T: big hollow markers for init,
  # small filled ones for trained, so neither series hides the other.
  lines = [{"x": list(seq_lens), "y": [float(np.mean(per_T[arm][f"{metric}_T{T}"]))
                                       for T in seq_lens],
            "marker": marker, "label": f"{arm}: {label}", **style}
           for arm, style in (("init", {"ls": "--", "ms": 11, "mfc": "none", "mew": 1.8,
                                        "lw": 2.4}),
                              ("trained", {"ls": "-", "ms": 5, "lw": 1.2}))
           for metric, label, marker in (("deficient_f32", "float32 rank < T", "o"),
                                         ("full_rank_exact", "certified full rank (float64)",
                                          "s"))]
  T = seq_lens[-1]
  rank = {"lines": lines, "xlabel": "sequence length T (tokens)", "ylabel": "fraction of heads",
          "ylim": [-0.05, 1.1], "title": "exactly invertible, numerically deficient",
          "xticks": list(seq_lens), "xticklabels": [str(t) for t in seq_lens], "legend": 7}
  cond = {"hists": [{"values": np.minimum(heads[arm]["log10_cond_f32"], 12).tolist(), "bins": 30,
                     "alpha": 0.6, "label": arm} for arm in ("init", "trained")],
          "vlines": [{"x": float(-np.log10(T * np.finfo(np.float32).eps)), "color": "k",
                      "style": ":", "label": "float32 rank threshold 1/(T·eps)"}],
          "xlabel": "log10 condition number of A (float32; singular shown at 12)",
          "ylabel": "heads", "title": f"conditioning per head, T={T}", "legend": 7}
  return {"name": "rank.png", "size": [10, 3.6], "panels": [rank, cond]}
