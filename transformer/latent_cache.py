"""What a latent cache stores: the compression (bases, ranks, steps), the cache, quantized codes,
and their bytes.

The mechanism that reads it through the model is `transformer.latent`.

**Quantization.** With `bits` 8, 4 or 2 the coefficients are stored as unsigned codes packed
into `uint8` (two 4-bit or four 2-bit codes per byte): a symmetric mid-rise quantizer
(levels `(j + 1/2)·step`, `j ∈ [-2^(b-1), 2^(b-1))`) with one static step per coefficient
channel calibrated on calibration text (`Compression.key_step`);
`bits=16` stores `float16`, `bits=32` stores `float32` (exact).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from transformer.block import _lead
from transformer.config import Config

BITS = (32, 16, 8, 4, 2)


@struct.dataclass
class Compression:
  """Bases, ranks and quantization of a compressed KV cache.

  Attributes:
    key_basis: `(L, K, Dh, Dh)` per layer and KV head, the down projection `c = k D` (its
      columns orthonormal, by descending importance, unless fitted by `analysis.kv.calibrate`);
      only the first `key_ranks[l][k]` columns are used.
    value_basis: `(L, K, Dh, Dh)`, the same for values.
    key_ranks: `L` tuples of `K` ranks (static).
    value_ranks: `L` tuples of `K` ranks (static).
    bits: storage of the coefficients: 32, 16 (float), 8, 4 or 2 (integer codes).
    key_step: `L` arrays `(R_l,)`, the quantization step per key coefficient channel (integer
      bits only; else None).
    value_step: the same for values.
    key_up: `(L, K, Dh, Dh)`, the up projection `k̂ = c Uᵀ` (the same column layout), or None
      for `key_basis` itself (`k̂ = c Dᵀ`, an orthogonal projection).
    value_up: the same for values.
    pre_rope: project the keys before RoPE (`KVInputs.k_raw`) and rotate what is rebuilt
      (static; without RoPE it changes nothing).
  """

  key_basis: jax.Array
  value_basis: jax.Array
  key_ranks: tuple = struct.field(pytree_node=False)
  value_ranks: tuple = struct.field(pytree_node=False)
  bits: int = struct.field(pytree_node=False, default=32)
  key_step: tuple | None = None
  value_step: tuple | None = None
  key_up: jax.Array | None = None
  value_up: jax.Array | None = None
  pre_rope: bool = struct.field(pytree_node=False, default=False)

  def ups(self) -> tuple[jax.Array, jax.Array]:
    """`(key_up, value_up)`, each the down projection itself where no up projection is set."""
    return (self.key_basis if self.key_up is None else self.key_up,
            self.value_basis if self.value_up is None else self.value_up)


class LatentCache(NamedTuple):
  """The compressed cache: per layer the coefficients (or their packed codes) of `S` slots.

  Attributes:
    k: `L` arrays `(B, S, W_l)`: float coefficients (`W_l = R_l`) or packed `uint8` codes.
    v: the same for values.
    valid: `(B, S)` True where a slot holds a real token.
    index: `()` int32, the next slot to write.
  """

  k: tuple
  v: tuple
  valid: jax.Array
  index: jax.Array


def make_compression(key_basis, value_basis, key_ranks, value_ranks, bits: int = 32,
                     key_step=None, value_step=None, *, key_up=None, value_up=None,
                     pre_rope: bool = False) -> Compression:
  """A validated `Compression` (one-line `ValueError` naming the bad argument).

  `pre_rope` says which keys the key bases were fitted to: False (the default here) for the
  cached post-RoPE keys of `analysis.kv.kv_moments`, True for the raw keys
  (`kv_moments(..., pre_rope=True)`, or the SVD of `W_K`). `analysis.kv.compress` picks
  `pre_rope=True` for RoPE models.

  Example:
    >>> import jax.numpy as jnp
    >>> eye = jnp.broadcast_to(jnp.eye(4), (1, 2, 4, 4))
    >>> make_compression(eye, eye, ((2, 3),), ((4, 4),)).key_ranks
    ((2, 3),)
  """
  L, K, dh, dh2 = key_basis.shape
  if value_basis.shape != key_basis.shape or dh != dh2:
    raise ValueError(f"make_compression: bases must both be (L, K, Dh, Dh); got "
                     f"{key_basis.shape} and {value_basis.shape}.")
  for name, up in (("key_up", key_up), ("value_up", value_up)):
    if up is not None and up.shape != key_basis.shape:
      raise ValueError(f"make_compression: {name} has shape {up.shape}; it needs the bases' "
                       f"{key_basis.shape}. Fix: an up projection per layer and KV head, or None.")
  for name, ranks in (("key_ranks", key_ranks), ("value_ranks", value_ranks)):
    ranks = np.asarray(ranks)
    if ranks.shape != (L, K):
      raise ValueError(f"make_compression: {name} has shape {ranks.shape}; it needs (L, K) = "
                       f"{(L, K)}. Fix: one rank per layer and KV head.")
    if ranks.min() < 1 or ranks.max() > dh:
      raise ValueError(f"make_compression: {name} must lie in [1, {dh}] (the head width); got "
                       f"[{ranks.min()}, {ranks.max()}]. Fix: clip the ranks to the head width.")
  if bits not in BITS:
    raise ValueError(f"make_compression: bits={bits} is not one of {BITS}.")
  if bits < 16 and (key_step is None or value_step is None):
    raise ValueError(f"make_compression: bits={bits} needs key_step and value_step (per-channel "
                     "quantization steps from calibration). Fix: use analysis.kv.calibrate_steps.")
  as_tuple = lambda r: tuple(tuple(int(x) for x in row) for row in np.asarray(r))  # noqa: E731
  steps = lambda s: None if s is None else tuple(jnp.asarray(x, jnp.float32) for x in s)  # noqa: E731
  return Compression(key_basis, value_basis, as_tuple(key_ranks), as_tuple(value_ranks), bits,
                     steps(key_step) if bits < 16 else None,
                     steps(value_step) if bits < 16 else None, key_up, value_up, bool(pre_rope))


def block_basis(basis_KDhDh: jax.Array, ranks: tuple[int, ...]) -> jax.Array:
  """`(K·Dh, R)` block-diagonal: head `k`'s first `ranks[k]` columns in its own rows.

  Example:
    >>> import jax.numpy as jnp
    >>> block_basis(jnp.broadcast_to(jnp.eye(3), (2, 3, 3)), (1, 2)).shape
    (6, 3)
  """
  K, dh, _ = basis_KDhDh.shape
  blocks = []
  for k, r in enumerate(ranks):
    col = jnp.zeros((K, dh, r), basis_KDhDh.dtype).at[k].set(basis_KDhDh[k, :, :r])
    blocks.append(col.reshape(K * dh, r))
  return jnp.concatenate(blocks, axis=1)


# --------------------------------------------------------------------------- quantization


def pack(u, bits: int):
  """Unsigned codes `(..., R)` in `[0, 2^bits)` -> `uint8 (..., ceil(R·bits/8))`."""
  n = 8 // bits
  R = u.shape[-1]
  u = jnp.pad(u.astype(jnp.uint8), [(0, 0)] * (u.ndim - 1) + [(0, -R % n)])
  u = u.reshape(u.shape[:-1] + (-1, n))
  shifts = _lead(jnp.arange(n, dtype=jnp.uint8) * bits, u.ndim)
  return jnp.sum(u << shifts, axis=-1, dtype=jnp.uint8)  # disjoint bits: sum = or


def unpack(p, bits: int, R: int):
  """Inverse of `pack`: `uint8 (..., W)` -> unsigned codes `(..., R)`."""
  n = 8 // bits
  shifts = _lead(jnp.arange(n, dtype=jnp.uint8) * bits, p.ndim + 1)
  u = (p[..., None] >> shifts) & jnp.uint8(2**bits - 1)
  return u.reshape(p.shape[:-1] + (-1,))[..., :R]


def encode(c_BTR, step_R, bits: int, dtype):
  """Coefficients -> what the cache stores: floats, or packed mid-rise codes `⌊c / step⌋`."""
  if bits == 32:
    return c_BTR.astype(jnp.float32)
  if bits == 16:
    return c_BTR.astype(jnp.float16)
  half = 2 ** (bits - 1)
  code = jnp.clip(jnp.floor(c_BTR.astype(jnp.float32) / _lead(step_R, c_BTR.ndim)), -half,
                  half - 1)
  return pack((code + half).astype(jnp.int32), bits)


def decode(stored, step_R, bits: int, R: int, dtype):
  """What the cache stores -> coefficients `(..., R)` in `dtype`."""
  if bits >= 16:
    return stored.astype(dtype)
  code = unpack(stored, bits, R).astype(jnp.float32) - 2 ** (bits - 1) + 0.5
  return (code * _lead(step_R, code.ndim)).astype(dtype)


def stored_width(R: int, bits: int) -> int:
  """Last-axis size of the stored array for `R` coefficients."""
  return R if bits >= 16 else -(-R * bits // 8)


# -------------------------------------------------------------------------------- bytes


def cache_bytes(cache: LatentCache) -> int:
  """Bytes of the stored coefficients (the `k` and `v` arrays)."""
  return sum(int(a.nbytes) for a in (*cache.k, *cache.v))


def full_cache_bytes(cfg: Config, batch: int, length: int, bits: int = 16) -> int:
  """Bytes of an uncompressed K and V cache at `bits` per number."""
  return 2 * cfg.n_layers * batch * length * cfg.n_kv_heads * cfg.d_head * bits // 8


def compression_ratio(cfg: Config, cache: LatentCache) -> float:
  """Measured ratio: bytes of a 16-bit uncompressed K, V cache ÷ bytes of `cache`'s arrays."""
  B, S = cache.valid.shape
  return full_cache_bytes(cfg, B, S) / cache_bytes(cache)


def basis_bytes(comp: Compression, bits: int = 16) -> int:
  """Bytes of what the compression adds to the model: the used basis columns at `bits` (down
  and, where set apart, up projections), and the quantization steps (float32). Counted apart
  from the cache."""
  dh = comp.key_basis.shape[-1]
  kcols, vcols = sum(map(sum, comp.key_ranks)), sum(map(sum, comp.value_ranks))
  cols = kcols * (1 + (comp.key_up is not None)) + vcols * (1 + (comp.value_up is not None))
  steps = 0 if comp.key_step is None else sum(
      int(s.size) * 4 for s in (*comp.key_step, *comp.value_step))
  return cols * dh * bits // 8 + steps


def payoff_length(cfg: Config, comp: Compression) -> float:
  """Context length (one sequence) beyond which the bases cost less than the bytes saved."""
  per_token_full = full_cache_bytes(cfg, 1, 1)
  per_token = sum(stored_width(sum(r), comp.bits) for r in (*comp.key_ranks, *comp.value_ranks))
  per_token *= {32: 4, 16: 2}.get(comp.bits, 1)
  saved = per_token_full - per_token
  return float("inf") if saved <= 0 else basis_bytes(comp) / saved

