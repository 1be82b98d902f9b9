"""Rank of the KV cache: calibration bases, rank allocation, quantization, rank per input.

The mechanism (the latent cache, folded bases) is `transformer.latent`; this module decides
what goes into it. Bases per layer and KV head are the eigenvectors of the second moment of
the keys and of the values on calibration text, `M = Σ_t k_t k_tᵀ` (`pca_bases`; uncentered,
because the cache reconstructs `k`, not `k - mean`), or data-free from `W_K`, `W_V` alone
(`weight_bases`). For a RoPE model the keys are those *before* the rotation by default
(`compress(..., pre_rope=None)`): a rotation spreads a key's energy over the pairs of
dimensions it turns, so the raw keys need a lower rank for the same energy, and the cache
rotates what it rebuilds (`transformer.latent`, `Compression.pre_rope`). `calibrate` then
fits the down and up projections by gradient descent to match the uncompressed model's
next-token distribution on calibration text, starting from these bases. Ranks are allocated
for a target compression ratio:

* `uniform`: the same rank for every head, keys and values (the budget's remainder adds one
  dimension to the first heads, so all methods spend the same bytes);
* `greedy`: remove, one dimension at a time, the one whose loss of captured energy (as a
  fraction of its head's energy) is smallest;
* `loss`: the same greedy removal, but the cost of a head at rank `r` is the calibration loss
  increase when that head alone is cut to rank `r` (a sensitivity table, as Palu's search, and
  additive across heads by assumption).

The ratio counts bytes: `2·L·K·Dh·16` bits per token for a 16-bit cache over the coefficients'
bits (`coefficient_budget`). Rank per input uses the nested bases: `rank_losses` gives each
sequence's loss at each uniform rank, `oracle_rank` the smallest rank within 1% of full rank
(reading the whole sequence), and `prefix_rank` the same rule applied to the prefix only —
causal, so the rank can be fixed at prefill.

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
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

import transformer
from transformer import latent
from transformer.names import split_heads

Alloc = Literal["uniform", "greedy", "loss"]
ALLOCS = ("uniform", "greedy", "loss")


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


# ----------------------------------------------------------------------------- allocation


def coefficient_budget(cfg: transformer.Config, ratio: float, bits: int = 16) -> int:
  """Most coefficients per token (keys and values, all layers) that keep the measured ratio
  `≥ ratio` against a 16-bit K/V cache, allowing for the partial last byte of packed codes.

  Example:
    >>> import transformer
    >>> coefficient_budget(transformer.preset("tiny"), 8)  # 2·L·K·Dh = 256 at 16 bits / 8
    32
  """
  if not ratio >= 1:
    raise ValueError(f"kv ratio={ratio} must be >= 1 (bytes of a 16-bit cache over ours). "
                     "Fix: pass e.g. --kv-ratio 8.")
  if bits not in latent.BITS:
    raise ValueError(f"kv bits={bits} must be one of {latent.BITS}.")
  full_bits = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * 16
  slack = 2 * cfg.n_layers * (8 - bits) if bits < 8 else 0
  budget = int(np.floor((full_bits / ratio - slack) / bits + 1e-9))
  least = 2 * cfg.n_layers * cfg.n_kv_heads
  if budget > least * cfg.d_head:
    raise ValueError(f"kv ratio={ratio} at {bits} bits asks for rank "
                     f"{budget / least:.3g} per head, above the head width {cfg.d_head}. "
                     f"Fix: a ratio >= {16 / bits:g} at {bits} bits (or more bits).")
  if budget < least:
    raise ValueError(f"kv ratio={ratio} at {bits} bits leaves {budget} coefficients per token, "
                     f"fewer than one per head ({least}). Fix: a smaller ratio or fewer bits.")
  return budget


def greedy_ranks(cost, budget: int):
  """Ranks minimising the summed cost under `Σ ranks ≤ budget`, by greedy removal.

  Args:
    cost: `(N, Dh + 1)`: `cost[i, r]` of keeping rank `r` in head `i` (made non-increasing in
      `r` here; `cost[i, Dh]` is the full-rank cost).
    budget: total rank allowed, at least `N`.

  Returns:
    `(N,)` int ranks in `[1, Dh]`: starting from full rank, the dimension whose removal costs
    least is removed until the budget holds.

  Example:
    >>> greedy_ranks(np.array([[9., 4, 1, 0], [9., 1, .5, 0]]), 3).tolist()
    [2, 1]
  """
  c = np.maximum.accumulate(np.asarray(cost, np.float64)[:, ::-1], axis=1)[:, ::-1]
  N, dh = c.shape[0], c.shape[1] - 1
  r = np.full(N, dh)
  idx = np.arange(N)
  while r.sum() > budget:
    step = np.where(r > 1, c[idx, np.maximum(r - 1, 0)] - c[idx, r], np.inf)
    r[int(np.argmin(step))] -= 1
  return r


def _split(r, cfg: transformer.Config):
  half = cfg.n_layers * cfg.n_kv_heads
  shape = (cfg.n_layers, cfg.n_kv_heads)
  return r[:half].reshape(shape), r[half:].reshape(shape)


def energy_cost(key_energies, value_energies):
  """`(2·L·K, Dh+1)` cost: fraction of each head's energy lost at rank `r` (keys, then values)."""
  e = np.concatenate([np.asarray(key_energies).reshape(-1, key_energies.shape[-1]),
                      np.asarray(value_energies).reshape(-1, value_energies.shape[-1])])
  kept = np.cumsum(e, -1) / np.maximum(e.sum(-1, keepdims=True), 1e-300)
  return 1.0 - np.concatenate([np.zeros((e.shape[0], 1)), kept], axis=1)


