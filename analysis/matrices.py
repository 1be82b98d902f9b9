"""Every named weight matrix of a model, and the per-head circuits `W_QK^h`, `W_OV^h`.

For head `h` with query/key/value/output slices `W_Q^h, W_K^h, W_V^h: (d, dh)` and
`W_O^h: (dh, d)`:

.. math::
  W_{QK}^h = W_Q^h (W_K^h)^\\top \\;(d \\times d,\\ \\text{rank} \\le dh), \\qquad
  W_{OV}^h = W_V^h W_O^h \\;(d \\times d,\\ \\text{rank} \\le dh),

so the attention score of tokens `x_i, x_j` is `x_i W_QK^h x_jᵀ / √dh` (before RoPE) and head `h`
writes `A (X W_OV^h)` into the residual stream. Circuits are kept factored (`Factored`):
their spectra come from the `dh × dh` core (`spectra.factored_singular_values`), and the
`d × d` product is formed only on request. With grouped-query attention, query head `h` reads
key/value head `h // (H / Hkv)`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from transformer import Config
from transformer.model import param_tree


class Factored(NamedTuple):
  """A low-rank product `left @ rightᵀ`, batched over leading axes.

  Attributes:
    left: `(..., m, r)`.
    right: `(..., n, r)`.
  """

  left: jax.Array
  right: jax.Array

  def dense(self) -> jax.Array:
    """The `(..., m, n)` product."""
    return self.left @ jnp.swapaxes(self.right, -1, -2)


class Matrix(NamedTuple):
  """One entry of `matrices`.

  Attributes:
    path: parameter path (`blocks/attn/w_q`) or circuit name (`blocks/attn/W_QK`).
    role: embedding, projection, feed-forward, output, or circuit.
    layer: layer index, or None for the embedding and output matrices.
    head: head index for circuits, else None.
    array: the `(d_in, d_out)` matrix, or a `Factored` circuit.
  """

  path: str
  role: str
  layer: int | None
  head: int | None
  array: Any


_BLOCK_ROLES = {"w_q": "projection", "w_k": "projection", "w_v": "projection",
                "w_o": "projection", "w_gate": "feed-forward", "w_1": "feed-forward",
                "w_2": "feed-forward"}


def circuits(params, cfg: Config) -> dict[str, Factored]:
  """The stacked per-head circuits of all layers, factored.

  Returns:
    `{"qk": Factored(W_Q (L, H, d, dh), W_K (L, H, d, dh)),
    "ov": Factored(W_V (L, H, d, dh), W_Oᵀ (L, H, d, dh))}`; `.dense()` gives
    `(L, H, d, d)`.

  Example:
    >>> qk = circuits(params, cfg)["qk"]
    >>> spectra.factored_singular_values(qk.left, qk.right)  # (L, H, dh)
  """
  attn = param_tree(params)["blocks"]["attn"]
  L, d, H, K, dh = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head

  def heads(w, n):  # (L, d, n·dh) -> (L, n, d, dh), then GQA: key/value head per query head
    w_LNdD = jnp.swapaxes(w.reshape(L, d, n, dh), 1, 2)
    return jnp.repeat(w_LNdD, H // n, axis=1)

  w_o_LHdD = jnp.swapaxes(attn["w_o"].reshape(L, H, dh, d), -1, -2)
  return {"qk": Factored(heads(attn["w_q"], H), heads(attn["w_k"], K)),
          "ov": Factored(heads(attn["w_v"], K), w_o_LHdD)}


def matrices(params, cfg: Config, *, include_circuits: bool = True) -> list[Matrix]:
  """Every named weight matrix, one entry per layer, then the per-head circuits.

  Args:
    params: the model's parameters (with or without the `params` wrapper).
    cfg: its config.
    include_circuits: add `W_QK^h` and `W_OV^h` (factored) for every layer and head.

  Returns:
    A list of `Matrix(path, role, layer, head, array)` in forward order: embeddings, then for
    each layer `w_q, w_k, w_v, w_o, [w_gate], w_1, w_2`, then the output matrix (`embed/
    embedding^T` when tied), then the circuits `blocks/attn/W_QK` and `blocks/attn/W_OV`.

  Example:
    >>> [m.path for m in matrices(params, cfg) if m.layer == 0][:2]
    ['blocks/attn/w_q', 'blocks/attn/w_k']
  """
  p = param_tree(params)
  out = [Matrix(f"{name}/embedding", "embedding", None, None, p[name]["embedding"])
         for name in ("embed", "pos_embed") if name in p]
  blocks = {**p["blocks"]["attn"], **p["blocks"]["ffn"]}
  for l in range(cfg.n_layers):
    for name, role in _BLOCK_ROLES.items():
      if name in blocks:
        group = "attn" if name in p["blocks"]["attn"] else "ffn"
        out.append(Matrix(f"blocks/{group}/{name}", role, l, None, blocks[name][l]))
  if "unembed" in p:
    out.append(Matrix("unembed/w_out", "output", None, None, p["unembed"]["w_out"]))
  else:
    out.append(Matrix("embed/embedding^T", "output", None, None, p["embed"]["embedding"].T))
  if include_circuits:
    for name, circuit in circuits(params, cfg).items():
      for l in range(cfg.n_layers):
        for h in range(cfg.n_heads):
          out.append(Matrix(f"blocks/attn/W_{name.upper()}", "circuit", l, h,
                            Factored(circuit.left[l, h], circuit.right[l, h])))
  return out
