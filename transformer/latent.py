"""Rank-aware KV-cache compression: a latent cache of basis coefficients, read by the model.

Per layer `l` and key/value head `k` there is an orthonormal key basis `P_k: (Dh, r)` and a
value basis `P_v: (Dh, r')` (columns by descending importance, so every prefix is a basis:
the bases are nested). The cache stores the coefficients `c_k = k P_k` and `c_v = v P_v`,
all heads of a layer side by side, `(B, S, R_l)` per layer (`(L, B, S, R)` when every layer
has the same rank), and decoding never rebuilds `V` (nor `K`, when keys are projected after
RoPE):

.. math::
   s_{ts} = \\frac{q_t \\cdot k_s}{\\sqrt{d_h}} \\approx
   \\frac{q_t \\cdot (k_s P_k P_k^\\top)}{\\sqrt{d_h}}
   = \\frac{(q_t P_k) \\cdot c_{k,s}}{\\sqrt{d_h}},
   \\qquad y = \\sum_h A_h V_h W_O^h \\approx \\sum_h \\big((A_h C_v) P_v^\\top\\big) W_O^h

**Through the one model.** Nothing here computes a layer: the latent cache is a KV hook
(`latent_kv`, a `transformer.model.KVHook`) that the model's own attention calls, and
`forward` runs `Transformer(cfg)` layer by layer with one hook per layer
(`transformer.model.forward_layerwise`: layers may have different ranks, hence different
cache widths). The hook hands the attention function of the registry the query, keys and
values in the basis (`q P_k`, `c_k`, `c_v`) and maps its output back by `P_vᵀ` before the
model's `W_O`. That is exact for every variant that reads keys only through inner products
and norms (`COMPRESSIBLE`: `softmax`, `local`, `bigbird`, `moba`, and `rbf`, whose `‖q‖²`
term is constant along a row and leaves the weights unchanged); `linear` applies its feature
map coordinate by coordinate and is refused by name. Tied keys (`Config.qk_tied`) are the
model's own `k = q` and need nothing else.

**Where keys are projected: before or after RoPE** (`Compression.pre_rope`). RoPE multiplies
the key at position `p` by a rotation `R_p`, and a rotation spreads a key's energy over the
pairs of dimensions it turns: a basis of post-RoPE keys must span keys at every angle, so it
needs a higher rank than one of the raw keys for the same energy.

* `pre_rope=True` (the default of `analysis.kv.compress` for RoPE models): the cache stores
  `c_k = k_raw P_k`, the coefficients of the keys *before* the rotation (`KVInputs.k_raw`);
  attention rebuilds `k̂_s = R_s (c_{k,s} P_kᵀ)` at each slot's position `s` (a slot's
  position is its index, as the model's mask has it) and reads them with the model's own
  rotated query. The bytes stored per token are the same; the price is work per *cached*
  token at every read (`S·K·r·Dh` multiply-adds and a rotation), not only per new token.
* `pre_rope=False`: the cache stores post-RoPE coefficients `c_k = k P_k`, whose inner product
  with the (post-RoPE) query in the same basis, `q_t P_k`, is the score, so nothing is rebuilt
  (the identity above holds at every position). Without RoPE the two are the same thing and
  the cheaper one runs.

At full rank `P_k` is square orthogonal, `P_k P_kᵀ = I`, and either way the scores equal the
model's up to float rounding; the same holds for values.

**Down and up projections.** By default one orthonormal basis `P` both encodes (`c = x P`) and
decodes (`x̂ = c Pᵀ`). `analysis.kv.calibrate` fits them apart by gradient descent: a down
projection `D` (`Compression.key_basis`, `c = x D`) and an up projection `U`
(`Compression.key_up`, `x̂ = c Uᵀ`); the query is then read in the up basis, `q_t U_k`, since
`q · (k D Uᵀ) = (q U) · (k D)`, and the attention's output is mapped back by `U_vᵀ`.

**Cost.** The cache holds `R_l = Σ_k r_k` numbers per token and layer: those bytes, read per
decoded token, bound decoding. For the attention each KV head's coefficients are padded to the
layer's largest rank `r_max ≤ Dh` (zeros beyond its own rank), so the score and mixing
einsums run over `r_max` instead of `Dh`. What the cache stores, its quantized codes and
their bytes are `transformer.latent_cache`.

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

import jax
import jax.numpy as jnp
import numpy as np

from transformer.attention import rope
from transformer.config import Config
from transformer.kvhook import KVHook, dense_kv
from transformer.latent_cache import (
    BITS,
    Compression,
    LatentCache,
    basis_bytes,
    block_basis,
    cache_bytes,
    compression_ratio,
    decode,
    encode,
    full_cache_bytes,
    make_compression,
    pack,
    payoff_length,
    stored_width,
    unpack,
)
from transformer.linalg import serial
from transformer.model import Transformer, forward_layerwise, param_tree
from transformer.names import split_heads

__all__ = ["BITS", "COMPRESSIBLE", "Compression", "LatentCache", "basis_bytes", "block_basis",
           "cache_bytes", "check_variant", "compression_ratio", "decode", "encode", "forward",
           "full_cache_bytes", "init_cache", "latent_kv", "make_compression", "pack",
           "payoff_length", "stored_width", "transformed_kv", "unpack", "weight_compression"]

# ------------------------------------------------------------------------------- forward

# Attention variants that read keys only through inner products and norms (`q·k`, `‖k‖`,
# block means of `k`): an orthonormal change of basis of queries and keys leaves them
# unchanged, so they run on basis coefficients. `linear` applies `elu(x) + 1` to each
# coordinate, which no change of basis commutes with.
COMPRESSIBLE = ("softmax", "rbf", "local", "bigbird", "moba")


def check_variant(cfg: Config, what: str = "latent") -> None:
  """Refuse, in one line naming it, an attention variant the latent cache cannot compress."""
  if cfg.attention not in COMPRESSIBLE:
    raise ValueError(f"{what}: attention={cfg.attention!r} cannot be compressed: it reads keys "
                     "coordinate by coordinate, not through inner products, so it does not "
                     f"commute with a key basis. Fix: one of {COMPRESSIBLE}, or kv_fn=.")


def _head_columns(ranks: tuple[int, ...]):
  """Where head `k`'s coefficients sit in the layer's `R = Σ ranks` axis, padded to the
  largest rank: `(index (K, r_max), valid (K, r_max))`."""
  r_max = max(ranks)
  starts = np.cumsum((0,) + tuple(ranks[:-1]))
  j = np.arange(r_max)[None, :]
  valid = j < np.asarray(ranks)[:, None]
  return jnp.asarray(np.where(valid, starts[:, None] + j, 0)), jnp.asarray(valid)


def latent_kv(comp: Compression, l: int, cfg: Config, masks=None) -> KVHook:
  """The KV hook (`transformer.model.KVHook`) of layer `l` through a latent cache.

  Writes: the chunk's keys (post-RoPE, or raw with `comp.pre_rope`) and values become
  coefficients `c_k = k D_k`, `c_v = v D_v` (`(B, T, R)`, all heads side by side,
  `block_basis`), stored as `encode` makes them. Reads: the stored coefficients, each KV
  head's padded to the layer's largest rank (`(B, S, K, r_max)`, zeros beyond its rank). After
  RoPE the query is read in the key's up basis, `q U_k`; before RoPE the keys are rebuilt,
  `k̂ = rope(c_k U_kᵀ)` at each slot's position (`(B, S, K, Dh)`), and the query is the
  model's. The attention's output `(B, T, H, r_v)` is mapped back by `U_vᵀ` before `W_O`.

  Args:
    comp: bases, ranks and bits.
    l: the layer.
    cfg: the model's config.
    masks: the dynamic-rank mode: `(key_mask, value_mask)`, each `(B, K, Dh)`, kept
      coefficients of each head's full basis (float32, no quantization); `None` for the
      static ranks of `comp`.

  Returns:
    `hook(inputs, slot, offset)`; its slot is `(k_stored_BSW, v_stored_BSW)`.

  Raises:
    ValueError: `cfg.attention` is not in `COMPRESSIBLE` (one line, naming it).
  """
  check_variant(cfg, "latent_kv")
  K, dh, dt, groups = cfg.n_kv_heads, cfg.d_head, cfg.jnp_dtype, cfg.kv_groups
  if masks is None:
    kr, vr, bits = comp.key_ranks[l], comp.value_ranks[l], comp.bits
  else:
    kr, vr, bits = (dh,) * K, (dh,) * K, 32
  kstep = None if comp.key_step is None or masks is not None else comp.key_step[l]
  vstep = None if comp.value_step is None or masks is not None else comp.value_step[l]
  rebuild = comp.pre_rope and cfg.positions == "rope"  # else k_raw is k: the cheaper path

  def side(down_KDhDh, up_KDhDh, ranks):
    """`(block down (K·Dh, R), per-head padded up (K, Dh, r_max), columns, valid)`."""
    cols, valid = _head_columns(ranks)
    up_KDhR = up_KDhDh.astype(dt)[:, :, :cols.shape[1]] * valid[:, None, :].astype(dt)
    return block_basis(down_KDhDh.astype(dt), ranks), up_KDhR, cols, valid

  key_up, value_up = comp.ups()
  Dk, Uk_KDhR, kcols, kvalid = side(comp.key_basis[l], key_up[l], kr)
  Dv, Uv_KDhR, vcols, vvalid = side(comp.value_basis[l], value_up[l], vr)
  Uv_HDhR = jnp.repeat(Uv_KDhR, groups, axis=0)

  def read(stored, step, P, cols, valid, mask):
    c_BSR = decode(stored, step, bits, P.shape[1], dt)
    c_BSKR = jnp.take(c_BSR, cols, axis=-1) * valid[None, None].astype(dt)
    return c_BSKR if mask is None else c_BSKR * mask[:, None].astype(dt)

  def hook(inputs, slot, offset):
    B, T = inputs.k.shape[:2]
    k_in = inputs.k_raw if rebuild else inputs.k
    ks = encode(k_in.reshape(B, T, K * dh).astype(dt) @ Dk, kstep, bits, dt)
    vs = encode(inputs.v.reshape(B, T, K * dh).astype(dt) @ Dv, vstep, bits, dt)
    if slot is not None:
      ks = jax.lax.dynamic_update_slice(slot[0], ks.astype(slot[0].dtype), (0, offset, 0))
      vs = jax.lax.dynamic_update_slice(slot[1], vs.astype(slot[1].dtype), (0, offset, 0))
    ck_BSKR = read(ks, kstep, Dk, kcols, kvalid, None if masks is None else masks[0])
    cv_BSKR = read(vs, vstep, Dv, vcols, vvalid, None if masks is None else masks[1])
    out_fn = lambda out_BTHR: jnp.einsum("bthr,hdr->bthd", out_BTHR, Uv_HDhR)
    new_slot = None if slot is None else (ks, vs)
    if rebuild:
      # Slot s holds the token at position s (the model's mask says so); uncached, the chunk's.
      S = ks.shape[1]
      pos_BS = inputs.pos if slot is None else jnp.broadcast_to(jnp.arange(S), (B, S))
      k_BSKDh = rope(jnp.einsum("bskr,kdr->bskd", ck_BSKR, Uk_KDhR), pos_BS, cfg.rope_theta)
      return inputs.q, k_BSKDh, cv_BSKR, new_slot, out_fn
    q_BTHR = jnp.einsum("bthd,hdr->bthr", inputs.q.astype(dt),
                        jnp.repeat(Uk_KDhR, groups, axis=0))
    return q_BTHR, ck_BSKR, cv_BSKR, new_slot, out_fn

  return hook


def transformed_kv(kv_fn: Callable, l: int) -> KVHook:
  """The KV hook of layer `l` that attends to `kv_fn(l, k_BTKDh, v_BTKDh)` (no cache)."""

  def hook(inputs, slot, offset):
    if slot is not None:
      raise ValueError("latent.forward: kv_fn runs without a cache. Fix: drop cache=.")
    k, v = kv_fn(l, inputs.k, inputs.v)
    return dense_kv(inputs._replace(k=k, v=v), None, offset)

  return hook


def _rank_masks(rank, B: int, l: int, cfg: Config):
  """`(B, K, Dh)` masks keeping the first `rank[..., l, k]` coefficients of each head."""
  r_BK = jnp.broadcast_to(jnp.asarray(rank), (B, cfg.n_layers, cfg.n_kv_heads))[:, l]
  return jnp.arange(cfg.d_head)[None, None, :] < r_BK[:, :, None]


def forward(params, cfg: Config, tokens_BT, comp: Compression | None = None, *,
            cache: LatentCache | None = None, key_rank=None, value_rank=None,
            kv_fn: Callable | None = None):
  """Logits of `Transformer(cfg)`, with its keys and values through a latent cache.

  The model itself computes them (`transformer.model.forward_layerwise`, each layer's
  attention given the hook `latent_kv`); this function only chooses the hooks. Modes:
  `comp=None` is the model itself, with `kv_fn(l, k_BTKDh, v_BTKDh) -> (k, v)` applied to each
  layer's post-RoPE keys and values if given (e.g. a quantizer); `comp` alone runs attention
  on the stored coefficients at the static ranks of `comp`; `key_rank`/`value_rank` (int
  arrays `(L, K)` or `(B, L, K)`, traceable) instead keep the first `r` coefficients of every
  head's full basis, per sequence if batched — the nested bases' dynamic mode, used for
  allocation search and rank per input (float32, no cache).

  Args:
    params: the model's params (bare or `{"params": ...}`).
    cfg: its config (`dtype` float32 for exactness); its attention one of `COMPRESSIBLE`
      when `comp` is given.
    tokens_BT: token ids.
    comp: bases and ranks, or None.
    cache: a `LatentCache` (requires `comp`, static ranks); the chunk is written at its
      `index` and attention reads every valid slot.
    key_rank: dynamic key ranks (with `value_rank`).
    value_rank: dynamic value ranks.
    kv_fn: transform of K and V in the uncompressed mode.

  Returns:
    `logits_BTV` (float32), or `(logits_BTV, new_cache)` with a cache.

  Raises:
    ValueError: an attention variant not in `COMPRESSIBLE` (with `comp`), or a bad mode.
  """
  B = tokens_BT.shape[0]
  dynamic = key_rank is not None or value_rank is not None
  if dynamic and (key_rank is None or value_rank is None or comp is None or cache is not None):
    raise ValueError("latent.forward: dynamic ranks need both key_rank and value_rank, a "
                     "`comp` for its bases, and no cache.")
  if cache is not None and comp is None:
    raise ValueError("latent.forward: a LatentCache needs its `comp`. Fix: pass comp=.")
  if comp is None:
    if kv_fn is None:
      return Transformer(cfg).apply({"params": param_tree(params)}, tokens_BT)
    hooks = [transformed_kv(kv_fn, l) for l in range(cfg.n_layers)]
  else:
    check_variant(cfg, "latent.forward")  # before the per-layer hooks, naming this call
    hooks = [latent_kv(comp, l, cfg, None if not dynamic else (
        _rank_masks(key_rank, B, l, cfg), _rank_masks(value_rank, B, l, cfg)))
             for l in range(cfg.n_layers)]
  if cache is None:
    return forward_layerwise(params, cfg, tokens_BT, hooks)[0]
  logits, slots, valid = forward_layerwise(params, cfg, tokens_BT, hooks,
                                           tuple(zip(cache.k, cache.v, strict=True)),
                                           cache_valid=cache.valid, offset=cache.index)
  new_k, new_v = zip(*slots, strict=True)
  return logits, LatentCache(tuple(new_k), tuple(new_v), valid, cache.index + tokens_BT.shape[1])


# --------------------------------------------------------------------------------- cache


def init_cache(cfg: Config, comp: Compression, batch: int, length: int) -> LatentCache:
  """An empty latent cache of `length` slots for `comp`'s ranks and bits."""
  check_variant(cfg, "latent.init_cache")
  if cfg.positions == "learned" and length > cfg.max_len:
    raise ValueError(f"latent.init_cache: length={length} exceeds max_len={cfg.max_len}. "
                     "Fix: a shorter length.")
  dtype = {32: jnp.float32, 16: jnp.float16}.get(comp.bits, jnp.uint8)

  def arrays(ranks):
    return tuple(jnp.zeros((batch, length, stored_width(sum(r), comp.bits)), dtype)
                 for r in ranks)

  return LatentCache(arrays(comp.key_ranks), arrays(comp.value_ranks),
                     jnp.zeros((batch, length), bool), jnp.zeros((), jnp.int32))


