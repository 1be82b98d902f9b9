"""KV-cache compression, measured: loss with the latent cache and the bytes it really takes.

`calibrate` fixes, once per model and calibration text, what calibration decides: the per-head
PCA bases of the cached keys and values (`analysis.kv`) and the loss-aware allocation's
sensitivity table (`kv.loss_cost`). `compression` turns it into a `transformer.latent`
compression for any target ratio, allocation and coefficient width (the same arithmetic as
`kv.compress`, which recomputes the table on every call), and `evaluate` prefills evaluation
text into that latent cache and reports the loss read through it and the ratio measured from
the cache arrays' bytes against a 16-bit K/V cache. `evaluate_compressed` is the one-call form
(`kv.compress` then `evaluate`; the `eval --kv-ratio` numbers). `evaluate_kivi` is the
plain-quantization baseline (KIVI-style: keys per channel over groups of tokens, values per
token) with its bytes measured the same way; `rank_vs_context` asks whether the rank holding
99% of the key energy grows with context length.

Example:
  >>> import jax, transformer
  >>> from experiments.lab import kvcompress
  >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
  >>> tokens = jax.random.randint(jax.random.key(1), (4, 33), 0, 256)
  >>> out = kvcompress.evaluate_compressed(params, cfg, tokens, kv_ratio=8, kv_alloc="uniform",
  ...                                      kv_bits=16, calibration_tokens=tokens)
  >>> out["kv_compression"]
  8.0
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from analysis import kv
from transformer import latent

_nll = transformer.next_token_nll


@functools.partial(jax.jit, static_argnums=1)
def _full_nll(params, cfg, tokens_BT1):
  return _nll(transformer.Transformer(cfg).apply(
      {"params": transformer.model.param_tree(params)}, tokens_BT1[:, :-1]), tokens_BT1)


@functools.partial(jax.jit, static_argnums=1)
def _latent_nll(params, cfg, comp, tokens_BT1):
  B, T = tokens_BT1.shape[0], tokens_BT1.shape[1] - 1
  cache = latent.init_cache(cfg, comp, B, T)
  logits, cache = latent.forward(params, cfg, tokens_BT1[:, :-1], comp, cache=cache)
  return _nll(logits, tokens_BT1), cache


def _batches(tokens_BT1, batch_size):
  tokens_BT1 = np.asarray(tokens_BT1)
  for i in range(0, tokens_BT1.shape[0], batch_size):
    yield jnp.asarray(tokens_BT1[i:i + batch_size])


def full_nll(params, cfg: transformer.Config, tokens, batch_size: int = 16) -> np.ndarray:
  """`(B, T)` next-token losses of the uncompressed model on `(B, T+1)` tokens."""
  return np.concatenate([np.asarray(_full_nll(params, cfg, b))
                         for b in _batches(tokens, batch_size)])


# --------------------------------------------------------------------------- calibration


@dataclasses.dataclass(frozen=True)
class Calibration:
  """What calibration text fixes, computed once and reused for every ratio and allocation.

  Attributes:
    key_basis: `(L, K, Dh, Dh)` PCA bases of the cached keys (columns by descending energy).
    value_basis: the same for the values.
    key_energy: `(L, K, Dh)` the key energy along each basis direction.
    value_energy: the same for the values.
    cost: `kv.loss_cost`'s `(2·L·K, Dh+1)` sensitivity table, or None (no loss-aware
      allocation).
    tokens: `(B, T+1)` the calibration text (the quantization steps are fitted on it).
    pre_rope: whether the key bases are those of the keys before RoPE (`kv.compress`'s default
      for RoPE models: the latent cache stores unrotated keys and rotates what it rebuilds).
  """

  key_basis: jax.Array
  value_basis: jax.Array
  key_energy: np.ndarray
  value_energy: np.ndarray
  cost: np.ndarray | None
  tokens: np.ndarray
  pre_rope: bool = False


def calibrate(params, cfg: transformer.Config, calibration_tokens, *, grid: int | None = 8,
              cost_windows: int | None = None, loss_aware: bool = True,
              pre_rope: bool | None = None) -> Calibration:
  """PCA bases from all of `calibration_tokens`, the loss table from its first `cost_windows`.

  Args:
    params: model params.
    cfg: model config.
    calibration_tokens: `(B, T+1)` calibration text, disjoint from any evaluated text.
    grid: ranks per head measured by `kv.loss_cost`.
    cost_windows: calibration windows the loss table is measured on (None: all); the table
      costs `2·L·K·grid` forward passes, so this is the knob of its run time.
    loss_aware: measure the loss table (needed by `alloc="loss"`).
    pre_rope: compress the keys before RoPE (`kv.compress`'s `pre_rope`); None, the default,
      does so for RoPE models, as `kv.compress` does. False keeps the rotated keys, whose
      energy the rotation spreads over every pair of coordinates: far more rank for the same
      error.

  Returns:
    A `Calibration`.
  """
  tokens = np.asarray(calibration_tokens)
  pre_rope = cfg.positions == "rope" if pre_rope is None else bool(pre_rope)
  mk, mv = kv.kv_moments(params, cfg, tokens[:, :-1], pre_rope=pre_rope)
  (kb, ke), (vb, ve) = kv.pca_bases(mk), kv.pca_bases(mv)
  cost = None
  if loss_aware:
    full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
    comp = latent.make_compression(kb, vb, full, full, 32, pre_rope=pre_rope)
    cost = kv.loss_cost(params, cfg, comp, jnp.asarray(tokens[:cost_windows]), grid)
  return Calibration(kb, vb, ke, ve, cost, tokens, pre_rope)


def compression(params, cfg: transformer.Config, cal: Calibration, kv_ratio: float,
                kv_alloc: str = "uniform", kv_bits: int = 16) -> latent.Compression:
  """The latent compression of `kv.compress(..., kv_ratio, kv_alloc, kv_bits)` from `cal`.

  Example:
    >>> import jax, transformer
    >>> from experiments.lab import kvcompress
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (2, 17), 0, 256)
    >>> cal = kvcompress.calibrate(params, cfg, tokens, loss_aware=False)
    >>> kvcompress.compression(params, cfg, cal, 8).key_ranks[0]
    (2, 2, 2, 2)
  """
  budget = kv.coefficient_budget(cfg, kv_ratio, kv_bits)
  if kv_alloc == "loss" and cal.cost is None:
    raise ValueError("compression: kv_alloc='loss' needs a loss table. Fix: "
                     "calibrate(..., loss_aware=True).")
  kr, vr = kv.allocate(cfg, budget, kv_alloc, energies=(cal.key_energy, cal.value_energy),
                       cost=cal.cost)
  kb, vb, pre = cal.key_basis, cal.value_basis, cal.pre_rope
  if kv_bits < 16:
    ks, vs = kv.calibrate_steps(
        params, cfg, latent.make_compression(kb, vb, kr, vr, 32, pre_rope=pre),
        cal.tokens[:, :-1], kv_bits)
    return latent.make_compression(kb, vb, kr, vr, kv_bits, ks, vs, pre_rope=pre)
  return latent.make_compression(kb, vb, kr, vr, kv_bits, pre_rope=pre)


def evaluate(params, cfg: transformer.Config, comp: latent.Compression, tokens, *,
             nll_full=None, batch_size: int = 16) -> dict:
  """Loss read through `comp`'s latent cache on `(B, T+1)` tokens, and the ratio it measures.

  Args:
    params: model params.
    cfg: model config.
    comp: the compression (bases, ranks, bits).
    tokens: `(B, T+1)` evaluation text.
    nll_full: `full_nll` of the same tokens, if already computed.
    batch_size: sequences per forward pass.

  Returns:
    `{"loss", "loss_full", "loss_rise" (relative), "kv_compression" (measured), "kv_bits",
    "coefficients_per_token", "basis_bytes", "payoff_tokens", "key_ranks", "value_ranks"}`.
  """
  nll, ratio = [], None
  for batch in _batches(tokens, batch_size):
    n, cache = _latent_nll(params, cfg, comp, batch)
    nll.append(np.asarray(n))
    ratio = latent.compression_ratio(cfg, cache)
  if nll_full is None:
    nll_full = full_nll(params, cfg, tokens, batch_size)
  loss, loss_full = float(np.concatenate(nll).mean()), float(np.mean(nll_full))
  return {
      "loss": loss, "loss_full": loss_full, "loss_rise": loss / loss_full - 1,
      "kv_compression": ratio, "kv_bits": comp.bits,
      "coefficients_per_token": sum(map(sum, comp.key_ranks)) + sum(map(sum, comp.value_ranks)),
      "basis_bytes": latent.basis_bytes(comp), "payoff_tokens": latent.payoff_length(cfg, comp),
      "key_ranks": [list(r) for r in comp.key_ranks],
      "value_ranks": [list(r) for r in comp.value_ranks],
  }


def evaluate_compressed(params, cfg: transformer.Config, tokens, *, kv_ratio: float,
                        kv_alloc: str = "uniform", kv_bits: int = 16, calibration_tokens=None,
                        source: str = "data", batch_size: int = 16, grid: int | None = 8) -> dict:
  """Loss with a compressed (latent) KV cache and the compression ratio it measures.

  Args:
    params: model params.
    cfg: model config.
    tokens: `(B, T+1)` evaluation text (held out from the calibration text).
    kv_ratio: target for the whole measured ratio, rank and bits together (`32` with
      `kv_bits=4` is 4-bit coefficients at 8× fewer dimensions).
    kv_alloc: `uniform`, `greedy` or `loss`.
    kv_bits: 16 (float16 coefficients), 8, 4 or 2 (packed codes), or 32.
    calibration_tokens: `(B', T'+1)` calibration text; required unless `source="weights"`,
      `kv_alloc` is not `loss` and `kv_bits >= 16`.
    source: `data` (PCA of the cached keys and values) or `weights` (SVD of W_K, W_V).
    batch_size: sequences per forward pass.
    grid: ranks measured per head by the loss-aware allocation.

  Returns:
    `evaluate`'s dict with `"kv_ratio"` (target), `"kv_alloc"` and `"source"`.
  """
  comp = kv.compress(params, cfg, calibration_tokens, kv_ratio, kv_alloc, kv_bits,
                     source=source, grid=grid)
  return {**evaluate(params, cfg, comp, tokens, batch_size=batch_size),
          "kv_ratio": float(kv_ratio), "kv_alloc": kv_alloc, "source": source}


# ------------------------------------------------------------------------- KIVI baseline


def kivi_quantize(x_BTKDh, bits: int, axis: str, group: int = 32):
  """Asymmetric `bits`-bit quantization of keys or values as KIVI stores them.

  `axis="channel"` (keys): one min and scale per channel over each group of `group` tokens;
  `axis="token"` (values): one min and scale per token and head over its `Dh` channels. Codes
  are packed into `uint8` along `Dh`; min and scale are float16.

  Returns:
    `(dequantized, stored)`: the values attention reads, and the list of stored arrays
    (their `nbytes` is the cost).

  References:
    Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache" (2024).
  """
  if bits not in (8, 4, 2):
    raise ValueError(f"kivi_quantize: bits={bits} must be 8, 4 or 2.")
  B, T, K, dh = x_BTKDh.shape
  x = x_BTKDh.astype(jnp.float32)
  if axis == "channel":
    pad = -T % group
    xg = jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0)), mode="edge")
    xg = xg.reshape(B, -1, group, K, dh)
    lo, hi = xg.min(2, keepdims=True), xg.max(2, keepdims=True)
  elif axis == "token":
    xg = x
    lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
  else:
    raise ValueError(f"kivi_quantize: axis={axis!r} must be 'channel' or 'token'.")
  lo, hi = lo.astype(jnp.float16).astype(jnp.float32), hi.astype(jnp.float32)
  scale = (jnp.maximum(hi - lo, 1e-8) / (2**bits - 1)).astype(jnp.float16).astype(jnp.float32)
  code = jnp.clip(jnp.round((xg - lo) / scale), 0, 2**bits - 1)
  deq = (code * scale + lo).reshape(xg.shape)
  if axis == "channel":
    deq = deq.reshape(B, -1, K, dh)[:, :T]
    code = code.reshape(B, -1, K, dh)[:, :T]
  stored = [latent.pack(code.astype(jnp.int32), bits), lo.astype(jnp.float16),
            scale.astype(jnp.float16)]
  return deq.astype(x_BTKDh.dtype), stored


def evaluate_kivi(params, cfg: transformer.Config, tokens, bits: int, *, group: int = 32,
                  nll_full=None, batch_size: int = 16) -> dict:
  """Loss with K and V quantized KIVI-style to `bits`, and the ratio measured from its arrays.

  The whole sequence is quantized (KIVI also keeps the newest tokens in full precision; that
  residual window is left out, which favours neither side at these lengths by more than its
  size).

  Returns:
    `{"loss", "loss_full", "loss_rise", "kv_compression", "kv_bits"}`.
  """
  def kv_fn(l, k, v):
    del l
    return kivi_quantize(k, bits, "channel", group)[0], kivi_quantize(v, bits, "token", group)[0]

  nll = jax.jit(lambda p, t: _nll(latent.forward(p, cfg, t[:, :-1], kv_fn=kv_fn), t))
  losses, ratio = [], None
  for batch in _batches(tokens, batch_size):
    losses.append(np.asarray(nll(params, batch)))
    B, T = batch.shape[0], batch.shape[1] - 1
    x = jax.ShapeDtypeStruct((B, T, cfg.n_kv_heads, cfg.d_head), cfg.jnp_dtype)
    stored = [jax.eval_shape(lambda x, a=a: kivi_quantize(x, bits, a, group)[1], x)
              for a in ("channel", "token")]
    per_layer = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(stored))
    ratio = latent.full_cache_bytes(cfg, B, T) / (cfg.n_layers * per_layer)
  if nll_full is None:
    nll_full = full_nll(params, cfg, tokens, batch_size)
  loss, loss_full = float(np.concatenate(losses).mean()), float(np.mean(nll_full))
  return {"loss": loss, "loss_full": loss_full, "loss_rise": loss / loss_full - 1,
          "kv_compression": ratio, "kv_bits": bits}


def rank_vs_context(params, cfg: transformer.Config, tokens, lengths, fraction: float = 0.99,
                    pre_rope: bool | None = None):
  """Per context length `T`, the rank holding `fraction` of the cached key (and value) energy,
  from the keys of the first `T` positions: mean and max over layers and heads.

  For a RoPE model the keys are those before the rotation unless `pre_rope=False` (the keys
  `calibrate` compresses by default; the rotation alone spreads a key over more directions as
  `T` grows).

  The keys and values are captured once at the longest length: in a causal model the first
  `T` positions' keys do not depend on later tokens, so each prefix's moments are sums over
  the first `T` positions of the same arrays.

  Returns:
    `{T: {"key_mean", "key_max", "value_mean", "value_max"}}`.
  """
  tokens = np.asarray(tokens)
  if max(lengths) > tokens.shape[1]:
    raise ValueError(f"rank_vs_context: length {max(lengths)} exceeds the tokens' "
                     f"{tokens.shape[1]}.")
  pre_rope = cfg.positions == "rope" if pre_rope is None else bool(pre_rope)
  capture = jax.jit(functools.partial(kv.capture_kv, pre_rope=pre_rope), static_argnums=1)
  k, v = (np.asarray(a, np.float64) for a in capture(params, cfg, tokens[:, :max(lengths)]))
  out = {}
  for T in lengths:
    mk, mv = (np.einsum("lbtkd,lbtke->lkde", x[:, :, :T], x[:, :, :T]) for x in (k, v))
    rk, rv = kv.energy_rank(kv.pca_bases(mk)[1], fraction), kv.energy_rank(
        kv.pca_bases(mv)[1], fraction)
    out[int(T)] = {"key_mean": float(rk.mean()), "key_max": int(rk.max()),
                   "value_mean": float(rv.mean()), "value_max": int(rv.max())}
  return out
