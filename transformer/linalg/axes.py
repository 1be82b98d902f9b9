"""Which axes of an array are its matrix: `MatrixAxes`, shared by `optim` and `analysis`.

A weight is used as `x @ W`; its matrix has a reduction (input, `d_in`) side and an output
(`d_out`) side, each one axis or several flattened in order, and every other axis is a batch
of independent matrices. Ours are `(..., d_in, d_out)` (`MatrixAxes()`), a PyTorch or equinox
`weight` is `(d_out, d_in)` (`MatrixAxes(-1, -2)`), a fused qkv kernel `(D, 3, H, Dh)` is three
`(D, H·Dh)` matrices (`MatrixAxes(0, (2, 3))`). This is optax's `MuonDimensionNumbers`.

`optim` (Muon, spectral constraints, condition-aware rates, orthogonal heads) and `analysis`
(`spectrum`) read the same type from here, since neither may import the other.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp

Axes = int | tuple[int, ...]


class MatrixAxes(NamedTuple):
  """Which axes of a leaf are its matrix: `x @ W` reduces over `reduction`, yields `output`.

  Every other axis is a batch axis: each index of the batch axes is one matrix, orthogonalized
  (or measured) on its own. An entry may be a tuple of axes, flattened in order (an `nn.Einsum`
  kernel `(D, H, Dh)` with `reduction=0, output=(1, 2)` is one `(D, H·Dh)` matrix; with
  `reduction=0, output=2` it is `H` matrices `(D, Dh)`, one per head).

  Attributes:
    reduction: the input axis or axes (`d_in`); negative values count from the end.
    output: the output axis or axes (`d_out`).

  Example:
    >>> from transformer.linalg import MatrixAxes
    >>> MatrixAxes()            # ours and linen/nnx `kernel`: (..., d_in, d_out)
    MatrixAxes(reduction=-2, output=-1)
    >>> MatrixAxes(-1, -2)      # PyTorch / equinox `weight`: (d_out, d_in)
    MatrixAxes(reduction=-1, output=-2)
  """

  reduction: Axes = -2
  output: Axes = -1


def _is_axes(a) -> bool:
  """An `int`, or a non-empty tuple of `int`s (not `bool`s)."""
  if isinstance(a, bool):
    return False
  if isinstance(a, int):
    return True
  return (isinstance(a, tuple) and len(a) > 0
          and all(isinstance(i, int) and not isinstance(i, bool) for i in a))


def as_matrix_axes(spec, where: str = "matrix_axes") -> MatrixAxes:
  """`spec` as a `MatrixAxes`: one, or a plain pair `(reduction, output)`; anything else raises.

  Args:
    spec: a `MatrixAxes` or a 2-tuple/list whose entries are an `int` or a tuple of `int`s.
    where: the argument's name, for the message.

  Returns:
    A `MatrixAxes`.

  Raises:
    ValueError: (one line) naming `where`, what it got and the fix.

  Example:
    >>> from transformer.linalg.axes import as_matrix_axes
    >>> as_matrix_axes((0, (1, 2)))
    MatrixAxes(reduction=0, output=(1, 2))
  """
  if isinstance(spec, MatrixAxes | tuple | list) and len(spec) == 2:
    red, out = (tuple(a) if isinstance(a, list) else a for a in spec)
    if _is_axes(red) and _is_axes(out):
      return MatrixAxes(red, out)
  raise ValueError(f"{where}: {spec!r} is not a MatrixAxes; pass MatrixAxes(reduction, output) "
                   f"or a pair (reduction, output) of axes, each an int or a tuple of ints, e.g. "
                   f"MatrixAxes(-2, -1) or (0, (1, 2))")


def axes_tuple(axes: Axes, ndim: int) -> tuple[int, ...]:
  """One side of a `MatrixAxes` as non-negative axes of an `ndim`-array (no range check)."""
  axes = (axes,) if isinstance(axes, int) else tuple(axes)
  return tuple(a % ndim for a in axes)


def check_axes(axes: MatrixAxes, shape: tuple[int, ...], name: str = "the array") -> MatrixAxes:
  """`axes` checked against an array of `shape`: in range, distinct, and naming `name` if not.

  Args:
    axes: anything `as_matrix_axes` accepts.
    shape: the array's shape.
    name: the leaf's path (or a description), for the message.

  Returns:
    The `MatrixAxes`.

  Raises:
    ValueError: (one line) naming `name`, its shape, the offending axes and the fix.
  """
  axes = as_matrix_axes(axes)
  ndim = len(shape)
  flat = [a for side in axes for a in ((side,) if isinstance(side, int) else side)]
  bad = [a for a in flat if not -ndim <= a < ndim]
  if ndim < 2 or bad:
    raise ValueError(f"matrix_axes: {axes} is out of range for {name} of shape {tuple(shape)} "
                     f"({ndim} axes); name axes in [-{ndim}, {ndim - 1}]")
  pos = [a % ndim for a in flat]
  if len(set(pos)) < len(pos):
    raise ValueError(f"matrix_axes: {axes} names an axis twice for {name} of shape "
                     f"{tuple(shape)}; reduction and output axes must be distinct")
  return axes


def ask_matrix_axes(leaves: list[str], first: str, caller: str) -> None:
  """Raise the one line that asks for `matrix_axes`: which axes of a leaf of three or more axes
  are its matrix only its author knows (a scanned stack, an `nn.Einsum` kernel, a fused q, k, v,
  a convolution), and a guess would be orthogonalized or measured silently.

  Shared by every transform of `optim` and by `analysis.spectrum`.

  Args:
    leaves: the ambiguous leaves, each `'path' (shape)` (or `W (shape)` for a bare array).
    first: the first leaf's path (`''` for a bare array), for the example in the fix.
    caller: the function's name.

  Raises:
    ValueError: always, one line.
  """
  shown = ", ".join(leaves[:4]) + (f" and {len(leaves) - 4} more" if len(leaves) > 4 else "")
  example = (f"matrix_axes={{{first!r}: optim.MatrixAxes(reduction=..., output=...)}}" if first
             else "matrix_axes=MatrixAxes(reduction=..., output=...)")
  raise ValueError(
      f"{caller}: which axes are the matrix of {shown}? pass {example} "
      f"(MatrixAxes(-2, -1) for a scanned (L, d_in, d_out) stack; MatrixAxes(0, (2, 3)) for a "
      f"fused (D, 3, H, Dh) qkv kernel, three matrices; MatrixAxes(0, (1, 2)) for an nn.Einsum "
      f"(D, H, Dh) kernel as one matrix)")


def as_matrices(x, axes: MatrixAxes, name: str = "the array"):
  """`x` as a batch of matrices `(*batch, d_in, d_out)` by `axes`, and the inverse map.

  Args:
    x: an array of rank >= 2.
    axes: its `MatrixAxes` (or a pair); the batch axes keep their order.
    name: the leaf's path, for error messages.

  Returns:
    `(M, restore)`: `M` of shape `(*batch, prod(reduction), prod(output))` and
    `restore(M') -> array shaped like x`.

  Raises:
    ValueError: (one line) when `axes` is out of range or names an axis twice.

  Example:
    >>> import jax.numpy as jnp
    >>> from transformer.linalg import MatrixAxes, as_matrices
    >>> M, restore = as_matrices(jnp.zeros((16, 4, 8)), MatrixAxes(reduction=0, output=2))
    >>> M.shape, restore(M).shape
    ((4, 16, 8), (16, 4, 8))
  """
  axes = check_axes(axes, tuple(x.shape), name)
  red, out = axes_tuple(axes.reduction, x.ndim), axes_tuple(axes.output, x.ndim)
  batch = tuple(a for a in range(x.ndim) if a not in red + out)
  order = batch + red + out
  moved_shape = tuple(x.shape[a] for a in order)
  shape = (moved_shape[: len(batch)] + (math.prod(x.shape[a] for a in red),
                                         math.prod(x.shape[a] for a in out)))
  inverse = tuple(order.index(a) for a in range(x.ndim))

  def restore(M):
    return jnp.transpose(M.reshape(moved_shape), inverse)

  if order == tuple(range(x.ndim)) and len(red) == len(out) == 1:
    return x, lambda M: M  # already (..., d_in, d_out): no copy, no transpose
  return jnp.transpose(x, order).reshape(shape), restore