@functools.partial(jax.jit, static_argnums=(1,))
def _loss_at(params, cfg, comp, tokens_BT1, key_rank, value_rank):
  logits = latent.forward(params, cfg, tokens_BT1[:, :-1], comp, key_rank=key_rank,
                          value_rank=value_rank)
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens_BT1[:, 1:]).mean(-1)


def loss_cost(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT1,
              grid: int | None = None):
  """`(2·L·K, Dh+1)` sensitivity: calibration loss rise when one head alone is cut to rank `r`.

  Args:
    params: model params.
    cfg: its config.
    comp: holds the full bases (ranks are ignored).
    tokens_BT1: calibration tokens; the model reads `[:, :-1]` and predicts `[:, 1:]`.
    grid: measure only this many ranks per head (evenly spaced, always 1 and Dh) and
      interpolate linearly between them; None measures every rank.

  Returns:
    The cost table for `greedy_ranks` (keys' heads first, then values').
  """
  tokens_BT1 = jnp.asarray(_check_tokens(tokens_BT1, "loss_cost"))
  L, K, dh = cfg.n_layers, cfg.n_kv_heads, cfg.d_head
  full = np.full((L, K), dh)
  base = float(_loss_at(params, cfg, comp, tokens_BT1, full, full).mean())
  rs = np.arange(1, dh + 1) if grid is None else np.unique(np.linspace(1, dh, grid).round())
  cost = np.zeros((2 * L * K, dh + 1))
  for i in range(2 * L * K):
    kind, head = divmod(i, L * K)
    measured = []
    for r in rs:
      ranks = full.copy().reshape(-1)
      ranks[head] = r
      kr, vr = (ranks.reshape(L, K), full) if kind == 0 else (full, ranks.reshape(L, K))
      measured.append(float(_loss_at(params, cfg, comp, tokens_BT1, kr, vr).mean()) - base)
    cost[i, 1:] = np.interp(np.arange(1, dh + 1), rs, measured)
    cost[i, 0] = cost[i, 1]
  return cost