def weight_compression(params, cfg: Config, rank: int, bits: int = 32, *,
                       pre_rope: bool = False) -> Compression:
  """Data-free bases: per head the right singular vectors of `W_K^{l,k}` and `W_V^{l,k}`
  (`W_Q` for tied keys, `Config.qk_tied`).

  For inputs with identity covariance, the raw key `k = x W_K` has covariance `W_Kᵀ W_K`, whose
  eigenvectors are `W_K`'s right singular vectors; no calibration text is needed. That is the
  basis of the keys before RoPE (`pre_rope=True`); the default keeps the cheaper post-RoPE
  read, for which `analysis.kv.weight_bases` averages over rotations instead.
  Float bits only: integer bits need calibrated steps.
  """
  check_variant(cfg, "weight_compression")
  p = param_tree(params)["blocks"]["attn"]
  K, dh = cfg.n_kv_heads, cfg.d_head
  if not 1 <= rank <= dh:
    raise ValueError(f"weight_compression: rank={rank} must lie in [1, {dh}] (the head width).")

  def bases(w):
    w_LKDDh = split_heads(w.astype(jnp.float32), K, "columns")
    return jnp.swapaxes(serial.svd(w_LKDDh, full_matrices=False)[2], -1, -2)

  ranks = ((rank,) * K,) * cfg.n_layers
  w_k = p["w_k"] if "w_k" in p else p["w_q"]  # `Config.qk_tied`: K = X W_Q
  return make_compression(bases(w_k), bases(p["w_v"]), ranks, ranks, bits, pre_rope=pre_rope)
