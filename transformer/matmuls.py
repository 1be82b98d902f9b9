"""The preface's catalog of matmuls, as data: every named matrix with its role.

Roles follow the preface: (1) embedding, (2) projection, (3) attention scores `Q Kᵀ`,
(4) aggregation `A V`, (5) feed-forward, (6) output. Entries 3 and 4 are the two
products of input-derived matrices; they have no weight, so their shape is given for a
sequence of length `T`. Names, roles and order come from `transformer.names`.
"""

from __future__ import annotations

import dataclasses
import math

import jax

from transformer import names
from transformer.config import Config
from transformer.model import param_tree


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


def _entry(path: str, shape, key: str, kind: str, size: int) -> Entry:
  n = names.NAMES[key]
  return Entry(path, tuple(shape), n.step, n.role, n.description, kind, size)


def catalog(params, cfg: Config, seq_len: int | None = None) -> list[Entry]:
  """Every weight matrix of `params` plus the two input-derived products, in forward order.

  Norm scales and biases (vectors) are not matrices and are left out; they are counted in
  `sum(x.size for x in jax.tree.leaves(params))`.

  Args:
    params: the model's parameters (bare or as `{"params": ...}`).
    cfg: its config.
    seq_len: the `T` of the products' shapes; default `cfg.max_len`.

  Returns:
    A list of `Entry`, in the order of `transformer.names.NAMES`.

  Example:
    >>> import jax, transformer
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> [(e.path, e.step) for e in transformer.catalog(params, cfg)][1:3]
    [('pos_embed/embedding', 1), ('blocks/attn/w_q', 2)]
  """
  T = cfg.max_len if seq_len is None else seq_len
  table = {}
  for key_path, leaf in jax.tree_util.tree_leaves_with_path(param_tree(params)):
    key = names.key_of(key_path)
    if key is not None and names.NAMES[key].kind == "weight":
      table[key] = _entry(names.path_str(key_path), leaf.shape, key, "weight",
                          math.prod(leaf.shape))
  H, Dh, L = cfg.n_heads, cfg.d_head, cfg.n_layers
  table["Q K^T"] = _entry("Q K^T", (L, H, T, T), "Q K^T", "product", 0)
  table["A V"] = _entry("A V", (L, T, H * Dh), "A V", "product", 0)
  if cfg.tie_embeddings:
    E = table["embed/embedding"]
    table["unembed/w_out"] = dataclasses.replace(
        _entry("embed/embedding^T", E.shape[::-1], "unembed/w_out", "tied", 0),
        description="tied: hidden x E^T = logits (no w_out parameter)")
  return [table[k] for k in names.catalog_order() if k in table]
