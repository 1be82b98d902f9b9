"""Bases of the KV cache: keys and values captured on calibration text, their second moments,
and the PCA or data-free bases that `analysis.kv` compresses onto.

Bases per layer and KV head are the eigenvectors of the second moment of
the keys and of the values on calibration text, `M = Σ_t k_t k_tᵀ` (`pca_bases`; uncentered,
because the cache reconstructs `k`, not `k - mean`), or data-free from `W_K`, `W_V` alone
(`weight_bases`). For a RoPE model the keys are those *before* the rotation by default
(`compress(..., pre_rope=None)`): a rotation spreads a key's energy over the pairs of
dimensions it turns, so the raw keys need a lower rank for the same energy, and the cache
rotates what it rebuilds (`transformer.latent`, `Compression.pre_rope`). Each basis comes with
the energy its directions capture (`energy_rank`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from transformer.names import split_heads


def _check_tokens(tokens, what: str):
  if tokens is None or np.asarray(tokens).size == 0:
    raise ValueError(f"{what}: calibration tokens are missing. Fix: pass calibration text "
                     "(e.g. --calibration PATH) or use the data-free weight bases.")
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or tokens.shape[1] < 2:
    raise ValueError(f"{what}: calibration tokens need shape (B, T) with T >= 2; got "
                     f"{tokens.shape}.")
  return tokens


def capture_kv(params, cfg: transformer.Config, tokens_BT, *, pre_rope: bool = False):
  """Keys and values of every layer, `(L, B, T, K, Dh)` each: the keys as the model caches them
  (post-RoPE), or before the rotation with `pre_rope` (the sown keys turned back, `R_{-p}`).

  Example:
    >>> import jax, transformer
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> capture_kv(params, cfg, jax.numpy.zeros((1, 5), int))[0].shape
    (2, 1, 5, 4, 16)
  """
  _, state = transformer.Transformer(cfg).apply(
      {"params": transformer.model.param_tree(params)}, tokens_BT, mutable=["intermediates"])
  attn = state["intermediates"]["blocks"]["attn"]
  k, v = attn["k"][0], attn["v"][0]
  if pre_rope and cfg.positions == "rope":  # R_p is orthogonal: R_{-p} R_p k = k
    L, B, T, K, dh = k.shape
    pos = jnp.broadcast_to(-jnp.arange(T), (L * B, T))  # the model's default positions 0..T-1
    k = transformer.rope(k.reshape(L * B, T, K, dh), pos, cfg.rope_theta).reshape(k.shape)
  return k, v


def kv_moments(params, cfg: transformer.Config, tokens_BT, batch_size: int = 16, *,
               pre_rope: bool = False):
  """Second moments `Σ_{b,t} k kᵀ` per layer and KV head, float64 `(L, K, Dh, Dh)` for K and V
  (keys post-RoPE, or before the rotation with `pre_rope`)."""
  tokens_BT = _check_tokens(tokens_BT, "kv_moments")
  capture = jax.jit(functools.partial(capture_kv, pre_rope=pre_rope), static_argnums=1)
  mk = mv = 0.0
  for i in range(0, tokens_BT.shape[0], batch_size):
    k, v = (np.asarray(a, np.float64) for a in capture(params, cfg, tokens_BT[i:i + batch_size]))
    mk = mk + np.einsum("lbtkd,lbtke->lkde", k, k)
    mv = mv + np.einsum("lbtkd,lbtke->lkde", v, v)
  return mk, mv


def pca_bases(moments_LKDhDh):
  """Eigenvectors of each second moment by descending eigenvalue: `(bases, energies)`.

  Returns:
    `bases (L, K, Dh, Dh)` float32 with orthonormal columns, `energies (L, K, Dh)` float64
    (the eigenvalues: energy captured by each direction).

  Example:
    >>> import numpy as np
    >>> b, e = pca_bases(np.diag([1.0, 3.0, 2.0])[None, None])
    >>> e[0, 0].tolist(), np.abs(b[0, 0, :, 0]).tolist()
    ([3.0, 2.0, 1.0], [0.0, 1.0, 0.0])
  """
  w, V = np.linalg.eigh(np.asarray(moments_LKDhDh, np.float64))
  order = np.argsort(-w, axis=-1)
  w = np.take_along_axis(w, order, -1)
  V = np.take_along_axis(V, order[..., None, :], -1)
  return jnp.asarray(V, jnp.float32), np.maximum(w, 0.0)


def weight_bases(params, cfg: transformer.Config, n_positions: int = 64, *,
                 pre_rope: bool = False):
  """Data-free bases from `W_K` (`W_Q` when tied), `W_V`: `(key_bases, key_energies,
  value_bases, value_energies)`.

  Treating the layer input as white noise, keys have second moment `W_Kᵀ W_K` per head. With
  RoPE the cached key at position `p` is `R_p k`, so unless `pre_rope` the key moment is
  averaged over the rotations of `n_positions` positions spread over `[0, max_len)`:
  `M = mean_p R_p W_Kᵀ W_K R_pᵀ`. Biases are added as one more input direction.
  """
  p = transformer.model.param_tree(params)["blocks"]["attn"]
  L = p["w_v"].shape[0]
  K, dh = cfg.n_kv_heads, cfg.d_head

  def rows(name):  # (L, K, D(+1), Dh): every input direction's image in each head
    w = np.asarray(p[f"w_{name}"], np.float64)
    if cfg.use_bias:
      w = np.concatenate([w, np.asarray(p[f"b_{name}"], np.float64)[:, None]], axis=1)
    return split_heads(w, K, "columns")

  wk, wv = rows("k" if "w_k" in p else "q"), rows("v")  # `Config.qk_tied`: K = X W_Q
  if cfg.positions == "rope" and not pre_rope:
    pos = np.linspace(0, cfg.max_len - 1, n_positions).round()
    mk = 0.0
    for p_ in pos:
      pos_BT = jnp.full((L * K, wk.shape[2]), p_)
      r = np.asarray(transformer.rope(jnp.asarray(wk.reshape(L * K, -1, 1, dh), jnp.float32),
                                      pos_BT, cfg.rope_theta), np.float64).reshape(wk.shape)
      mk = mk + np.einsum("lkid,lkie->lkde", r, r) / len(pos)
  else:
    mk = np.einsum("lkid,lkie->lkde", wk, wk)
  mv = np.einsum("lkid,lkie->lkde", wv, wv)
  return (*pca_bases(mk), *pca_bases(mv))


def energy_rank(energies, fraction: float = 0.99):
  """Smallest rank whose leading directions hold `fraction` of the energy, per head.

  Example:
    >>> energy_rank(np.array([[8.0, 1.0, 1.0]]), 0.9).tolist()
    [2]
  """
  e = np.asarray(energies, np.float64)
  frac = np.cumsum(e, -1) / np.maximum(e.sum(-1, keepdims=True), 1e-300)
  return (frac < fraction - 1e-12).sum(-1) + 1

