"""Arguments refused at construction, trees refused at `init` and `update`, and the opt-in
`check_finite` of every transform.

Each check raises a one-line `ValueError` naming the argument (or leaf), the value and the fix,
before anything is traced: a bad `ns_steps` or `beta` never reaches `jax` as an index error or
a NaN, and a string learning rate never reaches the first update. The scalar checks are
`transformer.linalg.checks`, shared with `analysis`. `guarded` wraps every transform: at `init`
every leaf must be a float array (`array_leaves`), at `update` the updates must have the
parameters' tree and shapes (`same_tree`, static, so free under `jit`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from optim.conventions import path_str
from transformer.linalg import checks as _checks


def at_least(value, low: int, name: str, caller: str, *, allow_none: bool = False) -> None:
  """`value` must be an `int >= low` (or `None` when `allow_none`; a traced array, as
  `optax.inject_hyperparams` passes under `jit`, is left to the trace)."""
  _checks.check_int(value, low, name, caller, allow_none=allow_none)


def heads(n_heads, n_kv_heads, caller: str, *, allow_none: bool = False) -> None:
  """`n_heads` an int `>= 1` (or `None` where allowed), `n_kv_heads` `None` or a divisor of it
  (grouped-query attention)."""
  at_least(n_heads, 1, "n_heads", caller, allow_none=allow_none)
  at_least(n_kv_heads, 1, "n_kv_heads", caller, allow_none=True)
  if isinstance(n_heads, int) and isinstance(n_kv_heads, int) and n_heads % n_kv_heads:
    raise ValueError(f"{caller}: n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}; "
                     f"pass the key/value head count of grouped-query attention (a divisor)")


def positive(value, name: str, caller: str, *, example: str = "1.0") -> None:
  """`value` must be a real number `> 0`."""
  _checks.check_range(value, name, caller, low=0, low_open=True, example=example)


def non_negative(value, name: str, caller: str, *, example: str = "0.1") -> None:
  """`value` must be a real number `>= 0`."""
  _checks.check_range(value, name, caller, low=0, example=example)


def unit_interval(value, name: str, caller: str) -> None:
  """`value` must lie in `[0, 1)` (a momentum decay)."""
  _checks.check_range(value, name, caller, low=0, high=1, high_open=True, example="0.95")


def rate(value, name: str, caller: str, *, example: str = "0.02") -> None:
  """`value` must be a learning rate: a number `>= 0` or a schedule (a function of the step)."""
  _checks.check_range(value, name, caller, low=0, schedule=True, example=example,
                      why="a negative rate climbs the loss")


def decay(value, name: str, caller: str) -> None:
  """`value` must be a weight decay: a number `>= 0` or a schedule."""
  _checks.check_range(value, name, caller, low=0, schedule=True, example="0.1",
                      why="a negative decay grows the weights")


flag = _checks.check_flag
choice = _checks.check_choice
function = _checks.check_callable


def mask(value, caller: str) -> None:
  """`mask=`: `None`, a callable `params -> bool tree`, or a pytree of bools."""
  if value is None or callable(value):
    return
  leaves = jax.tree.leaves(value)
  if isinstance(value, str | bytes) or not leaves or not all(
      isinstance(x, bool | np.bool_) for x in leaves):
    raise ValueError(f"{caller}: mask={value!r} is not a mask; pass a function params -> bool "
                     f"pytree (e.g. optim.select(names=('w_o',))) or a pytree of bools shaped "
                     f"like the parameters")


def array_leaves(params, caller: str) -> None:
  """Raise (one line) for a leaf that is not a float array: a bool (an equinox `Dropout`'s
  `inference`), a function or other object — an unpartitioned equinox module — or an integer
  array, naming the leaf and the fix (`eqx.partition`)."""
  for path, x in jax.tree_util.tree_leaves_with_path(params):
    dtype = getattr(x, "dtype", None)
    if dtype is None and isinstance(x, float | int) and not isinstance(x, bool):
      continue  # a Python number: optax treats it as a scalar parameter
    if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
      continue
    boolean = isinstance(x, bool | np.bool_) or (dtype is not None
                                                and jnp.issubdtype(dtype, jnp.bool_))
    what = ("a bool" if boolean
            else f"an array of dtype {dtype}" if dtype is not None else _kind(x))
    raise ValueError(
        f"{caller}: the leaf {path_str(path)!r} is {what}, not a float array: optimize only "
        f"the parameters; for an equinox module, params, static = eqx.partition(model, "
        f"eqx.is_inexact_array) and pass params (eqx.combine(params, static) rebuilds it)")


def _kind(x) -> str:
  name = type(x).__name__
  return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def same_tree(updates, params, caller: str) -> None:
  """Raise (one line) when `updates` is not shaped like `params`: a leaf missing or extra, or a
  shape that differs, naming the leaf and both shapes. Static (tree structure and shapes), so
  free under `jit`; leaves `optax.MaskedNode` placeholders alone."""
  if params is None:
    return
  u_def, p_def = jax.tree.structure(updates), jax.tree.structure(params)
  if u_def != p_def:
    u = {path_str(k): v for k, v in jax.tree_util.tree_leaves_with_path(updates)}
    p = {path_str(k): v for k, v in jax.tree_util.tree_leaves_with_path(params)}
    missing = [k for k in p if k not in u]
    extra = [k for k in u if k not in p]
    if missing or extra:
      what = (f"lacks the parameter {missing[0]!r} {tuple(jnp.shape(p[missing[0]]))}"
              if missing else f"has {extra[0]!r}, which is no parameter")
      more = len(missing) + len(extra) - 1
      raise ValueError(f"{caller}: the gradient tree {what}"
                       + (f" (and {more} more differences)" if more else "")
                       + "; pass updates of the parameters' tree (e.g. jax.grad of a loss of "
                         "them; partition an equinox module with eqx.partition first)")
    raise ValueError(f"{caller}: the gradient tree and the parameters have the same leaves but "
                     f"different containers ({u_def} vs {p_def}); pass updates built from the "
                     f"parameters' tree")
  for (k, u), p in zip(jax.tree_util.tree_leaves_with_path(updates), jax.tree.leaves(params),
                       strict=True):
    if jnp.shape(u) != jnp.shape(p):
      raise ValueError(f"{caller}: the gradient of {path_str(k)!r} has shape "
                       f"{tuple(jnp.shape(u))} but the parameter has {tuple(jnp.shape(p))}; "
                       f"pass a gradient of the parameters' shapes")


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
  """`tx`, whose `update` first checks that the updates have the parameters' tree and shapes
  (`same_tree`: static, free under `jit`) and, when `check_finite`, runs `non_finite` on the
  incoming updates and the parameters; with `check_finite` the state is
  `(EmptyState(), tx's state)`, else `tx`'s own."""
  _checks.check_flag(check_finite, "check_finite", caller)
  extra = isinstance(tx, optax.GradientTransformationExtraArgs)

  def inner_update(updates, state, params=None, **extra_args):
    same_tree(updates, params, caller)
    if extra:
      return tx.update(updates, state, params, **extra_args)
    return tx.update(updates, state, params)

  def inner_init(params):
    array_leaves(params, caller)
    return tx.init(params)

  checked = optax.GradientTransformationExtraArgs(inner_init, inner_update)
  if not check_finite:
    return checked

  def update_fn(updates, state, params=None):
    same_tree(updates, params, caller)
    non_finite(updates, caller, "gradient")
    if params is not None:
      non_finite(params, caller, "parameter")
    return updates, state

  return optax.chain(optax.GradientTransformation(optax.init_empty_state, update_fn), checked)
