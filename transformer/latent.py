"""Rank-aware KV-cache compression: a latent cache of basis coefficients, bases folded in.

Per layer `l` and key/value head `k` there is an orthonormal key basis `P_k: (Dh, r)` and a
value basis `P_v: (Dh, r')` (columns by descending importance, so every prefix is a basis:
the bases are nested). The cache stores the coefficients `c_k = k P_k` and `c_v = v P_v`,
all heads of a layer side by side, `(B, S, R_l)` per layer (`(L, B, S, R)` when every layer
has the same rank), and decoding never rebuilds `K` or `V`:

.. math::
   s_{ts} = \\frac{q_t \\cdot k_s}{\\sqrt{d_h}} \\approx
   \\frac{q_t \\cdot (k_s P_k P_k^\\top)}{\\sqrt{d_h}}
   = \\frac{(q_t P_k) \\cdot c_{k,s}}{\\sqrt{d_h}},
   \\qquad y = \\sum_h A_h V_h W_O^h \\approx \\sum_h (A_h C_v)(P_v^\\top W_O^h)

so the query is projected into the key basis and `P_vᵀ` is folded into `W_O` (`fold_output`).

**What is projected, and why RoPE stays exact.** We project the keys *after* RoPE. RoPE
multiplies the key at position `p` by a rotation `R_p`; a basis for pre-RoPE keys does not
commute with it (`R_p P P^T ≠ P P^T R_p`), so reading pre-RoPE coefficients would mean
rebuilding `k = c Pᵀ` and rotating it at every read — rebuilding `K`. Post-RoPE keys are plain
vectors whose inner product with the (post-RoPE) query is the score, so the identity above
holds at every position, and the query is projected at its own position (`q_t P_k` after
`rope(q_t)`). At full rank `P_k` is square orthogonal, `P_k P_kᵀ = I`, and the scores equal the
model's up to float rounding; the same holds for values. The price is that a post-RoPE basis
must span keys at every rotation angle, which is why the rank needed for a given energy is
measured against context length (`analysis.kv`). Without RoPE `q P_k` could be folded into
`W_Q` as `W_Q P_k`; we keep one code path and project `q` at run time.

**Cost.** All heads' coefficients of a layer share one axis `R_l`, and a query head's projected
query is zero outside its own KV head's slot; the score einsum therefore runs over `R_l`
(`K` times a head's rank), the price of allowing a different rank per head. The bytes read
per decoded token, which bound decoding, are the cache's `R_l`.

**Quantization.** With `bits` 8, 4 or 2 the coefficients are stored as unsigned codes packed
into `uint8` (two 4-bit or four 2-bit codes per byte): a symmetric mid-rise quantizer
(levels `(j + 1/2)·step`, `j ∈ [-2^(b-1), 2^(b-1))`) with one static step per coefficient
channel calibrated on calibration text (`Compression.key_step`);
`bits=16` stores `float16`, `bits=32` stores `float32` (exact).

Example:
  >>> import jax, transformer
  >>> from transformer import latent
  >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
  >>> comp = latent.weight_compression(params, cfg, rank=4, bits=16)
  >>> tokens = jax.numpy.array([[72, 101, 108, 108, 111]])
  >>> logits = latent.forward(params, cfg, tokens, comp)  # (1, 5, 256), keys at rank 4 of 16
  >>> cache = latent.init_cache(cfg, comp, batch=1, length=8)
  >>> logits, cache = latent.forward(params, cfg, tokens, comp, cache=cache)
  >>> latent.compression_ratio(cfg, cache)  # 16-bit K, V over float16 coefficients at rank 4
  4.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from transformer.attention import make_mask, rope
from transformer.config import Config
from transformer.linalg import serial
from transformer.model import FeedForward, Norm, _lead, param_tree

BITS = (32, 16, 8, 4, 2)


@struct.dataclass
class Compression:
  """Bases, ranks and quantization of a compressed KV cache.

  Attributes:
    key_basis: `(L, K, Dh, Dh)` orthonormal columns per layer and KV head, by descending
      importance; only the first `key_ranks[l][k]` columns are used.
    value_basis: `(L, K, Dh, Dh)`, the same for values.
    key_ranks: `L` tuples of `K` ranks (static).
    value_ranks: `L` tuples of `K` ranks (static).
    bits: storage of the coefficients: 32, 16 (float), 8, 4 or 2 (integer codes).
    key_step: `L` arrays `(R_l,)`, the quantization step per key coefficient channel (integer
      bits only; else None).
    value_step: the same for values.
  """

  key_basis: jax.Array
  value_basis: jax.Array
  key_ranks: tuple = struct.field(pytree_node=False)
  value_ranks: tuple = struct.field(pytree_node=False)
  bits: int = struct.field(pytree_node=False, default=32)
  key_step: tuple | None = None
  value_step: tuple | None = None


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
                     key_step=None, value_step=None) -> Compression:
  """A validated `Compression` (one-line `ValueError` naming the bad argument).

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
                     steps(value_step) if bits < 16 else None)


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


