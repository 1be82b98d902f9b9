"""The preface's catalog of matmuls, as data: every named matrix with its role.

Roles follow the preface: (1) embedding, (2) projection, (3) attention scores `Q Kᵀ`,
(4) aggregation `A V`, (5) feed-forward, (6) output. Entries 3 and 4 are the two
products of input-derived matrices; they have no weight, so their shape is given for a
sequence of length `T`.
"""

from __future__ import annotations

import dataclasses
import math

import jax

from transformer.config import Config
from transformer.model import param_tree

# (preface step, role, what it does) for each weight name.
_ROLES = {
    "embed/embedding": (1, "embedding", "one-hot token x E = token vector"),
    "pos_embed/embedding": (1, "embedding", "position lookup, added to the token vector"),
    "w_q": (2, "projection", "X W_Q = Q: queries ask"),
    "w_k": (2, "projection", "X W_K = K: keys address"),
    "w_v": (2, "projection", "X W_V = V: values carry content"),
    "w_o": (2, "projection", "heads' outputs back to the residual stream"),
    "w_gate": (5, "feed-forward", "SwiGLU gate, d -> d_ff"),
    "w_1": (5, "feed-forward", "expand, d -> d_ff"),
    "w_2": (5, "feed-forward", "compress, d_ff -> d"),
    "unembed/w_out": (6, "output", "hidden x W_out = logits"),
}


@dataclasses.dataclass(frozen=True)
class Entry:
  """One matrix of the catalog.

  Attributes:
    path: parameter path (`blocks/attn/w_q`), or the product's name (`Q K^T`).
    shape: full shape; stacked block weights lead with the layer axis `L`.
    step: the preface's catalog number (1-6).
    role: embedding, projection, attention scores, aggregation, feed-forward, output.
    description: what the matmul does, in the preface's words.
    kind: `weight` (a parameter), `tied` (the transposed embedding reused as output) or
      `product` (computed from the input).
    size: number of parameters (0 for products and the tied output).
  """

  path: str
  shape: tuple[int, ...]
  step: int
  role: str
  description: str
  kind: str
  size: int


def catalog(params, cfg: Config, seq_len: int | None = None) -> list[Entry]:
  """Every weight matrix of `params` plus the two input-derived products, in forward order.

  Norm scales and biases (vectors) are not matrices and are left out; they are counted in
  `sum(x.size for x in jax.tree.leaves(params))`.
  """
  T = cfg.max_len if seq_len is None else seq_len
  flat = jax.tree_util.tree_flatten_with_path(param_tree(params))[0]
  weights = {}
  for key_path, leaf in flat:
    path = "/".join(str(getattr(k, "key", k)) for k in key_path)
    name = path if path in _ROLES else path.rsplit("/", 1)[-1]
    if name in _ROLES:
      size = math.prod(leaf.shape)
      weights[name] = Entry(path, tuple(leaf.shape), *_ROLES[name], "weight", size)
  H, dh, L = cfg.n_heads, cfg.d_head, cfg.n_layers
  products = {
      "scores": Entry("Q K^T", (L, H, T, T), 3, "attention scores",
                      "the only product of two input-derived matrices: who sees whom",
                      "product", 0),
      "mix": Entry("A V", (L, T, H * dh), 4, "aggregation",
                   "attention weights mix value vectors", "product", 0),
  }
  if cfg.tie_embeddings:
    E = weights["embed/embedding"]
    weights["unembed/w_out"] = Entry("embed/embedding^T", E.shape[::-1], 6, "output",
                                     "tied: hidden x E^T = logits (no w_out parameter)",
                                     "tied", 0)
  order = ["embed/embedding", "pos_embed/embedding", "w_q", "w_k", "w_v", "scores", "mix",
           "w_o", "w_gate", "w_1", "w_2", "unembed/w_out"]
  table = {**weights, **products}
  return [table[n] for n in order if n in table]
