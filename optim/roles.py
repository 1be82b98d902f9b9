"""Parameter roles from parameter paths, role masks, and per-head blocks of the projections.

Every transform in `optim` decides what to touch by role, and roles come from one function,
`labels`, which reads the naming authority `transformer.names` (the role of every parameter
name). A user with other names passes their own `label_fn` wherever one is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax

from transformer import names as _names

# The one head split lives beside `Name.heads`; re-exported here for `optim.orthogonalized`.
from transformer.names import Side as Side
from transformer.names import merge_heads as merge_heads
from transformer.names import split_heads as split_heads

ROLES = _names.UPDATE_ROLES


def labels(params):
  """The role of every leaf of a `transformer` parameter tree.

  Roles, from `transformer.names.NAMES` (`Name.update`):

  - `hidden`: `w_q, w_k, w_v, w_o, w_1, w_2, w_gate` — the matrices Muon orthogonalizes;
  - `embedding`: `embed/embedding`, `pos_embed/embedding`;
  - `unembedding`: `unembed/w_out`;
  - `vector`: norm `scale`/`bias`, projection biases `b_*`, and any leaf no name matches —
    so nothing unrecognised is ever orthogonalized.

  Args:
    params: a parameter pytree (a `{"params": ...}` wrapper is fine: names match path
      suffixes).

  Returns:
    A pytree of the same structure with one of `ROLES` at each leaf — the `param_labels`
    of `optax.partition`.

  Example:
    >>> import jax, transformer, optim
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> optim.labels(params)["blocks"]["attn"]["w_q"]
    'hidden'
  """
  return jax.tree_util.tree_map_with_path(lambda path, _: _names.update_role(path), params)


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
    >>> import jax, transformer, optim
    >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
    >>> residual_branches = optim.select(names=("w_o", "w_2"))
    >>> mask = residual_branches(params)
    >>> bool(mask["blocks"]["attn"]["w_o"]), bool(mask["blocks"]["attn"]["w_q"])
    (True, False)
  """
  roles = None if roles is None else frozenset(roles)
  names = None if names is None else frozenset(names)
  for r in roles or ():
    if r not in ROLES:
      raise ValueError(f"select: unknown role {r!r}; choose from {ROLES}")

  def mask_fn(params):
    role_tree = label_fn(params)

    def chosen(path, r):
      return (roles is None or r in roles) and (names is None or _leaf(path) in names)

    return jax.tree_util.tree_map_with_path(chosen, role_tree)

  return mask_fn


def head_layout(params, n_heads: int, n_kv_heads: int | None = None):
  """Per leaf, how its matrices split into heads: `(side, count)` or `None`.

  `w_q` and `w_o` split into `n_heads` heads (`H`), `w_k` and `w_v` into `n_kv_heads` (`K`,
  default `n_heads`; grouped-query attention has fewer): `Name.heads` of
  `transformer.names`. Every other leaf is `None`.

  Args:
    params: a parameter (or update) pytree.
    n_heads: query heads `H`.
    n_kv_heads: key/value heads `K`.

  Returns:
    A pytree of the same structure (its leaves are tuples or `None`; map over it with
    `is_leaf=lambda x: x is None or isinstance(x, tuple)`).
  """
  n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads

  count = {"H": n_heads, "K": n_kv_heads}

  def layout(path, _):
    heads = _names.name_of(path).heads
    return None if heads is None else (heads[0], count[heads[1]])

  return jax.tree_util.tree_map_with_path(layout, params)


def _leaf(path) -> str:
  """The last key of a key path, as a string (`w_q` of `blocks/attn/w_q`)."""
  return _names.path_str(path).rsplit("/", 1)[-1]
