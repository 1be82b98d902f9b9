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
from optim.conventions import fused_qkv, head_name, place
from optim.roles import _whole, head_split, path_str
from transformer.linalg.axes import (
    MatrixAxes,
    as_matrices,
    ask_matrix_axes,
    axes_tuple,
    check_axes,
)
from transformer.names import Side, merge_heads, split_heads


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
  checks.at_least(n, 1, "n", "optim.head_gram_overlap")
  checks.choice(side, ("columns", "rows"), "side", "optim.head_gram_overlap")
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


def _foreign_plan(s: str, p, n_heads: int, n_kv_heads: int | None, caller: str):
  """`(axes, side, n, fused)` of another library's attention projection (`HEAD_NAMES`, a
  fused q, k, v of `FUSED_QKV`), or `None`.

  A 2-D leaf is read by its naming convention (an equinox or PyTorch `weight` is
  `(d_out, d_in)`); a 3-D linen/nnx kernel carries its heads: `query/kernel` `(D, H, Dh)` is
  one `(D, H·Dh)` matrix of `H` column blocks, `out/kernel` `(H, Dh, D)` one `(H·Dh, D)`
  matrix of `H` row blocks. Anything else of three or more axes asks for `matrix_axes`.
  """
  ndim = jnp.ndim(p)
  found = head_name(s, ndim)
  fused = found is None and fused_qkv(s) and ndim >= 2
  if found is None and not fused:
    return None
  kv = n_heads if n_kv_heads is None else n_kv_heads
  if ndim == 2:
    axes = place(s, p).axes
    if fused:
      if kv != n_heads:
        raise ValueError(f"{caller}: the fused q, k, v {s!r} {tuple(p.shape)} has grouped "
                         f"key/value heads ({n_heads=}, {n_kv_heads=}); split it into "
                         f"matrices yourself and pass layout_fn=, or leave it out")
      return axes, "columns", n_heads, True
    return axes, found[0], n_heads if found[1] == "H" else kv, False
  if ndim == 3 and found is not None:
    if found[0] == "columns":  # (D, H, Dh)
      return MatrixAxes(0, (1, 2)), "columns", p.shape[1], False
    return MatrixAxes((0, 1), 2), "rows", p.shape[0], False  # (H, Dh, D)
  ask_matrix_axes([f"{s!r} {tuple(p.shape)}"], s, caller)


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
  checks.heads(n_heads, n_kv_heads, caller)
  checks.function(layout_fn, "layout_fn", caller, what="a function params -> pytree of "
                  "(side, n_heads) | None")
  if matrix_axes is not None and not isinstance(matrix_axes, Mapping):
    raise ValueError(f"{caller}: matrix_axes must be a mapping path suffix -> MatrixAxes (the "
                     f"projections to split into heads); got {type(matrix_axes).__name__}")
  matrix_axes = check_spec(matrix_axes, caller)

  def plan(path, p):
    """`(axes, side, n, fused)` of one leaf (axes `None`: as stored), or `None`: untouched."""
    s = path_str(path)
    if matrix_axes and any(suffix_matches(s, k) for k in matrix_axes):
      axes = next(a for k, a in matrix_axes.items() if suffix_matches(s, k))
      return (axes, *_einsum_layout(s, p.shape, axes), False)
    ours = head_split(path, n_heads, n_kv_heads)
    if ours is not None:
      return (None, *ours, False)
    return _foreign_plan(s, p, n_heads, n_kv_heads, caller)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError(f"{caller} needs `params` in `update(updates, state, params)`")

    def step(u, p, todo):
      if todo is None:
        return u
      axes, side, n, fused = todo
      M, restore = (p, None) if axes is None else as_matrices(p, axes)
      U = u if axes is None else as_matrices(u, axes)[0]
      M = M.astype(jnp.float32)
      if fused:  # [q | k | v]: three matrices, each split into its heads
        grad = merge_heads(head_gram_overlap(split_heads(M, 3, "columns"), n, side)[1],
                           "columns")
      else:
        grad = head_gram_overlap(M, n, side)[1]
      out = (U - strength * grad).astype(u.dtype)
      return out if restore is None else restore(out)

    if matrix_axes and _whole(params):
      check_keys(matrix_axes, params, f"{caller}: matrix_axes")
    if layout_fn is None:
      tuples = [plan(path, p) for path, p in jax.tree_util.tree_leaves_with_path(params)]
      if _whole(params) and all(x is None for x in tuples):
        found = [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)][:6]
        raise ValueError(
            f"{caller}: no leaf is an attention projection (ours: w_q, w_k, w_v, w_o; "
            f"equinox query_proj ... output_proj; linen/nnx query, key, value, out; Hugging "
            f"Face q_proj ... o_proj; a fused qkv); the leaves are {found}; pass "
            f"matrix_axes={{'PATH': optim.MatrixAxes(...)}} or layout_fn= mapping params to "
            f"('columns' | 'rows', n_heads) per projection (None elsewhere)")
    else:
      tuples = [None if x is None else (None, *x, False) for x in
                jax.tree.leaves(layout_fn(params), is_leaf=lambda x: x is None
                                or isinstance(x, tuple))]
    leaves = jax.tree.leaves(updates)
    out = [step(u, p, t) for u, p, t in zip(leaves, jax.tree.leaves(params), tuples,
                                            strict=True)]
    return jax.tree.unflatten(jax.tree.structure(updates), out), state

  return checks.guarded(optax.GradientTransformation(optax.init_empty_state, update_fn),
                        check_finite, caller)