def fold_output(P_KDhR: jax.Array, w_o: jax.Array, cfg: Config) -> jax.Array:
  """`(H, R, D)`: `P_vᵀ W_O^h` for every query head `h` (its KV head's value basis).

  Example:
    >>> import jax.numpy as jnp, transformer
    >>> cfg = transformer.preset("tiny")
    >>> P = block_basis(jnp.broadcast_to(jnp.eye(16), (4, 16, 16)), (2, 2, 2, 2))
    >>> fold_output(P.reshape(4, 16, 8), jnp.ones((64, 64)), cfg).shape
    (4, 8, 64)
  """
  P_HDhR = jnp.repeat(P_KDhR, cfg.kv_groups, axis=0)
  return jnp.einsum("hdr,hde->hre", P_HDhR, w_o.reshape(cfg.n_heads, cfg.d_head, -1))


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


# ------------------------------------------------------------------------------- forward


def _proj(x, p, name: str, cfg: Config):
  y = x @ p[f"w_{name}"].astype(cfg.jnp_dtype)
  if cfg.use_bias:
    y = y + _lead(p[f"b_{name}"].astype(cfg.jnp_dtype), y.ndim)
  return y


def _norm(p, name: str, cfg: Config, x):
  return Norm(cfg).apply({"params": p.get(name, {})}, x)


def _softmax_mix(scores_BHTS, mask_BTS, v_dtype):
  scores_BHTS = jnp.where(mask_BTS[:, None], scores_BHTS, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(scores_BHTS, axis=-1).astype(v_dtype)


def _qkv(p, cfg: Config, x_BTD, pos_BT):
  B, T, _ = x_BTD.shape
  H, K, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
  q = _proj(x_BTD, p, "q", cfg).reshape(B, T, H, dh)
  k = _proj(x_BTD, p, "k", cfg).reshape(B, T, K, dh)
  v = _proj(x_BTD, p, "v", cfg).reshape(B, T, K, dh)
  if cfg.positions == "rope":
    q, k = rope(q, pos_BT, cfg.rope_theta), rope(k, pos_BT, cfg.rope_theta)
  return q, k, v


def _full_attention(p, cfg: Config, x_BTD, pos_BT, mask_BTS, l, kv_fn):
  """The model's attention (no cache), with `kv_fn(l, k, v)` applied to keys and values."""
  B, T, _ = x_BTD.shape
  q, k, v = _qkv(p, cfg, x_BTD, pos_BT)
  if kv_fn is not None:
    k, v = kv_fn(l, k, v)
  k = jnp.repeat(k.astype(cfg.jnp_dtype), cfg.kv_groups, axis=2)
  v = jnp.repeat(v.astype(cfg.jnp_dtype), cfg.kv_groups, axis=2)
  scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) * cfg.d_head**-0.5
  out = jnp.einsum("bhts,bshd->bthd", _softmax_mix(scores, mask_BTS, v.dtype), v)
  return _proj(out.reshape(B, T, -1), p, "o", cfg)


