"""Ranks of the KV cache: the byte budget, its allocation across heads, and rank per input.

Ranks are allocated for a target compression ratio:

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
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from analysis.kv_bases import _check_tokens
from transformer import latent
from transformer.loss import next_token_nll

Alloc = Literal["uniform", "greedy", "loss"]
ALLOCS = ("uniform", "greedy", "loss")


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
  return next_token_nll(logits, tokens_BT1).mean(-1)


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