def allocate(cfg: transformer.Config, budget: int, alloc: Alloc, *, energies=None, cost=None):
  """Key and value ranks `(L, K)` each, `Σ ≤ budget`, by `uniform`, `greedy` or `loss`.

  Args:
    cfg: model config.
    budget: coefficients per token (`coefficient_budget`).
    alloc: the method.
    energies: `(key_energies, value_energies)`, `(L, K, Dh)` each, for `greedy`.
    cost: the table of `loss_cost`, for `loss`.

  Example:
    >>> import transformer
    >>> kr, vr = allocate(transformer.preset("tiny"), 34, "uniform")
    >>> kr.tolist(), vr.tolist()
    ([[3, 3, 2, 2], [2, 2, 2, 2]], [[2, 2, 2, 2], [2, 2, 2, 2]])
  """
  n = 2 * cfg.n_layers * cfg.n_kv_heads
  if alloc == "uniform":  # equal ranks; the remainder adds one to the first heads
    r = np.minimum(cfg.d_head, budget // n + (np.arange(n) < budget % n))
    return _split(r, cfg)
  if alloc == "greedy":
    if energies is None:
      raise ValueError("allocate: alloc='greedy' needs energies=(key, value).")
    return _split(greedy_ranks(energy_cost(*energies), budget), cfg)
  if alloc == "loss":
    if cost is None:
      raise ValueError("allocate: alloc='loss' needs cost= (from loss_cost).")
    return _split(greedy_ranks(cost, budget), cfg)
  raise ValueError(f"allocate: alloc={alloc!r} is unknown. Fix: use one of {ALLOCS}.")


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


# ------------------------------------------------------------------------ rank per input


def rank_losses(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT1, ranks):
  """`(len(ranks), B)`: each sequence's mean loss with every head at uniform rank `r`.

  The bases are nested, so rank `r` keeps the first `r` directions of one basis per head.
  """
  L, K = cfg.n_layers, cfg.n_kv_heads
  tokens_BT1 = jnp.asarray(tokens_BT1)
  out = []
  for r in ranks:
    if not 1 <= r <= cfg.d_head:
      raise ValueError(f"rank_losses: rank {r} must lie in [1, {cfg.d_head}] (the head width).")
    full = np.full((L, K), r)
    out.append(np.asarray(_loss_at(params, cfg, comp, tokens_BT1, full, full)))
  return np.stack(out)


def oracle_rank(losses_NB, ranks, tol: float = 0.01):
  """Per sequence, the smallest rank whose loss is within `tol` (relative) of the full-rank loss.

  Args:
    losses_NB: `rank_losses` with `ranks` increasing and its last entry the head width.
    ranks: the ranks of the rows.
    tol: 0.01 is "within 1%".

  Example:
    >>> oracle_rank(np.array([[3.0, 2.0], [2.0, 2.0], [1.99, 1.5]]), [2, 4, 16]).tolist()
    [4, 16]
  """
  losses_NB = np.asarray(losses_NB)
  ok = losses_NB <= losses_NB[-1] * (1 + tol)
  return np.asarray(ranks)[np.argmax(ok, axis=0)]


def prefix_rank(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT,
                prefix_len: int, ranks, tol: float = 0.01):
  """The causal policy: each sequence's rank from its first `prefix_len` tokens only.

  The oracle's rule (smallest rank within `tol` of full-rank loss) applied to the prefix's
  own next-token losses; the tokens after the prefix are sliced away before anything is
  computed, so the rank can be fixed at prefill.
  """
  if not 2 <= prefix_len <= tokens_BT.shape[1]:
    raise ValueError(f"prefix_rank: prefix_len={prefix_len} must lie in [2, {tokens_BT.shape[1]}].")
  prefix = jnp.asarray(tokens_BT)[:, :prefix_len]
  return oracle_rank(rank_losses(params, cfg, comp, prefix, ranks), ranks, tol)


def sequence_losses(params, cfg: transformer.Config, comp: latent.Compression, tokens_BT1,
                    rank_B):
  """`(B,)` each sequence's mean loss with its own uniform rank `rank_B[b]` (nested bases)."""
  r = jnp.broadcast_to(jnp.asarray(rank_B)[:, None, None],
                       (len(rank_B), cfg.n_layers, cfg.n_kv_heads))
  return np.asarray(_loss_at(params, cfg, comp, jnp.asarray(tokens_BT1), r, r))


def floats_per_token(cfg: transformer.Config, rank_B) -> float:
  """The budget of a rank choice: average coefficients stored per token (keys and values)."""
  return float(2 * cfg.n_layers * cfg.n_kv_heads * np.mean(rank_B))
