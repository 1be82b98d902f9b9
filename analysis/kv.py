"""Rank of the KV cache: calibration bases, rank allocation, quantization, rank per input.

The mechanism (the latent cache, folded bases) is `transformer.latent`; this module decides
what goes into it. `compress` chains the steps: bases per layer and KV head from calibration
text or from the weights alone (`analysis.kv_bases`), ranks for a target compression ratio by
`uniform`, `greedy` or `loss` allocation (`analysis.kv_ranks`, which also holds rank per
input), and per-channel quantization steps (`calibrate_steps`). `calibrate` then fits the down
and up projections by gradient descent to match the uncompressed model's next-token
distribution on calibration text, starting from these bases. The names of `kv_bases` and
`kv_ranks` are re-exported here.

Example:
  >>> import jax, transformer
  >>> from analysis import kv
  >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
  >>> tokens = jax.random.randint(jax.random.key(1), (4, 33), 0, 256)
  >>> comp = kv.compress(params, cfg, tokens, ratio=4, alloc="greedy")
  >>> sum(map(sum, comp.key_ranks)) + sum(map(sum, comp.value_ranks))  # of 256 coefficients
  64
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import transformer
from analysis.kv_bases import (
    _check_tokens,
    capture_kv,
    energy_rank,
    kv_moments,
    pca_bases,
    weight_bases,
)
from analysis.kv_ranks import (
    ALLOCS,
    Alloc,
    allocate,
    coefficient_budget,
    energy_cost,
    floats_per_token,
    greedy_ranks,
    loss_cost,
    oracle_rank,
    prefix_rank,
    rank_losses,
    sequence_losses,
)
from transformer import latent

__all__ = ["ALLOCS", "Alloc", "allocate", "calibrate", "calibrate_steps", "capture_kv",
           "coefficient_budget", "compress", "energy_cost", "energy_rank", "floats_per_token",
           "greedy_ranks", "kv_moments", "loss_cost", "oracle_rank", "output_kl", "pca_bases",
           "prefix_rank", "rank_losses", "sequence_losses", "weight_bases"]


# ---------------------------------------------------------------------------- quantization


def calibrate_steps(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT,
                    bits: int, clips=(1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)):
  """Per-channel quantization steps of the coefficients at `comp`'s ranks, for `bits`.

  Each channel's clipping value is the fraction in `clips` of its calibration max `|c|` whose
  mid-rise quantizer (`2^bits` levels, step `clip / 2^(bits-1)`) has the least squared error.

  Returns:
    `(key_step, value_step)`: `L` float32 arrays `(R_l,)` each.
  """
  tokens_BT = _check_tokens(tokens_BT, "calibrate_steps")
  k, v = (np.asarray(a, np.float64)
          for a in capture_kv(params, cfg, tokens_BT, pre_rope=comp.pre_rope))
  half = 2 ** (bits - 1)

  def steps(x, basis, ranks):
    out = []
    for l in range(cfg.n_layers):
      P = np.asarray(latent.block_basis(basis[l], ranks[l]), np.float64)
      c = x[l].reshape(-1, P.shape[0]) @ P
      amax = np.maximum(np.abs(c).max(0), 1e-12)
      best, err = amax / half, np.full(c.shape[1], np.inf)
      for f in clips:
        s = f * amax / half
        q = (np.clip(np.floor(c / s), -half, half - 1) + 0.5) * s
        e = ((q - c) ** 2).sum(0)
        best, err = np.where(e < err, s, best), np.minimum(e, err)
      out.append(best.astype(np.float32))
    return tuple(out)

  return steps(k, comp.key_basis, comp.key_ranks), steps(v, comp.value_basis, comp.value_ranks)


def compress(params, cfg: transformer.Config, calibration_tokens, ratio: float,
             alloc: Alloc = "uniform", bits: int = 16, *, source: str = "data",
             grid: int | None = 8, pre_rope: bool | None = None) -> latent.Compression:
  """Bases, ranks and steps for a target measured ratio (rank and bits together).

  Args:
    params: model params.
    cfg: its config.
    calibration_tokens: `(B, T+1)` calibration text (needed unless `source="weights"` with
      `alloc` not `loss` and 16/32 bits).
    ratio: target ratio against a 16-bit K/V cache, `≥ 1`.
    alloc: `uniform`, `greedy` or `loss`.
    bits: coefficient storage, 32, 16, 8, 4 or 2.
    source: `data` (PCA of cached K, V) or `weights` (`weight_bases`).
    grid: ranks measured per head by `loss_cost`.
    pre_rope: compress the keys before RoPE and rotate what is rebuilt (`latent.Compression`);
      None (the default) does so for RoPE models. False keeps the post-RoPE placement, whose
      read rebuilds nothing but needs more rank for the same error.

  Returns:
    A `latent.Compression`.
  """
  if alloc not in ALLOCS:
    raise ValueError(f"compress: alloc={alloc!r} is unknown. Fix: use one of {ALLOCS}.")
  budget = coefficient_budget(cfg, ratio, bits)
  pre_rope = cfg.positions == "rope" if pre_rope is None else bool(pre_rope)
  needs_data = source == "data" or alloc == "loss" or bits < 16
  if needs_data:
    calibration_tokens = _check_tokens(calibration_tokens, "compress")
  if source == "data":
    mk, mv = kv_moments(params, cfg, calibration_tokens[:, :-1], pre_rope=pre_rope)
    (kb, ke), (vb, ve) = pca_bases(mk), pca_bases(mv)
  elif source == "weights":
    kb, ke, vb, ve = weight_bases(params, cfg, pre_rope=pre_rope)
  else:
    raise ValueError(f"compress: source={source!r} is unknown. Fix: 'data' or 'weights'.")
  full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
  comp = latent.make_compression(kb, vb, full, full, 32, pre_rope=pre_rope)
  cost = None
  if alloc == "loss":
    cost = loss_cost(params, cfg, comp, jnp.asarray(calibration_tokens), grid)
  kr, vr = allocate(cfg, budget, alloc, energies=(ke, ve), cost=cost)
  comp = latent.make_compression(kb, vb, kr, vr, 32, pre_rope=pre_rope)
  if bits < 16:
    ks, vs = calibrate_steps(params, cfg, comp, calibration_tokens[:, :-1], bits)
    return latent.make_compression(kb, vb, kr, vr, bits, ks, vs, pre_rope=pre_rope)
  return latent.make_compression(kb, vb, kr, vr, bits, pre_rope=pre_rope)


# ------------------------------------------------------------------ calibrated projections


def output_kl(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT):
  """Mean KL divergence, nats per token, of `comp`'s next-token distribution from the model's.

  .. math:: \\frac{1}{BT} \\sum_{b,t} \\mathrm{KL}\\big(p(\\cdot \\mid x_{\\le t})
     \\,\\|\\, \\hat p(\\cdot \\mid x_{\\le t})\\big)

  `p` is `Transformer(cfg)`, `p̂` the same model through `comp`'s latent cache (at `comp.bits`;
  0 at full rank and float32). Differentiable in `comp`'s arrays, and jit-able.

  Example:
    >>> import jax, transformer
    >>> from transformer import latent
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> comp = latent.weight_compression(params, cfg, rank=cfg.d_head)
    >>> bool(output_kl(params, cfg, comp, jax.numpy.zeros((1, 8), int)) < 1e-5)
    True
  """
  ref_BTV = jax.nn.log_softmax(transformer.Transformer(cfg).apply(
      {"params": transformer.model.param_tree(params)}, tokens_BT))
  got_BTV = jax.nn.log_softmax(latent.forward(params, cfg, tokens_BT, comp))
  ref_BTV = jax.lax.stop_gradient(ref_BTV)
  return (jnp.exp(ref_BTV) * (ref_BTV - got_BTV)).sum(-1).mean()


@functools.partial(jax.jit, static_argnums=(1,))
def _adam_step(params, cfg, floats, fit, state, tokens_BT, learning_rate):
  """One Adam step of `calibrate` on `output_kl` (compiled once per config and ranks)."""
  grads = jax.grad(lambda f: output_kl(params, cfg, floats.replace(**f), tokens_BT))(fit)
  updates, state = optax.adam(learning_rate).update(grads, state, fit)
  return optax.apply_updates(fit, updates), state


def calibrate(params, cfg: transformer.Config, comp: latent.Compression, calibration_tokens,
              steps: int, *, learning_rate: float = 3e-3, batch_size: int = 8
              ) -> latent.Compression:
  """Down and up projections fitted to the uncompressed model by Adam, from `comp`'s bases.

  .. math:: \\min_{D_k, U_k, D_v, U_v} \\; \\mathrm{KL}\\big(p \\,\\|\\,
     \\hat p_{D, U}\\big) \\text{ on calibration text (`output_kl`)}

  Each head's cache keeps `c = x D` and the attention reads `x̂ = c Uᵀ` (`latent.Compression`:
  `key_basis` is `D_k`, `key_up` is `U_k`); both start at `comp`'s bases (`D = U = P`, the
  SVD's orthogonal projection, which minimises the error of `x` itself, not of what the model
  does with it) and only the columns within `comp`'s ranks move. The fit runs in float32
  without quantization; for integer `bits` the steps are then measured again for the fitted
  `D` (`calibrate_steps`). Ranks, bits and `pre_rope` are kept.

  Args:
    params: model params.
    cfg: its config.
    comp: the starting compression (e.g. `compress`'s).
    calibration_tokens: `(B, T+1)` calibration windows; the model reads `[:, :-1]`. Score
      held-out text only: the fit has seen these.
    steps: Adam steps (0 returns `comp`); step `i` reads windows `i·batch_size, …` (cyclic).
    learning_rate: Adam's.
    batch_size: windows per step.

  Returns:
    A `latent.Compression` with `key_up`, `value_up` set.

  Example:
    >>> import jax, transformer
    >>> cfg = transformer.preset("tiny", d_model=32, n_heads=2, max_len=16)
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tokens = jax.random.randint(jax.random.key(1), (4, 9), 0, 256)
    >>> comp = calibrate(params, cfg, compress(params, cfg, tokens, 4), tokens, steps=2)
    >>> comp.key_up.shape, comp.key_ranks
    ((2, 2, 16, 16), ((4, 4), (4, 4)))

  References:
    Palu: Compressing KV-Cache with Low-Rank Projection (2024), for fitting the projections
    to the layer's output rather than to the keys and values themselves.
  """
  tokens = _check_tokens(calibration_tokens, "calibrate")[:, :-1]
  if steps < 0 or batch_size < 1:
    raise ValueError(f"calibrate: steps={steps} must be >= 0 and batch_size={batch_size} >= 1.")
  if steps == 0:
    return comp
  key_up, value_up = comp.ups()
  fit = {"key_basis": comp.key_basis, "key_up": key_up, "value_basis": comp.value_basis,
         "value_up": value_up}
  fit = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), fit)
  floats = comp.replace(bits=32, key_step=None, value_step=None)
  state = optax.adam(learning_rate).init(fit)
  n = tokens.shape[0]
  size = min(batch_size, n)
  for i in range(steps):
    rows = (i * size + np.arange(size)) % n
    fit, state = _adam_step(params, cfg, floats, fit, state, jnp.asarray(tokens[rows]),
                            jnp.float32(learning_rate))
  fitted = floats.replace(**fit)
  key_step = value_step = None
  if comp.bits < 16:
    key_step, value_step = calibrate_steps(params, cfg, fitted, tokens, comp.bits)
  return latent.make_compression(fit["key_basis"], fit["value_basis"], comp.key_ranks,
                                 comp.value_ranks, comp.bits, key_step, value_step,
                                 key_up=fit["key_up"], value_up=fit["value_up"],
                                 pre_rope=comp.pre_rope)

