"""The naming authority: what every parameter name of `transformer` is, in one table.

Every consumer of parameter names reads this module and nothing else: the preface catalog
(`transformer.catalog`), the analysis list of matrices (`analysis.matrices`), the optimizer
roles (`optim.labels`, `optim.select`, the per-head split of Muon) and the weight-decay mask
(`decay_mask`). Adding a matrix name is one line in `NAMES`.

Paths become strings by one rule, `path_str`: `jax.tree_util.keystr(path, simple=True,
separator="/")`, e.g. `blocks/attn/w_q`. A key of `NAMES` names a leaf when it is a suffix of
that string on `/` boundaries (`w_q` names `blocks/attn/w_q` and `params/blocks/attn/w_q`;
`embed/embedding` does not name `pos_embed/embedding`); the longest such key wins. A leaf no
key names is a vector: never orthogonalized, never decayed, not in the catalog.

Heads: `Name.heads` says which side of an attention projection splits into heads, and
`split_heads` / `merge_heads` are the one split and its inverse (Muon's per-head blocks, the
orthogonal-heads penalty, the per-head circuits and logit bounds of `analysis`).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

import jax

Kind = Literal["weight", "vector", "product"]
Side = Literal["columns", "rows"]
Update = Literal["hidden", "embedding", "unembedding", "vector"]
UPDATE_ROLES: tuple[str, ...] = ("hidden", "embedding", "unembedding", "vector")


class Name(NamedTuple):
  """What one parameter name (or input-derived product) is.

  Attributes:
    role: the preface's role: embedding, projection, attention scores, aggregation,
      feed-forward, output, or vector.
    update: the optimizer's role (one of `UPDATE_ROLES`): `hidden` matrices go to Muon.
    step: the preface's catalog number (1-6); `None` for vectors.
    description: what the matmul does, in the preface's words.
    kind: `weight` (a matrix parameter), `vector` (norm scales, biases) or `product` (a
      matrix computed from the input, with no parameter).
    heads: for attention projections, `(side, count)`: which side splits into heads
      (`columns` of `w_q, w_k, w_v`, `rows` of `w_o`) and into how many (`H` query heads or
      `K` key/value heads); else `None`.
  """

  role: str
  update: Update
  step: int | None
  description: str
  kind: Kind = "weight"
  heads: tuple[Side, Literal["H", "K"]] | None = None


_VECTOR = Name("vector", "vector", None, "norm scale or bias: not a matrix", "vector")

# In forward order (the catalog's order). One line per name.
NAMES: dict[str, Name] = {
    "embed/embedding": Name("embedding", "embedding", 1, "one-hot token x E = token vector"),
    "pos_embed/embedding": Name("embedding", "embedding", 1,
                                "position lookup, added to the token vector"),
    "w_q": Name("projection", "hidden", 2, "X W_Q = Q: queries ask", heads=("columns", "H")),
    "w_k": Name("projection", "hidden", 2, "X W_K = K: keys address", heads=("columns", "K")),
    "w_v": Name("projection", "hidden", 2, "X W_V = V: values carry content",
                heads=("columns", "K")),
    "Q K^T": Name("attention scores", "vector", 3,
                  "the only product of two input-derived matrices: who sees whom", "product"),
    "A V": Name("aggregation", "vector", 4, "attention weights mix value vectors", "product"),
    "w_o": Name("projection", "hidden", 2, "heads' outputs back to the residual stream",
                heads=("rows", "H")),
    "w_gate": Name("feed-forward", "hidden", 5, "SwiGLU gate, D -> F"),
    "w_1": Name("feed-forward", "hidden", 5, "expand, D -> F"),
    "w_2": Name("feed-forward", "hidden", 5, "compress, F -> D"),
    "unembed/w_out": Name("output", "unembedding", 6, "hidden x W_out = logits"),
    "scale": _VECTOR,
    "bias": _VECTOR,
    **{f"b_{p}": _VECTOR for p in ("q", "k", "v", "o", "gate", "1", "2")},
}


# Where each name sits in a tree of this library (`transformer.init`): a regex of the segments
# before it (a name added to `NAMES` without a line here sits in a block: `blocks/<sublayer>`).
# A name of ours is ours only there (`library_key`): a user's `attn/w_q` or a bare
# `{"w_1": W}` is someone else's leaf, with someone else's layout.
_BLOCK = {"w_q": "attn", "w_k": "attn", "w_v": "attn", "w_o": "attn",
          **{f"b_{p}": "attn" for p in "qkvo"},
          "w_gate": "ffn", "w_1": "ffn", "w_2": "ffn", "b_gate": "ffn", "b_1": "ffn", "b_2": "ffn"}
PLACES: dict[str, str] = {
    **{k: rf"blocks/{v}" for k, v in _BLOCK.items()},
    "scale": r"blocks/norm_\d+|norm_f", "bias": r"blocks/norm_\d+|norm_f",
}


def path_str(path) -> str:
  """The string of a `jax.tree_util` key path: `blocks/attn/w_q`.

  Example:
    >>> import jax
    >>> from transformer.names import path_str
    >>> tree = {"blocks": {"attn": {"w_q": 0}}}
    >>> path_str(jax.tree_util.tree_leaves_with_path(tree)[0][0])
    'blocks/attn/w_q'
  """
  return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def key_of(path) -> str | None:
  """The key of `NAMES` that names `path` (a key path or its string), or `None`.

  Example:
    >>> from transformer.names import key_of
    >>> key_of("params/blocks/attn/w_q"), key_of("pos_embed/embedding"), key_of("x/w_z")
    ('w_q', 'pos_embed/embedding', None)
  """
  parts = (path if isinstance(path, str) else path_str(path)).split("/")
  for i in range(len(parts)):
    key = "/".join(parts[i:])
    if key in NAMES:
      return key
  return None


def library_key(path) -> str | None:
  """The key of `NAMES` naming `path` where a tree of this library puts it, else `None`.

  `key_of` matches a name anywhere (`w_q` names `x/w_q`); this one only at its place in
  `transformer.init`'s tree (`PLACES`), so that a user's leaf that happens to share one of our
  names (`attn/w_q` of shape `(D, H, Dh)`, a bare `{"w_1": W}`) never gets our layout.

  Example:
    >>> from transformer.names import library_key
    >>> library_key("params/blocks/attn/w_q"), library_key("attn/w_q"), library_key("w_1")
    ('w_q', None, None)
    >>> library_key("embed/embedding"), library_key("blocks/norm_2/scale")
    ('embed/embedding', 'scale')
  """
  s = path if isinstance(path, str) else path_str(path)
  key = key_of(s)
  if key is None or "/" in key:
    return key  # `embed/embedding`, `unembed/w_out`: the key carries its place
  head = s[: -len(key)].rstrip("/")
  return key if re.search(rf"(^|/)({PLACES.get(key, r'blocks/[^/]+')})$", head) else None


def name_of(path) -> Name:
  """The `Name` of `path` (a key path or its string); a vector when no key names it.

  Example:
    >>> from transformer.names import name_of
    >>> name_of("blocks/ffn/w_2").role, name_of("blocks/norm_1/scale").update
    ('feed-forward', 'vector')
  """
  key = key_of(path)
  return _VECTOR if key is None else NAMES[key]


def update_role(path) -> str:
  """The optimizer role of `path`: `hidden`, `embedding`, `unembedding` or `vector`."""
  return name_of(path).update


def is_matrix(path) -> bool:
  """Whether `path` names a weight matrix (any role but vector)."""
  return name_of(path).kind == "weight"


def decays(path, leaf=None) -> bool:
  """Whether weight decay applies to the leaf at `path`: every weight matrix, no vector.

  `leaf` is accepted (and ignored) so that `decays` maps over a tree with
  `jax.tree_util.tree_map_with_path`.

  Example:
    >>> from transformer.names import decays
    >>> decays("embed/embedding"), decays("blocks/attn/w_o"), decays("blocks/attn/b_o")
    (True, True, False)
  """
  del leaf
  return is_matrix(path)


def decay_mask(params):
  """The weight-decay mask of `params` (`True` at every weight matrix), for `optax.masked`.

  Example:
    >>> import jax, transformer
    >>> from transformer.names import decay_mask
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> mask = decay_mask(params)
    >>> bool(mask["blocks"]["ffn"]["w_1"]), bool(mask["blocks"]["norm_1"]["scale"])
    (True, False)
  """
  return jax.tree_util.tree_map_with_path(decays, params)


def catalog_order() -> list[str]:
  """The keys of the catalog's matrices (weights and products), in forward order."""
  return [k for k, n in NAMES.items() if n.kind != "vector"]


