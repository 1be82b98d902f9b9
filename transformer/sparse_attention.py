"""Block-sparse attention: sliding window (`local`), BigBird and MoBA, computed on the blocks
they select.

Each is a registry function of `transformer.attention` (its signature and `aux` are stated
there). Blocks of `block_size` positions; query block i holds queries i·bs … i·bs+bs−1. Each
variant is a pattern `allowed(t, s)` on absolute slot indices, used densely with a cache and,
in a forward pass, computed on gathered blocks only. Their `scores`/`weights` are the computed
blocks scattered into the dense `(B, H, T, S)` layout (`finfo.min` / 0 where nothing was
computed); under `jit` an unused `aux` is dead code, so the scatter costs nothing unless
analysis reads it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from transformer.kernel_attention import NEG, _causal, _pad_to, softmax_attention


def _check_block(block_size, name):
  if not isinstance(block_size, int) or block_size < 1:
    raise ValueError(f"{name}: block_size={block_size!r} must be a positive int. "
                     "Fix: pass e.g. block_size=32 (Config.block_size).")


def _random_blocks(i_N, n_random: int):
  """`R(i, r)`: the `n_random` earlier blocks query block `i` reads (a fixed hash of i, r).

  Returns `(blocks_NR, valid_NR)`; a pick is valid when `i ≥ 1` and it repeats no earlier
  pick of the same block.
  """
  i = i_N.astype(jnp.uint32)[:, None]
  r = jnp.arange(n_random, dtype=jnp.uint32)[None, :]
  h = i * jnp.uint32(0x9E3779B1) + r * jnp.uint32(0x85EBCA77) + jnp.uint32(0x27D4EB2F)
  h = (h ^ (h >> 15)) * jnp.uint32(0x2C1B3C6D)
  h = h ^ (h >> 12)
  blocks_NR = (h % jnp.maximum(i, 1)).astype(jnp.int32)
  first_NR = jnp.ones(blocks_NR.shape, bool)
  for rr in range(1, n_random):
    first_NR = first_NR.at[:, rr].set(~(blocks_NR[:, :rr] == blocks_NR[:, rr:rr + 1]).any(-1))
  return blocks_NR, first_NR & (i_N[:, None] >= 1)


def _bigbird_pattern(t_BT, s_BS, *, window, block_size, n_global, n_random):
  """Dense BigBird pattern: causal ∧ (window ∨ global key ∨ key block ∈ R(query block))."""
  t, s = t_BT[:, :, None], s_BS[:, None, :]
  pattern = (s <= t) & ((t - s < window) | (s < n_global))
  if n_random:
    # (B, T, n_random) block indices of each query's random blocks, and which are real.
    random_blocks, random_valid = jax.vmap(lambda i: _random_blocks(i, n_random))(
        t_BT // block_size)
    hit = (random_blocks[:, :, None, :] == (s // block_size)[..., None]) & random_valid[:, :, None]
    pattern |= (s <= t) & hit.any(-1)
  return pattern


def _moba_gate(q_BTHDh, k_BSHDh, t_BT, block_size, top_k_blocks, scale, k_valid_BS=None):
  """MoBA gate: each query picks the `top_k_blocks` complete past blocks `j < t // bs` with
  the largest `q_t · mean(k in block j)`, the mean over the block's real keys (`k_valid_BS`:
  padding is left out; a block with no real key is never picked). Returns the picked block
  indices and whether each pick is real, both `(B, H, T, min(top_k_blocks, n_blocks))`."""
  B, S, H, Dh = k_BSHDh.shape
  n_blocks = -(-S // block_size)
  if k_valid_BS is None:
    k_valid_BS = jnp.ones((B, S), bool)
  valid_BNb = _pad_to(k_valid_BS, 1, n_blocks * block_size, False).reshape(
      B, n_blocks, block_size)
  k_blocks = _pad_to(k_BSHDh.astype(jnp.float32), 1, n_blocks * block_size).reshape(
      B, n_blocks, block_size, H, Dh)
  count_BN = valid_BNb.sum(-1)
  ksum_BNHDh = jnp.einsum("bnc,bnchd->bnhd", valid_BNb.astype(jnp.float32), k_blocks)
  kbar_BNHDh = ksum_BNHDh / jnp.maximum(count_BN, 1)[:, :, None, None]
  gate_BHTN = jnp.einsum("bthd,bnhd->bhtn", q_BTHDh.astype(jnp.float32), kbar_BNHDh) * scale
  past_BTN = jnp.arange(n_blocks)[None, None, :] < (t_BT // block_size)[:, :, None]
  past_BTN &= (count_BN > 0)[:, None, :]
  gate_BHTN = jnp.where(past_BTN[:, None], gate_BHTN, -jnp.inf)
  k = min(top_k_blocks, n_blocks)
  top_gates, picked_blocks = jax.lax.top_k(gate_BHTN, k)
  return picked_blocks, top_gates > -jnp.inf


def _gather(x_BHnDh, idx):
  """`x[b, h, idx[b, h, ...]]`: gather whole blocks (or single slots) of keys or values."""
  return jax.vmap(jax.vmap(lambda x, i: x[i]))(x_BHnDh, idx)


def _block_sparse(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, block_size, parts):
  """Softmax over gathered keys only; the union of `parts` is the pattern.

  Each part is `(ids, allowed, unit)`: `ids` are key blocks of `unit` slots (`unit =
  block_size`, or 1 for single slots), shaped `(B, H, nb, n)` (shared by a query block) or
  `(B, H, nb, bs, n)` (per query); `allowed (B, H, nb, bs, n·unit)` says which gathered keys
  each query reads. Parts must be disjoint. `mask_BTS` (None: nothing beyond the parts) is
  read only at the gathered keys.
  """
  B, T, H, Dh = q_BTHDh.shape
  nb = -(-T // block_size)
  Tp = nb * block_size
  q_BHnbbDh = _pad_to(q_BTHDh, 1, Tp).reshape(B, nb, block_size, H, Dh).transpose(0, 3, 1, 2, 4)
  k_BHSDh = _pad_to(k_BSHDh, 1, Tp).transpose(0, 2, 1, 3)
  v_BHSDh = _pad_to(v_BSHDh, 1, Tp).transpose(0, 2, 1, 3)
  if mask_BTS is not None:
    mask_Bnbbs = _pad_to(_pad_to(mask_BTS, 1, Tp, False), 2, Tp, False).reshape(
        B, nb, block_size, Tp)
  scores, values, slots, allowed = [], [], [], []
  for ids, ok, unit in parts:
    per_query = ids.ndim == 5
    n_units = Tp // unit
    ids_c = jnp.clip(ids, 0, n_units - 1)
    k_g = _gather(k_BHSDh.reshape(B, H, n_units, unit, Dh), ids_c)
    v_g = _gather(v_BHSDh.reshape(B, H, n_units, unit, Dh), ids_c)
    k_g = k_g.reshape(k_g.shape[:-3] + (-1, Dh))
    v_g = v_g.reshape(v_g.shape[:-3] + (-1, Dh))
    eq = "bhiqd,bhiqnd->bhiqn" if per_query else "bhiqd,bhind->bhiqn"
    scores.append(jnp.einsum(eq, q_BHnbbDh, k_g).astype(jnp.float32) * scale)
    in_unit = jnp.arange(unit).reshape((1,) * ids.ndim + (unit,))
    keys = ((ids * unit)[..., None] + in_unit).reshape(ids.shape[:-1] + (-1,))
    keys_q = keys if per_query else jnp.broadcast_to(keys[:, :, :, None], ok.shape)
    ok = ok & (keys_q >= 0) & (keys_q < Tp)
    if mask_BTS is not None:
      ok &= jax.vmap(lambda mb, kb: jnp.take_along_axis(mb[None], kb, axis=-1), (0, 0))(
          mask_Bnbbs, jnp.clip(keys_q, 0, Tp - 1))
    values.append((v_g, per_query))
    slots.append(keys_q)
    allowed.append(ok)
  s_all = jnp.where(jnp.concatenate(allowed, -1), jnp.concatenate(scores, -1), NEG)
  w_all = jax.nn.softmax(s_all, axis=-1)
  out, start = 0.0, 0
  for (v_g, per_query), ok in zip(values, allowed, strict=True):
    w = w_all[..., start:start + ok.shape[-1]].astype(v_BSHDh.dtype)
    start += ok.shape[-1]
    eq = "bhiqn,bhiqnd->bhiqd" if per_query else "bhiqn,bhind->bhiqd"
    out = out + jnp.einsum(eq, w, v_g)
  out_BTHDh = out.transpose(0, 2, 3, 1, 4).reshape(B, Tp, H, Dh)[:, :T]
  # The dense view for analysis: scatter the computed blocks (dead code when unused).
  S = k_BSHDh.shape[1]
  ok_all = jnp.concatenate(allowed, -1).reshape(B, H, Tp, -1)
  cols = jnp.where(ok_all, jnp.concatenate(slots, -1).reshape(B, H, Tp, -1), Tp)
  rows = jnp.broadcast_to(jnp.arange(Tp)[None, None, :, None], cols.shape)
  bi = jnp.arange(B)[:, None, None, None]
  hi = jnp.arange(H)[None, :, None, None]
  scores_BHTS = jnp.full((B, H, Tp, Tp), NEG).at[bi, hi, rows, cols].set(
      s_all.reshape(B, H, Tp, -1), mode="drop")[:, :, :T, :S]
  weights_BHTS = jnp.zeros((B, H, Tp, Tp)).at[bi, hi, rows, cols].set(
      w_all.reshape(B, H, Tp, -1), mode="drop")[:, :, :T, :S]
  keys_read_BHT = ok_all.sum(-1)[:, :, :T]
  return out_BTHDh, {"scores": scores_BHTS, "weights": weights_BHTS, "keys_read": keys_read_BHT}


def _fast(T, S, offset):
  return T == S and isinstance(offset, int) and offset == 0


def _slots(B, T, S, offset):
  t_BT = jnp.broadcast_to(offset + jnp.arange(T), (B, T))
  s_BS = jnp.broadcast_to(jnp.arange(S), (B, S))
  return t_BT, s_BS


def _window_part(B, H, nb, block_size, window, n_global):
  """Key blocks `i − n_prev … i` of every query block, and the causal window inside them."""
  n_prev = -(-(window - 1) // block_size)
  i_nb = jnp.arange(nb)
  ids_nbN = i_nb[:, None] - n_prev + jnp.arange(n_prev + 1)[None]
  keys_nbN = (ids_nbN[:, :, None] * block_size + jnp.arange(block_size)[None, None]).reshape(
      nb, -1)
  t_nbb1 = (i_nb[:, None] * block_size + jnp.arange(block_size)[None])[..., None]
  s_nb1N = keys_nbN[:, None, :]
  ok = (s_nb1N <= t_nbb1) & (t_nbb1 - s_nb1N < window) & (s_nb1N >= n_global)
  ids = jnp.broadcast_to(ids_nbN, (B, H) + ids_nbN.shape)
  return (ids, jnp.broadcast_to(ok, (B, H) + ok.shape), block_size), t_nbb1


def local_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, window, block_size,
                    offset=0):
  """Causal sliding-window attention that computes only the blocks inside the window.

  Query `t` reads keys `s` with `t − w < s ≤ t`. Query block `i` is scored against key blocks
  `i − ⌈(w−1)/bs⌉ … i`, so work and score memory grow as `T · w`, not `T²`. T not divisible
  by `block_size` is padded (padding keys are masked, padded queries dropped).

  Args:
    q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale: as in `softmax_attention`.
    window: width `w ≥ 1`.
    block_size: positions per block.
    offset: cache slot of query 0 (a cache uses the dense masked window).

  Returns:
    `(out_BTHDh, aux)`: dense-layout `scores`/`weights` of the computed blocks, and
    `keys_read (B, H, T)`, the keys each query actually read.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 10, 2, 4))
    >>> out, aux = local_attention(q, q, q, None, scale=0.5, window=3, block_size=4)
    >>> aux["keys_read"][0, 0].tolist()
    [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
  """
  _check_block(block_size, "local_attention")
  if not isinstance(window, int) or window < 1:
    raise ValueError(f"local_attention: window={window!r} must be a positive int. "
                     "Fix: set Config.window, e.g. window=32.")
  B, T, H, _ = q_BTHDh.shape
  S = k_BSHDh.shape[1]
  if not _fast(T, S, offset):
    mask_BTS = _causal(B, T, S) if mask_BTS is None else mask_BTS
    t_BT, s_BS = _slots(B, T, S, offset)
    t, s = t_BT[:, :, None], s_BS[:, None, :]
    return softmax_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS & (s <= t) & (t - s < window),
                             scale=scale)
  nb = -(-T // block_size)
  window_part, _ = _window_part(B, H, nb, block_size, window, 0)
  return _block_sparse(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale=scale,
                       block_size=block_size, parts=[window_part])


def bigbird_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, window, block_size,
                      n_global, n_random, offset=0):
  """Causal BigBird: sliding window + global tokens + random earlier blocks, static shapes.

  Query `t` reads `s ≤ t` when `t − s < w` (window), or `s < n_global` (the first tokens are
  global: every later query reads them, and they, like every token, read only their past),
  or `s` lies in one of the `n_random` blocks `R(t // bs, r) < t // bs` picked by a fixed hash
  of the query block (so forward and decode pick the same). Computed per query block on the
  window blocks, the `n_global` keys and the random blocks; overlaps are counted once.

  Args:
    q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale: as in `softmax_attention`.
    window: sliding window width `w`.
    block_size: positions per block.
    n_global: number of leading global tokens.
    n_random: random key blocks per query block.
    offset: cache slot of query 0.

  Returns:
    `(out_BTHDh, aux)` as in `local_attention`.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 16, 1, 4))
    >>> out, aux = bigbird_attention(q, q, q, None, scale=0.5, window=2, block_size=4,
    ...                              n_global=1, n_random=1)
    >>> int(aux["keys_read"][0, 0, 15]) <= 2 + 1 + 4
    True
  """
  _check_block(block_size, "bigbird_attention")
  for name, value, low in (("window", window, 1), ("n_global", n_global, 0),
                           ("n_random", n_random, 0)):
    if not isinstance(value, int) or value < low:
      raise ValueError(f"bigbird_attention: {name}={value!r} must be an int >= {low}. "
                       f"Fix: set Config.{name}.")
  B, T, H, _ = q_BTHDh.shape
  S = k_BSHDh.shape[1]
  if not _fast(T, S, offset):
    mask_BTS = _causal(B, T, S) if mask_BTS is None else mask_BTS
    t_BT, s_BS = _slots(B, T, S, offset)
    pattern = _bigbird_pattern(t_BT, s_BS, window=window, block_size=block_size,
                               n_global=n_global, n_random=n_random)
    return softmax_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS & pattern, scale=scale)
  nb = -(-T // block_size)
  window_part, t_nbb1 = _window_part(B, H, nb, block_size, window, n_global)
  parts = [window_part]
  if n_global:
    g = jnp.arange(n_global)
    ok_g = jnp.broadcast_to(g[None, None] <= t_nbb1, (B, H, nb, block_size, n_global))
    parts.append((jnp.broadcast_to(g, (B, H, nb, n_global)), ok_g, 1))
  if n_random:
    blocks_nbR, valid_nbR = _random_blocks(jnp.arange(nb), n_random)
    in_block = jnp.arange(block_size)[None, None]
    keys_r = (blocks_nbR[:, :, None] * block_size + in_block).reshape(nb, -1)
    valid_r = jnp.repeat(valid_nbR, block_size, axis=1)[:, None, :]
    s_r = keys_r[:, None, :]
    ok_r = valid_r & (s_r >= n_global) & (t_nbb1 - s_r >= window)
    parts.append((jnp.broadcast_to(blocks_nbR, (B, H) + blocks_nbR.shape),
                  jnp.broadcast_to(ok_r, (B, H) + ok_r.shape), block_size))
  return _block_sparse(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale=scale,
                       block_size=block_size, parts=parts)


def moba_attention(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, *, scale, block_size, top_k_blocks,
                   offset=0):
  """Mixture of block attention (MoBA): own block plus the top-k past blocks a gate picks.

  Each query `t` (per head) reads its own block causally and the `top_k_blocks` complete
  past blocks `j < t // bs` with the largest gate `q_t · mean(k in block j)` (the mean over
  the block's real keys: padding, which `mask_BTS` hides from every query, never moves the
  gate, and a block of padding only is never picked). The gate reads only complete past
  blocks, so the selection, like the output, depends only on `s ≤ t`. It has no parameters:
  q and k learn through the attention they select (top-k passes no gradient).
  Only the own block and the selected blocks are scored.

  Args:
    q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale: as in `softmax_attention`.
    block_size: positions per block.
    top_k_blocks: past blocks per query (fewer exist for the first blocks).
    offset: cache slot of query 0.

  Returns:
    `(out_BTHDh, aux)` as in `local_attention`, plus `aux["blocks"] (B, H, T, k)`, the picked
    blocks, and `aux["picked"]`, which of them are real; `keys_read` counts the keys actually
    read, so the key budget is measured, not assumed.

  Example:
    >>> import jax
    >>> q = jax.random.normal(jax.random.key(0), (1, 16, 1, 4))
    >>> out, aux = moba_attention(q, q, q, None, scale=0.5, block_size=4, top_k_blocks=1)
    >>> aux["keys_read"][0, 0, ::4].tolist()  # own-block keys + one past block of 4
    [1, 5, 5, 5]
  """
  _check_block(block_size, "moba_attention")
  if not isinstance(top_k_blocks, int) or top_k_blocks < 1:
    raise ValueError(f"moba_attention: top_k_blocks={top_k_blocks!r} must be a positive int. "
                     "Fix: set Config.top_k_blocks, e.g. 2.")
  B, T, H, _ = q_BTHDh.shape
  S = k_BSHDh.shape[1]
  t_BT, s_BS = _slots(B, T, S, offset)
  k_valid_BS = None if mask_BTS is None else mask_BTS.any(axis=1)  # padding: not in the gate
  moba_blocks, moba_picked = _moba_gate(q_BTHDh, k_BSHDh, t_BT, block_size, top_k_blocks, scale,
                                        k_valid_BS)
  extra = {"blocks": moba_blocks, "picked": moba_picked}
  if not _fast(T, S, offset):
    mask_BTS = _causal(B, T, S) if mask_BTS is None else mask_BTS
    t, s = t_BT[:, None, :, None], s_BS[:, None, None, :]
    hit = (moba_blocks[..., None, :] == (s // block_size)[..., None]) & moba_picked[..., None, :]
    pattern_BHTS = (s <= t) & ((s // block_size == t // block_size) | hit.any(-1))
    scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHDh, k_BSHDh).astype(jnp.float32) * scale
    scores_BHTS = jnp.where(mask_BTS[:, None] & pattern_BHTS, scores_BHTS, NEG)
    weights_BHTS = jax.nn.softmax(scores_BHTS, axis=-1)
    out = jnp.einsum("bhts,bshd->bthd", weights_BHTS.astype(v_BSHDh.dtype), v_BSHDh)
    keys_read = (mask_BTS[:, None] & pattern_BHTS).sum(-1)
    return out, {"scores": scores_BHTS, "weights": weights_BHTS, "keys_read": keys_read,
                 **extra}
  nb = -(-T // block_size)
  own_nbN = jnp.arange(nb)[:, None] * block_size + jnp.arange(block_size)[None, :]
  own_ok = jnp.broadcast_to(own_nbN[:, None, :] <= own_nbN[:, :, None],
                            (B, H, nb, block_size, block_size))
  own = (jnp.broadcast_to(jnp.arange(nb)[:, None], (B, H, nb, 1)), own_ok, block_size)
  Tp = nb * block_size
  blocks = _pad_to(moba_blocks, 2, Tp).reshape(B, H, nb, block_size, -1)
  picked = _pad_to(moba_picked, 2, Tp, False).reshape(B, H, nb, block_size, -1)
  selected = (blocks, jnp.repeat(picked, block_size, axis=-1), block_size)
  out, aux = _block_sparse(q_BTHDh, k_BSHDh, v_BSHDh, mask_BTS, scale=scale,
                           block_size=block_size, parts=[own, selected])
  return out, {**aux, **extra}
