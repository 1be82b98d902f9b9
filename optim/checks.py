"""Arguments refused at construction, and the opt-in `check_finite` of every transform.

Each check raises a one-line `ValueError` naming the argument, the value and the fix, before
anything is traced: a bad `ns_steps` or `beta` never reaches `jax` as an index error or a NaN.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
import optax

from optim.conventions import path_str


def _is_int(x) -> bool:
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
  return isinstance(x, numbers.Real) and not isinstance(x, bool)


def at_least(value, low: int, name: str, caller: str, *, allow_none: bool = False) -> None:
  """`value` must be an `int >= low` (or `None` when `allow_none`; a jax array, as
  `optax.inject_hyperparams` passes, is left to the trace)."""
  if (value is None and allow_none) or isinstance(value, jax.Array):
    return
  if not _is_int(value) or value < low:
    raise ValueError(f"{caller}: {name}={value!r}; pass an int >= {low}"
                     + (" (or None for the default)" if allow_none else ""))


def positive(value, name: str, caller: str) -> None:
  """`value` must be a real number `> 0` (a Python or NumPy scalar; arrays are not checked)."""
  if _is_real(value) and not value > 0:
    raise ValueError(f"{caller}: {name}={value!r}; pass a number > 0")


def non_negative(value, name: str, caller: str) -> None:
  """`value` must be a real number `>= 0` (Python or NumPy scalars)."""
  if _is_real(value) and not value >= 0:
    raise ValueError(f"{caller}: {name}={value!r}; pass a number >= 0")


def unit_interval(value, name: str, caller: str) -> None:
  """`value` must lie in `[0, 1)` (a momentum decay)."""
  if _is_real(value) and not 0 <= value < 1:
    raise ValueError(f"{caller}: {name}={value!r}; pass a number in [0, 1) (0.95 is typical)")


def non_finite(tree, caller: str, what: str) -> None:
  """Raise when a leaf of `tree` holds a NaN or an infinity, naming the first such leaf.

  Eagerly (concrete arrays) this is a one-line `ValueError`. Under `jax.jit` the values are not
  known while tracing, so a `jax.debug.callback` raises the same `ValueError` when the step
  runs; jax wraps it in its runtime error, whose last line is this message.

  Args:
    tree: parameters or updates.
    caller: the transform's name.
    what: `"gradient"` (the incoming updates) or `"parameter"`.
  """
  leaves = [(path_str(p), x) for p, x in jax.tree_util.tree_leaves_with_path(tree)
            if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
  if not leaves:
    return
  paths = [p for p, _ in leaves]
  flags = jnp.stack([jnp.all(jnp.isfinite(x)) for _, x in leaves])

  def report(ok):
    bad = [p for p, f in zip(paths, np.asarray(ok), strict=True) if not f]
    if bad:
      raise ValueError(f"{caller}: check_finite: the {what} of {bad[0]!r} holds NaN or inf"
                       + (f" (and {len(bad) - 1} more leaves)" if len(bad) > 1 else "")
                       + "; find where it came from (a loss in float16, a division by zero, a "
                       "learning rate too high)")

  if isinstance(flags, jax.core.Tracer):
    jax.debug.callback(report, flags)
  else:
    report(flags)


def guarded(tx, check_finite: bool, caller: str):
  """`tx`, preceded (when `check_finite`) by a pass-through that runs `non_finite` on the
  incoming updates and the parameters; the state is then `(EmptyState(), tx's state)`."""
  if not isinstance(check_finite, bool):
    raise ValueError(f"{caller}: check_finite={check_finite!r}; pass True or False")
  if not check_finite:
    return tx

  def update_fn(updates, state, params=None):
    non_finite(updates, caller, "gradient")
    if params is not None:
      non_finite(params, caller, "parameter")
    return updates, state

  return optax.chain(optax.GradientTransformation(optax.init_empty_state, update_fn), tx)
