"""The KV hook: what an attention layer stores of its keys and values, and what it reads back.

It is one function, `kv_hook(inputs, slot, offset)` (`KVHook`); the default, `dense_kv`,
writes `K` and `V` into the layer's slot of a cache and reads them all (in the layer scan,
`stacked_kv` does so on the whole `KVCache`, carried through the scan). A hook may read other
coordinates (`transformer.latent` reads basis coefficients: queries, keys and values in a
key/value basis, the output mapped back before `W_O`); the attention function of the registry
and everything around it (norms, residual, feed-forward, embedding, unembedding) is the
model's, unchanged (`transformer.block.Attention` calls the hook).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax


class KVInputs(NamedTuple):
  """What a KV hook is given: one chunk's projections, before and after RoPE.

  Attributes:
    q: `(B, T, H, Dh)` queries, after RoPE (as the attention reads them).
    k: `(B, T, K, Dh)` keys, after RoPE (as the dense cache stores them).
    v: `(B, T, K, Dh)` values.
    k_raw: `(B, T, K, Dh)` keys before RoPE (`k` itself without RoPE): a hook that compresses
      before the rotation reads these, and rotates what it rebuilds with `rope`.
    pos: `(B, T)` positions of the chunk.
  """

  q: jax.Array
  k: jax.Array
  v: jax.Array
  k_raw: jax.Array
  pos: jax.Array


# `kv_hook(inputs, slot, offset) -> (q_BTHX, k_BSKX, v_BSKY, slot, out_fn)`: the queries, keys
# and values the attention function reads (`X`, `Y` may differ from `Dh`), the layer's new
# cache slot, and `out_fn`, which maps the attention's output `(B, T, H, Y)` back to
# `(B, T, H, Dh)` before `W_O`.
KVHook = Callable[..., tuple]


def _identity(x):
  return x


def _write(cache, x_BTKDh, offset, *lead):
  """`cache` `(*lead, B, K, S, Dh)` with the chunk written at slot `offset` (of entry `lead`)."""
  x = x_BTKDh.transpose(0, 2, 1, 3).astype(cache.dtype)[(None,) * len(lead)]
  return jax.lax.dynamic_update_slice(cache, x, (*lead, 0, 0, offset, 0))


def dense_kv(inputs: KVInputs, slot, offset):
  """The default KV hook: attend to this chunk's `K`, `V`, or write them into the layer's
  cache `slot = (k_BKSDh, v_BKSDh)` at `offset` and attend to every slot (read as `k_BSKDh`,
  a transpose that XLA folds into the einsums, whose batch axes `(B, K)` lead)."""
  if slot is None:
    return inputs.q, inputs.k, inputs.v, None, _identity
  k_BKSDh, v_BKSDh = _write(slot[0], inputs.k, offset), _write(slot[1], inputs.v, offset)
  return (inputs.q, k_BKSDh.transpose(0, 2, 1, 3), v_BKSDh.transpose(0, 2, 1, 3),
          (k_BKSDh, v_BKSDh), _identity)


def stacked_kv(inputs: KVInputs, slot, offset):
  """`dense_kv` on the whole cache, `slot = (k_LBKSDh, v_LBKSDh, l)`: the hook of the layer
  scan, which carries the cache and writes it in place (when the caller donates it, as
  `transformer.decode_step` does); a layer's slot scanned in and stacked out would be a second
  cache, written whole at every decoded token.

  A step still pays for XLA:CPU copying layer `l`'s slice before the einsums (one more read
  and a write of each byte): `L` separate arrays read by an unrolled layer loop
  (`forward_layerwise`, `dense_kv`) skip it, 1.7–2.6× faster at `T` = 2048–8192 in
  `experiments.benchmarks.kv_cache`, but compile in time linear in `L` (0.3 s per layer)."""
  if slot is None:
    return dense_kv(inputs, None, offset)
  k_LBKSDh, v_LBKSDh, l = slot
  k_LBKSDh, v_LBKSDh = _write(k_LBKSDh, inputs.k, offset, l), _write(v_LBKSDh, inputs.v, offset, l)
  return (inputs.q, k_LBKSDh[l].transpose(0, 2, 1, 3), v_LBKSDh[l].transpose(0, 2, 1, 3),
          (k_LBKSDh, v_LBKSDh, l), _identity)


class KVCache(NamedTuple):
  """Keys and values of every layer for `S` slots, plus which slots hold real tokens.

  Attributes:
    k: `(L, B, K, S, Dh)` keys (after RoPE): heads before slots, so that decoding reads each
      head's keys in place; stored `(L, B, S, K, Dh)`, every layer's keys and values would be
      transposed into a fresh buffer at every decoded token (`dense_kv`).
    v: `(L, B, K, S, Dh)` values.
    valid: `(B, S)` True where a slot holds a real (written, non-padding) token.
    index: `()` int32, the next slot to write.
  """

  k: jax.Array
  v: jax.Array
  valid: jax.Array
  index: jax.Array
