"""Orthogonal heads: a decoupled term that pulls the heads' subspaces apart (orthogonality topic).

Head `h` of `w_q` reads the input through its column block `W_h: (D, Dh)`; two heads whose
column spaces overlap compute partly the same projection. The penalty below is zero exactly
when the blocks' column spaces are mutually orthogonal, i.e. when the heads cannot be
redundant at the level of their projections.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import optax

from optim import checks
from optim.axes import check_keys, check_spec, suffix_matches
from optim.roles import _whole, head_layout, path_str
from transformer.linalg.axes import as_matrices, axes_tuple, check_axes
from transformer.names import Side


def head_gram_overlap(W: jax.Array, n: int, side: Side = "columns"):
  r"""Cross-head Gram overlap of `W` (the off-diagonal blocks of `WᵀW`) and its gradient.

  A penalty on the raw blocks, per matrix of a batch: it scales as `‖W‖⁴` and is zero exactly
  when the heads' blocks are mutually orthogonal. (`analysis.head_subspace_overlap` is the
  scale-free measurement: `mean cos²` of the principal angles between heads' subspaces.)

  With `W_h` the `h`-th column block (`side="columns"`; rows use `Wᵀ`) and
  `M = WᵀW` with its `Dh × Dh` diagonal blocks zeroed (`M_off`):

  .. math::
    R(W) = \tfrac12 \sum_{h \ne g} \|W_h^\top W_g\|_F^2 = \tfrac12 \|M_\text{off}\|_F^2,
    \qquad \nabla R = 2\, W M_\text{off}

  Args:
    W: `(..., d_in, d_out)`.
    n: number of heads; must divide the split side.
    side: `"columns"` (`w_q`, `w_k`, `w_v`) or `"rows"` (`w_o`).

  Returns:
    `(R (...,), grad (..., d_in, d_out))`.

  Example:
    >>> import jax, optim
    >>> W = jax.random.normal(jax.random.key(0), (2, 32, 32))  # (L, D, H·Dh), H = 4
    >>> R, grad = optim.head_gram_overlap(W, n=4)
    >>> R.shape, grad.shape
    ((2,), (2, 32, 32))
  """
  if W.ndim < 2:
    raise ValueError(f"head_gram_overlap: W must be a (batch of) matrix, got {W.ndim=}")
  X = W if side == "columns" else jnp.swapaxes(W, -1, -2)
  width = X.shape[-1]
  if width % n:
    raise ValueError(f"head_gram_overlap: {side} of {W.shape=} do not split into {n} heads")
  head = jnp.arange(width) // (width // n)
  same = head[:, None] == head[None, :]
  M_off = jnp.where(same, 0, jnp.swapaxes(X, -1, -2) @ X)
  R = 0.5 * jnp.sum(M_off * M_off, axis=(-2, -1))
  grad = 2 * X @ M_off
  return R, grad if side == "columns" else jnp.swapaxes(grad, -1, -2)


def _einsum_layout(path: str, shape, axes):
  """`(side, count)` of a leaf whose matrix `axes` name: the side with several axes holds the
  heads, its first axis counts them (`(D, 3, H, Dh)` with `MatrixAxes(0, (2, 3))`: columns,
  `H`)."""
  axes = check_axes(axes, shape, repr(path))
  red, out = axes_tuple(axes.reduction, len(shape)), axes_tuple(axes.output, len(shape))
  if (len(out) > 1) == (len(red) > 1):
    raise ValueError(f"optim.orthogonal_heads: which side of {path!r} {tuple(shape)} holds the "
                     f"heads? matrix_axes {axes} must flatten exactly one side, the head axis "
                     f"first (MatrixAxes(0, (2, 3)) for (D, 3, H, Dh)), or pass layout_fn=")
  return ("columns", shape[out[0]]) if len(out) > 1 else ("rows", shape[red[0]])


def orthogonal_heads(strength, n_heads: int, *, n_kv_heads: int | None = None,
                     layout_fn=None, matrix_axes: Mapping | None = None,
                     check_finite: bool = False):
  r"""Add the decoupled step `−strength · ∇R(W)` of `head_gram_overlap` to each projection.

  .. math::
    u_W \leftarrow u_W - \lambda \nabla R(W)

  for `W` in `w_q`, `w_k`, `w_v` (column blocks) and `w_o` (row blocks) of the current
  parameters, `λ = strength`; every other leaf passes through. Decoupled, like weight decay:
  the term does not go through the optimizer's preconditioning, so put this transform *after*
  the optimizer (it is not scaled by the learning rate): `optax.chain(optim.muon(0.02),
  orthogonal_heads(1e-3, n_heads=4))`. `strength=0` is the identity.

  Args:
    strength: `λ ≥ 0`.
    n_heads: query heads `H` (`w_q` and `w_o` split into `H` blocks).
    n_kv_heads: key/value heads (`w_k`, `w_v`); default `n_heads`.
    layout_fn: `params -> pytree of (side, count) | None`, which leaves split into heads and
      how (see `optim.head_layout`); default our names. With the default, a whole tree with
      no `w_q`, `w_k`, `w_v`, `w_o` raises instead of passing every update through unchanged.
    matrix_axes: a mapping path suffix -> `optim.MatrixAxes` naming other projections, e.g.
      a fused qkv kernel `{"attn/qkv": MatrixAxes(0, (2, 3))}` of shape `(D, 3, H, Dh)` (three
      `(D, H·Dh)` matrices, each split into the `H` column blocks of its first flattened
      axis), or an output kernel `(H, Dh, D)` with `MatrixAxes((0, 1), 2)` (row blocks). The
      side with several axes holds the heads. A key that names no leaf raises.
    check_finite: raise, naming the leaf, on NaN or inf in the updates or parameters (see
      `optim.scale_by_muon`).

  Returns:
    An `optax.GradientTransformation` with state `optax.EmptyState` (with `check_finite`,
    `(EmptyState(), EmptyState())`).

  Raises:
    ValueError: (one line, at construction) for `strength < 0`, `n_heads < 1` or a
      `matrix_axes` that is not a mapping of `MatrixAxes`.

  Example:
    >>> import jax, optax, optim, transformer
    >>> cfg = transformer.preset("tiny")
    >>> params = transformer.init(cfg, jax.random.key(0))
    >>> tx = optax.chain(optax.adamw(1e-3), optim.orthogonal_heads(1e-3, n_heads=cfg.n_heads))
    >>> updates, state = tx.update(params, tx.init(params), params)
  """

  caller = "optim.orthogonal_heads"
  checks.non_negative(strength, "strength", caller)
  checks.at_least(n_heads, 1, "n_heads", caller)
  checks.at_least(n_kv_heads, 1, "n_kv_heads", caller, allow_none=True)
  if matrix_axes is not None and not isinstance(matrix_axes, Mapping):
    raise ValueError(f"{caller}: matrix_axes must be a mapping path suffix -> MatrixAxes (the "
                     f"projections to split into heads); got {type(matrix_axes).__name__}")
  matrix_axes = check_spec(matrix_axes, caller)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("orthogonal_heads needs `params` in `update(updates, state, params)`")

    def step(u, p, layout):
      if layout is None:
        return u
      side, n = layout
      grad = head_gram_overlap(p.astype(jnp.float32), n, side)[1]
      return (u - strength * grad).astype(u.dtype)

    def named(path, u, p):
      s = path_str(path)
      axes = next(a for k, a in matrix_axes.items() if suffix_matches(s, k))
      M, restore = as_matrices(p, axes, repr(s))
      U, _ = as_matrices(u, axes, repr(s))
      return restore(step(U, M, _einsum_layout(s, p.shape, axes)))

    if matrix_axes and _whole(params):
      check_keys(matrix_axes, params, f"{caller}: matrix_axes")
    if layout_fn is None:
      layouts = head_layout(params, n_heads, n_kv_heads)
      no_ours = all(x is None for x in jax.tree.leaves(layouts, is_leaf=lambda x: x is None))
      if _whole(params) and no_ours and not matrix_axes:
        found = [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)][:6]
        raise ValueError(
            f"optim.orthogonal_heads: no leaf is an attention projection of ours (w_q, w_k, "
            f"w_v, w_o); the leaves are {found}; pass layout_fn= mapping params to "
            f"('columns' | 'rows', n_heads) per projection (None elsewhere), or matrix_axes=")
    else:
      layouts = layout_fn(params)

    def one(path, u, p, layout):
      s = path_str(path)
      if matrix_axes and any(suffix_matches(s, k) for k in matrix_axes):
        return named(path, u, p)
      return step(u, p, layout)

    return jax.tree_util.tree_map_with_path(one, updates, params, layouts), state

  return checks.guarded(optax.GradientTransformation(optax.init_empty_state, update_fn),
                        check_finite, caller)