def _latent_attention(p, cfg: Config, comp: Compression, l: int, x_BTD, pos_BT, mask_BTS,
                      slot, masks):
  """Attention through the latent cache of layer `l`.

  `slot` is `None` (no cache: attend to this chunk's own stored coefficients) or
  `(k_stored, v_stored, offset)`; `masks` is `None` or the `(B, K·Dh)` coefficient masks of
  the dynamic-rank mode. Returns `(y_BTD, (k_stored, v_stored))`.
  """
  K, dh = cfg.n_kv_heads, cfg.d_head
  dt = cfg.jnp_dtype
  q, k, v = _qkv(p, cfg, x_BTD, pos_BT)
  B, T = q.shape[:2]
  if masks is None:
    kr, vr, bits = comp.key_ranks[l], comp.value_ranks[l], comp.bits
  else:
    kr, vr, bits = (dh,) * K, (dh,) * K, 32
  Pk = block_basis(comp.key_basis[l].astype(dt), kr)
  Pv = block_basis(comp.value_basis[l].astype(dt), vr)
  ck = k.reshape(B, T, K * dh).astype(dt) @ Pk
  cv = v.reshape(B, T, K * dh).astype(dt) @ Pv
  kstep = None if comp.key_step is None else comp.key_step[l]
  vstep = None if comp.value_step is None else comp.value_step[l]
  ks, vs = encode(ck, kstep, bits, dt), encode(cv, vstep, bits, dt)
  if slot is not None:
    kc, vc, offset = slot
    ks = jax.lax.dynamic_update_slice(kc, ks.astype(kc.dtype), (0, offset, 0))
    vs = jax.lax.dynamic_update_slice(vc, vs.astype(vc.dtype), (0, offset, 0))
  ck_S = decode(ks, kstep, bits, Pk.shape[1], dt)
  cv_S = decode(vs, vstep, bits, Pv.shape[1], dt)
  if masks is not None:
    ck_S = ck_S * masks[0][:, None].astype(dt)
    cv_S = cv_S * masks[1][:, None].astype(dt)
  Pq_HDhR = jnp.repeat(Pk.reshape(K, dh, -1), cfg.kv_groups, axis=0)
  q_BTHR = jnp.einsum("bthd,hdr->bthr", q.astype(dt), Pq_HDhR)
  scores = jnp.einsum("bthr,bsr->bhts", q_BTHR, ck_S).astype(jnp.float32) * dh**-0.5
  mix_BTHR = jnp.einsum("bhts,bsr->bthr", _softmax_mix(scores, mask_BTS, dt), cv_S)
  y = jnp.einsum("bthr,hrd->btd", mix_BTHR, fold_output(Pv.reshape(K, dh, -1),
                                                         p["w_o"].astype(dt), cfg))
  if cfg.use_bias:
    y = y + _lead(p["b_o"].astype(dt), y.ndim)
  return y, (ks, vs)


def _rank_masks(rank, B: int, l: int, cfg: Config):
  """`(B, K·Dh)` masks keeping the first `rank[..., l, k]` coefficients of each head."""
  r_BK = jnp.broadcast_to(jnp.asarray(rank), (B, cfg.n_layers, cfg.n_kv_heads))[:, l]
  return (jnp.arange(cfg.d_head)[None, None, :] < r_BK[:, :, None]).reshape(B, -1)


def forward(params, cfg: Config, tokens_BT, comp: Compression | None = None, *,
            cache: LatentCache | None = None, key_rank=None, value_rank=None,
            kv_fn: Callable | None = None):
  """Logits of `Transformer(cfg)` computed from its params, optionally through a latent cache.

  Modes: `comp=None` is the model itself (to 1e-6), with `kv_fn(l, k_BTKDh, v_BTKDh) ->
  (k, v)` applied to each layer's post-RoPE keys and values if given (e.g. a quantizer);
  `comp` alone runs attention on the stored coefficients at the static ranks of `comp`;
  `key_rank`/`value_rank` (int arrays `(L, K)` or `(B, L, K)`, traceable) instead keep the
  first `r` coefficients of every head's full basis, per sequence if batched — the nested
  bases' dynamic mode, used for allocation search and rank per input (float32, no cache).

  Args:
    params: the model's params (bare or `{"params": ...}`).
    cfg: its config (`dtype` float32 for exactness).
    tokens_BT: token ids.
    comp: bases and ranks, or None.
    cache: a `LatentCache` (requires `comp`, static ranks); the chunk is written at its
      `index` and attention reads every valid slot.
    key_rank: dynamic key ranks (with `value_rank`).
    value_rank: dynamic value ranks.
    kv_fn: transform of K and V in the uncompressed mode.

  Returns:
    `logits_BTV` (float32), or `(logits_BTV, new_cache)` with a cache.
  """
  p_all = param_tree(params)
  B, T = tokens_BT.shape
  dynamic = key_rank is not None or value_rank is not None
  if dynamic and (key_rank is None or value_rank is None or comp is None or cache is not None):
    raise ValueError("latent.forward: dynamic ranks need both key_rank and value_rank, a "
                     "`comp` for its bases, and no cache.")
  if cache is not None and comp is None:
    raise ValueError("latent.forward: a LatentCache needs its `comp`. Fix: pass comp=.")
  offset = 0 if cache is None else cache.index
  pos_BT = jnp.broadcast_to(offset + jnp.arange(T), (B, T))
  x = jnp.take(p_all["embed"]["embedding"], tokens_BT, axis=0).astype(cfg.jnp_dtype)
  if cfg.positions == "learned":
    x = x + jnp.take(p_all["pos_embed"]["embedding"], pos_BT, axis=0).astype(cfg.jnp_dtype)
  if cache is None:
    k_pos_BS, k_valid_BS = pos_BT, None
  else:
    S = cache.valid.shape[1]
    k_valid_BS = jax.lax.dynamic_update_slice(cache.valid, jnp.ones((B, T), bool), (0, offset))
    k_pos_BS = jnp.broadcast_to(jnp.arange(S), (B, S))
  mask_BTS = make_mask(pos_BT, k_pos_BS, causal=cfg.causal, window=cfg.window,
                       k_valid_BS=k_valid_BS)
  new_k, new_v = [], []
  for l in range(cfg.n_layers):
    p = jax.tree.map(lambda w, l=l: w[l], p_all["blocks"])

    def attn(h, p=p, l=l):
      if comp is None:
        return _full_attention(p["attn"], cfg, h, pos_BT, mask_BTS, l, kv_fn)
      slot = None if cache is None else (cache.k[l], cache.v[l], offset)
      masks = None if not dynamic else (_rank_masks(key_rank, B, l, cfg),
                                        _rank_masks(value_rank, B, l, cfg))
      y, (ks, vs) = _latent_attention(p["attn"], cfg, comp, l, h, pos_BT, mask_BTS, slot, masks)
      new_k.append(ks)
      new_v.append(vs)
      return y

    ffn = lambda h, p=p: FeedForward(cfg).apply({"params": p["ffn"]}, h)  # noqa: E731
    add = (lambda a, b: a + b) if cfg.residual else (lambda a, b: b)
    if cfg.norm_position == "pre":
      x = add(x, attn(_norm(p, "norm_1", cfg, x)))
      x = add(x, ffn(_norm(p, "norm_2", cfg, x)))
    else:
      x = _norm(p, "norm_1", cfg, add(x, attn(x)))
      x = _norm(p, "norm_2", cfg, add(x, ffn(x)))
  if cfg.norm_position == "pre":
    x = _norm(p_all, "norm_f", cfg, x)
  if cfg.tie_embeddings:
    logits = x @ p_all["embed"]["embedding"].T.astype(cfg.jnp_dtype)
  else:
    logits = x @ p_all["unembed"]["w_out"].astype(cfg.jnp_dtype)
  logits = logits.astype(jnp.float32)
  if cache is None:
    return logits
  return logits, LatentCache(tuple(new_k), tuple(new_v), k_valid_BS, cache.index + T)


