"""Arguments checked before anything is traced: one line naming the argument and the fix.

A dict where an array belongs, a function that returns a tuple, integer parameters, or
`(params, loss_fn)` passed the wrong way round would otherwise fail deep inside `jax` (a
`TypeError` from `jnp.asarray`, `grad requires real-valued inputs`, a pytree mismatch); these
checks name the mistake instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from transformer.linalg.checks import check_choice, check_int, check_range, first_non_finite

__all__ = ["as_matrix_batch", "check_choice", "check_finite_weights", "check_function",
           "check_int", "check_krylov", "check_loss", "check_range", "check_tol"]


def check_tol(tol, name: str, caller: str, *, allow_none: bool = True, example="1e-4") -> None:
  """A tolerance: a finite number `> 0` (or `None` for the default)."""
  check_range(tol, name, caller, low=0, low_open=True, allow_none=allow_none, example=example)


def check_krylov(k, tol, krylov_dim, caller: str) -> None:
  """The hyper-parameters of a matrix-free top-`k` solver: `k` an int `>= 1`, `tol` a number
  `> 0`, `krylov_dim` an int `>= 1` or `None`."""
  check_int(k, 1, "k", caller)
  check_tol(tol, "tol", caller, allow_none=False)
  check_int(krylov_dim, 1, "krylov_dim", caller, allow_none=True)


def check_finite_weights(tree, caller: str, what: str = "W") -> None:
  """Raise (one line) when a float leaf of `tree` holds a NaN or an infinity, naming it.

  Outside `jit` only: a traced value is not known, and passes (the results then carry the NaN).
  Costs one reduction per leaf and a host read; every caller has `check_finite=False` to skip.
  """
  bad = first_non_finite(tree)
  if bad is not None:
    where = f"{what} {bad!r}" if bad else what
    raise ValueError(f"{caller}: {where} holds NaN or inf; find where it came from (a diverged "
                     f"run, a float16 overflow), or pass check_finite=False to measure it anyway")


def as_matrix_batch(W, caller: str):
  """`W` as an array of rank >= 2, or a one-line `ValueError`.

  Args:
    W: an array (JAX or NumPy) of shape `(..., m, n)`.
    caller: the function's name, for the message.

  Returns:
    `W` (a JAX array if it was a list or a NumPy array of numbers).
  """
  if isinstance(W, Mapping) or (not hasattr(W, "shape") and not isinstance(W, list | tuple)):
    kind = type(W).__name__
    raise ValueError(f"{caller}: W must be an array (..., m, n), got a {kind}; pass one "
                     f"matrix of the tree (e.g. params['blocks']['attn']['w_q']), or list them "
                     f"with analysis.matrices(params, cfg)")
  if not hasattr(W, "shape"):
    W = jnp.asarray(W)
  if W.ndim < 2:
    raise ValueError(f"{caller}: W must be a matrix or a batch of them (..., m, n), got "
                     f"shape {tuple(W.shape)}")
  if not jnp.issubdtype(W.dtype, jnp.inexact):
    raise ValueError(f"{caller}: W has dtype {W.dtype}; pass a float array "
                     f"(W.astype(jnp.float32))")
  return W


def check_function(f, x, caller: str) -> None:
  """`f` must be a function of the array `x` returning one array.

  Raises:
    ValueError: (one line) when `f` is not callable, `x` is not a float array, or `f(x)`
      returns a tuple, list or dict instead of one array.
  """
  if not callable(f):
    hint = " (the arguments are (f, x): did you swap them?)" if callable(x) else ""
    raise ValueError(f"{caller}: f must be a function of one array, got a "
                     f"{type(f).__name__}{hint}")
  if isinstance(x, Mapping) or not hasattr(x, "shape"):
    raise ValueError(f"{caller}: x must be one array, got a {type(x).__name__}; for several "
                     f"inputs close over the others (functools.partial) or concatenate them")
  if not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
    raise ValueError(f"{caller}: x has dtype {jnp.result_type(x)}; a Jacobian needs a float "
                     f"input (embed token ids first, e.g. analysis.stream_input)")
  out = jax.eval_shape(f, x)
  if not isinstance(out, jax.ShapeDtypeStruct):
    kind = type(out).__name__
    size = f" of {len(out)}" if isinstance(out, tuple | list | Mapping) else ""
    raise ValueError(f"{caller}: f returned a {kind}{size}, not one array; pass a function "
                     f"returning one, e.g. lambda x: f(x)[0]")


def check_loss(loss_fn, params, caller: str, chosen: Callable | None = None, *,
               finite: bool = False) -> None:
  """`loss_fn` must be callable, and `params` a non-empty tree of float arrays.

  Args:
    loss_fn: `loss_fn(params, batch) -> scalar`.
    params: the point.
    caller: the function's name, for the message.
    chosen: `path -> bool`, the leaves that are differentiated (default all); only their
      dtypes are checked.
    finite: also refuse a leaf holding NaN or inf, naming it (outside `jit`; see
      `check_finite_weights`).

  Raises:
    ValueError: (one line) for swapped `(params, loss_fn)`, a non-callable `loss_fn`, an empty
      tree, or a leaf of integer or boolean dtype (named).
  """
  if not callable(loss_fn):
    hint = (" (the arguments are (loss_fn, params, batch): they look swapped)"
            if callable(params) else "")
    raise ValueError(f"{caller}: loss_fn must be a function loss_fn(params, batch) -> scalar, "
                     f"got a {type(loss_fn).__name__}{hint}")
  leaves = jax.tree_util.tree_leaves_with_path(params)
  if not leaves:
    raise ValueError(f"{caller}: params has no leaves; pass the parameter tree")
  for path, x in leaves:
    if chosen is not None and not chosen(path):
      continue
    dtype = jnp.result_type(x) if hasattr(x, "dtype") or np.isscalar(x) else None
    where = jax.tree_util.keystr(path, simple=True, separator="/") or "params"
    if dtype is not None and jnp.issubdtype(dtype, jnp.bool_):
      raise ValueError(f"{caller}: the leaf {where!r} is a bool: a flag of a module (an equinox "
                       f"Dropout's `inference`), not a parameter; differentiate the arrays only: "
                       f"params, static = eqx.partition(model, eqx.is_inexact_array)")
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
      raise ValueError(f"{caller}: the leaf {where!r} has dtype {dtype}; curvature needs float "
                       f"parameters (cast with jax.tree.map(lambda x: x.astype(jnp.float32), "
                       f"params), or leave integer leaves out of params; an equinox module: "
                       f"eqx.partition(model, eqx.is_inexact_array))")
  if finite:
    check_finite_weights(params, caller, "the parameter")
