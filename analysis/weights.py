"""Every named weight matrix of a model, and the per-head circuits `W_QK^h`, `W_OV^h`.

For head `h` with query/key/value/output slices `W_Q^h, W_K^h, W_V^h: (D, Dh)` and
`W_O^h: (Dh, D)`:

.. math::
  W_{QK}^h = W_Q^h (W_K^h)^\\top \\;(D \\times D,\\ \\text{rank} \\le D_h), \\qquad
  W_{OV}^h = W_V^h W_O^h \\;(D \\times D,\\ \\text{rank} \\le D_h),

so the attention score of tokens `x_i, x_j` is `x_i W_QK^h x_jᵀ / √Dh` (before RoPE) and head `h`
writes `A (X W_OV^h)` into the residual stream. Circuits are kept factored (`Factored`):
their spectra come from the `Dh × Dh` core (`spectra.factored_singular_values`), and the
`D × D` product is formed only on request. With grouped-query attention, query head `h` reads
key/value head `h // (H / K)`. Which leaves are matrices, and their roles, come from
`transformer.names`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from analysis.inputs import check_finite_weights
from transformer import Config, names
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


def circuits(params, cfg: Config) -> dict[str, Factored]:
  """The stacked per-head circuits of all layers, factored.

  Args:
    params: the model's parameters (bare or as `{"params": ...}`).
    cfg: its config.

  Returns:
    `{"qk": Factored(W_Q (L, H, D, Dh), W_K (L, H, D, Dh)),
    "ov": Factored(W_V (L, H, D, Dh), W_Oᵀ (L, H, D, Dh))}`; `.dense()` gives
    `(L, H, D, D)`.

  Example:
    >>> import jax, transformer, analysis
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> qk = analysis.circuits(params, cfg)["qk"]
    >>> analysis.factored_singular_values(qk.left, qk.right).shape == (
    ...     cfg.n_layers, cfg.n_heads, cfg.d_head)
    True
  """
  attn = param_tree(params)["blocks"]["attn"]
  H, K = cfg.n_heads, cfg.n_kv_heads

  def heads(w, n):  # (L, D, n·Dh), n = H or K -> (L, H, D, Dh): each K head serves H / K
    return jnp.repeat(names.split_heads(w, n, "columns"), H // n, axis=1)

  w_o_LHDDh = jnp.swapaxes(names.split_heads(attn["w_o"], H, "rows"), -1, -2)
  w_k = attn["w_k"] if "w_k" in attn else attn["w_q"]  # `Config.qk_tied`: K = X W_Q
  return {"qk": Factored(heads(attn["w_q"], H), heads(w_k, K)),
          "ov": Factored(heads(attn["w_v"], K), w_o_LHDDh)}


def matrices(params, cfg: Config, *, include_circuits: bool = True,
             check_finite: bool = True) -> list[Matrix]:
  """Every named weight matrix, one entry per layer, then the per-head circuits.

  Args:
    params: the model's parameters (with or without the `params` wrapper).
    cfg: its config.
    include_circuits: add `W_QK^h` and `W_OV^h` (factored) for every layer and head.
    check_finite: refuse (one line, naming the leaf) parameters holding NaN or inf, outside
      `jit`; under `jit` the values are unknown while tracing and pass through. `False` skips
      it (a reduction per leaf and a host read).

  Returns:
    A list of `Matrix(path, role, layer, head, array)` in forward order: embeddings, then for
    each layer its block matrices in the order of `transformer.names.NAMES` (`w_q, w_k, w_v,
    w_o, [w_gate], w_1, w_2`), then the output matrix (`embed/embedding^T` when tied), then
    the circuits `blocks/attn/W_QK` and `blocks/attn/W_OV`.

  Example:
    >>> import jax, transformer, analysis
    >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
    >>> [m.path for m in analysis.matrices(params, cfg) if m.layer == 0][:2]
    ['blocks/attn/w_q', 'blocks/attn/w_k']
  """
  p = param_tree(params)
  if check_finite:
    check_finite_weights(p, "analysis.matrices", "the parameter")
  order = list(names.NAMES)
  found = []  # (position in NAMES, path, role, leaf) of every weight matrix
  for key_path, leaf in jax.tree_util.tree_leaves_with_path(p):
    key = names.key_of(key_path)
    if key is not None and names.NAMES[key].kind == "weight":
      found.append((order.index(key), names.path_str(key_path), names.NAMES[key].role, leaf))
  found.sort(key=lambda f: f[0])
  stacked = [f for f in found if f[1].startswith("blocks/")]
  first = stacked[0][0] if stacked else len(order)
  out = [Matrix(path, role, None, None, w) for i, path, role, w in found
         if not path.startswith("blocks/") and i < first]
  for l in range(cfg.n_layers):
    out += [Matrix(path, role, l, None, w[l]) for _, path, role, w in stacked]
  out += [Matrix(path, role, None, None, w) for i, path, role, w in found
          if not path.startswith("blocks/") and i >= first]
  if "unembed" not in p:
    out.append(Matrix("embed/embedding^T", names.NAMES["unembed/w_out"].role, None, None,
                      p["embed"]["embedding"].T))
  if include_circuits:
    for name, circuit in circuits(params, cfg).items():
      for l in range(cfg.n_layers):
        for h in range(cfg.n_heads):
          out.append(Matrix(f"blocks/attn/W_{name.upper()}", "circuit", l, h,
                            Factored(circuit.left[l, h], circuit.right[l, h])))
  return out