# --------------------------------------------------------------------------------- cache


def init_cache(cfg: Config, comp: Compression, batch: int, length: int) -> LatentCache:
  """An empty latent cache of `length` slots for `comp`'s ranks and bits."""
  if cfg.positions == "learned" and length > cfg.max_len:
    raise ValueError(f"latent.init_cache: length={length} exceeds max_len={cfg.max_len}. "
                     "Fix: a shorter length.")
  dtype = {32: jnp.float32, 16: jnp.float16}.get(comp.bits, jnp.uint8)

  def arrays(ranks):
    return tuple(jnp.zeros((batch, length, stored_width(sum(r), comp.bits)), dtype)
                 for r in ranks)

  return LatentCache(arrays(comp.key_ranks), arrays(comp.value_ranks),
                     jnp.zeros((batch, length), bool), jnp.zeros((), jnp.int32))


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
  """Bytes of what the compression adds to the model: the used basis columns at `bits`, and
  the quantization steps (float32). Counted apart from the cache."""
  dh = comp.key_basis.shape[-1]
  cols = sum(map(sum, comp.key_ranks)) + sum(map(sum, comp.value_ranks))
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


def weight_compression(params, cfg: Config, rank: int, bits: int = 32) -> Compression:
  """Data-free bases: per head the right singular vectors of `W_K^{l,k}` and `W_V^{l,k}`.

  For inputs with identity covariance, `k = x W_K` has covariance `W_Kᵀ W_K`, whose
  eigenvectors are `W_K`'s right singular vectors; no calibration text is needed. (For the
  post-RoPE keys, `analysis.kv.weight_bases` averages over rotations; this is the plain SVD.)
  Float bits only: integer bits need calibrated steps.
  """
  p = param_tree(params)["blocks"]["attn"]
  L, D = p["w_k"].shape[:2]
  K, dh = cfg.n_kv_heads, cfg.d_head
  if not 1 <= rank <= dh:
    raise ValueError(f"weight_compression: rank={rank} must lie in [1, {dh}] (the head width).")

  def bases(w):
    w_LKDDh = jnp.moveaxis(w.reshape(L, D, K, dh), 2, 1).astype(jnp.float32)
    return jnp.swapaxes(serial.svd(w_LKDDh, full_matrices=False)[2], -1, -2)

  ranks = ((rank,) * K,) * L
  return make_compression(bases(p["w_k"]), bases(p["w_v"]), ranks, ranks, bits)