def split_heads(W: jax.Array, n: int, side: Side) -> jax.Array:
  """The per-head blocks of `W` as a batch, the head axis just before the two matrix axes.

  `side="columns"` splits `d_out` (`w_q, w_k, w_v`: head `h` is `W[..., :, h·Dh:(h+1)·Dh]`),
  `side="rows"` splits `d_in` (`w_o`: head `h` is `W[..., h·Dh:(h+1)·Dh, :]`):

  .. math:: (\\ldots, D, n D_h) \\to (\\ldots, n, D, D_h), \\qquad
     (\\ldots, n D_h, D) \\to (\\ldots, n, D_h, D)

  Leading axes (stacked layers `L`) are kept. `n` is `H` or `K`, as `Name.heads` says. Works
  on JAX and NumPy arrays alike (a float64 NumPy matrix stays float64).

  Args:
    W: `(..., d_in, d_out)`.
    n: number of heads; must divide the split side.
    side: `"columns"` or `"rows"`.

  Returns:
    `(..., n, D, Dh)` for columns, `(..., n, Dh, D)` for rows.

  Example:
    >>> import jax.numpy as jnp
    >>> from transformer.names import split_heads
    >>> W = jnp.arange(12.0).reshape(2, 6)  # D = 2, three heads of width 2
    >>> split_heads(W, 3, "columns")[1].tolist()  # head 1: columns 2 and 3
    [[2.0, 3.0], [8.0, 9.0]]
  """
  if side not in ("columns", "rows"):
    raise ValueError(f"split_heads: side={side!r} is unknown. Fix: 'columns' (w_q, w_k, w_v) "
                     "or 'rows' (w_o).")
  if W.ndim < 2:
    raise ValueError(f"split_heads: W must be a (batch of) matrix; got {W.shape=}.")
  axis = W.ndim - 1 if side == "columns" else W.ndim - 2
  if W.shape[axis] % n:
    raise ValueError(f"split_heads: the {side} of {W.shape=} do not split into n={n} heads. "
                     "Fix: n must divide that side (H for w_q, w_o; K for w_k, w_v).")
  if side == "columns":
    return W.reshape(W.shape[:-1] + (n, W.shape[-1] // n)).swapaxes(-2, -3)
  return W.reshape(W.shape[:-2] + (n, W.shape[-2] // n, W.shape[-1]))


def merge_heads(blocks: jax.Array, side: Side) -> jax.Array:
  """Inverse of `split_heads`: `(..., n, D, Dh) -> (..., D, n·Dh)` (columns) or
  `(..., n, Dh, D) -> (..., n·Dh, D)` (rows).

  Example:
    >>> import jax.numpy as jnp
    >>> from transformer.names import merge_heads, split_heads
    >>> W = jnp.arange(24.0).reshape(4, 6)
    >>> bool((merge_heads(split_heads(W, 2, "rows"), "rows") == W).all())
    True
  """
  if side not in ("columns", "rows"):
    raise ValueError(f"merge_heads: side={side!r} is unknown. Fix: 'columns' or 'rows'.")
  if blocks.ndim < 3:
    raise ValueError(f"merge_heads: blocks must be (..., n, d_in, d_out); got {blocks.shape=}.")
  if side == "columns":
    blocks = blocks.swapaxes(-3, -2)
    return blocks.reshape(blocks.shape[:-2] + (blocks.shape[-2] * blocks.shape[-1],))
  return blocks.reshape(blocks.shape[:-3] + (blocks.shape[-3] * blocks.shape[-2],
                                             blocks.shape[-1]))
