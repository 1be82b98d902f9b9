"""Parameter roles from parameter paths, role masks, and per-head blocks of the projections.

Every transform in `optim` decides what to touch by role, and roles come from one function,
`labels`, which reads the names of `transformer` (see its package docstring). A user with
other names passes their own `label_fn` wherever one is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import jax
import jax.numpy as jnp

ROLES = ("hidden", "embedding", "unembedding", "vector")
HIDDEN = ("w_q", "w_k", "w_v", "w_o", "w_1", "w_2", "w_gate")
# Which side of each projection is split into heads: columns of w_q/w_k/w_v (each head reads
# its own `dh` output coordinates), rows of w_o (each head writes from its own `dh` inputs).
HEAD_SIDES = {"w_q": "columns", "w_k": "columns", "w_v": "columns", "w_o": "rows"}

Side = Literal["columns", "rows"]


def path_names(path) -> tuple[str, ...]:
  """The key names of a `jax.tree_util` path, as strings (`("blocks", "attn", "w_q")`)."""
  names = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        names.append(str(getattr(key, attr)))
        break
  return tuple(names)


def role(names: tuple[str, ...]) -> str:
  """The role of the leaf named by `names` (see `labels`)."""
  leaf = names[-1] if names else ""
  if leaf in HIDDEN:
    return "hidden"
  if leaf == "embedding":
    return "embedding"
  if leaf == "w_out":
    return "unembedding"
  return "vector"


def labels(params):
  """The role of every leaf of a `transformer` parameter tree.

  Roles, by the leaf's name:

  - `hidden`: `w_q, w_k, w_v, w_o, w_1, w_2, w_gate` — the matrices Muon orthogonalizes;
  - `embedding`: `embed/embedding`, `pos_embed/embedding`;
  - `unembedding`: `unembed/w_out`;
  - `vector`: norm `scale`/`bias`, projection biases `b_*`, and any leaf this function does
    not recognise — so nothing unrecognised is ever orthogonalized.

  Args:
    params: a parameter pytree (a `{"params": ...}` wrapper is fine: only leaf names count).

  Returns:
    A pytree of the same structure with one of `ROLES` at each leaf — the `param_labels`
    of `optax.partition`.

  Example:
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> labels(params)["blocks"]["attn"]["w_q"]
    'hidden'
  """
  return jax.tree_util.tree_map_with_path(lambda path, _: role(path_names(path)), params)


def select(
    *,
    roles: Iterable[str] | None = ("hidden",),
    names: Iterable[str] | None = None,
    label_fn: Callable = labels,
) -> Callable:
  """A mask function `params -> bool pytree`, for `optax.masked` and the `mask=` arguments.

  A leaf is selected when its role is in `roles` and (if given) its name is in `names`.

  Args:
    roles: roles to select (see `labels`); `None` for every role.
    names: leaf names to select, e.g. `("w_o", "w_2")` for the matrices that write into the
      residual stream; `None` for every name.
    label_fn: `params -> role pytree`; default `labels`.

  Returns:
    `mask_fn(params)` with `True` at selected leaves.

  Example:
    >>> residual_branches = select(names=("w_o", "w_2"))
    >>> tx = optim.spectral_cap(1.0, mask=residual_branches)
  """
  roles = None if roles is None else frozenset(roles)
  names = None if names is None else frozenset(names)
  for r in roles or ():
    if r not in ROLES:
      raise ValueError(f"select: unknown role {r!r}; choose from {ROLES}")

  def mask_fn(params):
    role_tree = label_fn(params)

    def chosen(path, r):
      return (roles is None or r in roles) and (names is None or path_names(path)[-1] in names)

    return jax.tree_util.tree_map_with_path(chosen, role_tree)

  return mask_fn


def head_layout(params, n_heads: int, n_kv_heads: int | None = None):
  """Per leaf, how its matrices split into heads: `(side, count)` or `None`.

  `w_q` and `w_o` split into `n_heads` heads, `w_k` and `w_v` into `n_kv_heads` (default
  `n_heads`; grouped-query attention has fewer). Every other leaf is `None`.

  Args:
    params: a parameter (or update) pytree.
    n_heads: query heads `H`.
    n_kv_heads: key/value heads `Hkv`.

  Returns:
    A pytree of the same structure (its leaves are tuples or `None`; map over it with
    `is_leaf=lambda x: x is None or isinstance(x, tuple)`).
  """
  n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads

  def layout(path, _):
    name = path_names(path)[-1] if path else ""
    if name not in HEAD_SIDES:
      return None
    return (HEAD_SIDES[name], n_kv_heads if name in ("w_k", "w_v") else n_heads)

  return jax.tree_util.tree_map_with_path(layout, params)


def split_heads(W: jax.Array, n: int, side: Side) -> jax.Array:
  """The per-head blocks of `W` as a batch: `(..., d, n·dh) -> (..., n, d, dh)` for columns,
  `(..., n·dh, d) -> (..., n, dh, d)` for rows.

  Args:
    W: `(..., d_in, d_out)`.
    n: number of heads; must divide the split side.
    side: `"columns"` (split `d_out`) or `"rows"` (split `d_in`).

  Returns:
    The blocks, with the head axis just before the two matrix axes.
  """
  axis = W.ndim - 1 if side == "columns" else W.ndim - 2
  if W.shape[axis] % n:
    raise ValueError(f"split_heads: {side} of {W.shape=} do not split into {n} heads")
  if side == "columns":
    blocks = W.reshape(W.shape[:-1] + (n, W.shape[-1] // n))
    return jnp.moveaxis(blocks, -2, -3)
  return W.reshape(W.shape[:-2] + (n, W.shape[-2] // n, W.shape[-1]))


def merge_heads(blocks: jax.Array, side: Side) -> jax.Array:
  """Inverse of `split_heads`."""
  if side == "columns":
    blocks = jnp.moveaxis(blocks, -3, -2)
    return blocks.reshape(blocks.shape[:-2] + (blocks.shape[-2] * blocks.shape[-1],))
  return blocks.reshape(blocks.shape[:-3] + (blocks.shape[-3] * blocks.shape[-2], blocks.shape[-1]))
