"""Hyper-parameter checks shared by `optim` and `analysis`: one line naming the argument, the
value and the fix, raised before anything is traced.

The two packages never import each other, so the one set of checks lives here, beside the
linear algebra they share. Each check runs once, when a transform is built or an analysis
function is called, on Python (or NumPy, or concrete JAX) scalars: a `jax.core.Tracer` — a
hyper-parameter that `optax.inject_hyperparams` feeds in under `jit` — is left to the trace, so
the checks cost nothing per step.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np


def _is_int(x) -> bool:
  return isinstance(x, numbers.Integral | np.integer) and not isinstance(x, bool | np.bool_)


def _kind(value) -> str:
  """How a value reads in a message: `a str`, `a list`, `an array of shape (3,)`."""
  if hasattr(value, "shape") and not isinstance(value, str):
    return f"an array of shape {tuple(value.shape)}"
  name = type(value).__name__
  return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def scalar(value, name: str, caller: str, *, schedule: bool = False,
           example: str = "0.1") -> float | None:
  """`value` as a Python float, after checking that it is a real number (or a schedule).

  Args:
    value: the hyper-parameter.
    name: the argument's name.
    caller: the function's name, for the message.
    schedule: also accept a callable (an optax schedule: a function of the step count).
    example: a value to suggest in the message.

  Returns:
    The float, or `None` when it cannot be known here (a schedule, or a traced array).

  Raises:
    ValueError: (one line) for a string, a bool, a complex number, a container or an array
      that is not a scalar.
  """
  if isinstance(value, jax.core.Tracer):
    return None
  if schedule and callable(value) and not hasattr(value, "shape"):
    return None
  fix = (f"pass a number (e.g. {example})"
         + (" or a schedule (a function of the step count, e.g. "
            "optax.cosine_decay_schedule(...))" if schedule else ""))
  if isinstance(value, str):
    hint = ""
    try:
      hint = f" (did you mean {float(value)!r}, without quotes?)"
    except ValueError:
      pass
    raise ValueError(f"{caller}: {name}={value!r} is a str; {fix}{hint}")
  if isinstance(value, bool | np.bool_) or not (
      isinstance(value, numbers.Real) or (hasattr(value, "shape") and hasattr(value, "dtype"))):
    raise ValueError(f"{caller}: {name}={value!r} is {_kind(value)}; {fix}")
  if hasattr(value, "shape"):
    if tuple(value.shape) != () or not np.issubdtype(np.dtype(value.dtype), np.number) or (
        np.issubdtype(np.dtype(value.dtype), np.complexfloating)):
      raise ValueError(f"{caller}: {name} is {_kind(value)} of dtype {value.dtype}; {fix} "
                       f"(one real scalar)")
  return float(value)


def check_range(value, name: str, caller: str, *, low: float | None = None,
                high: float | None = None, low_open: bool = False, high_open: bool = False,
                schedule: bool = False, allow_none: bool = False, example: str = "0.1",
                why: str = "") -> None:
  """`value` must be a finite real number in the interval the bounds give (or a schedule, or
  `None` where allowed).

  Args:
    value: the hyper-parameter.
    name: its argument name.
    caller: the function's name.
    low: lower bound (`None`: none); `low_open` excludes it.
    high: upper bound (`None`: none); `high_open` excludes it.
    schedule: accept a callable of the step count.
    allow_none: accept `None` (the argument's default).
    example: a typical value, for the message.
    why: a short reason appended to the message (`"a negative rate ascends the loss"`).

  Raises:
    ValueError: (one line) naming `name`, the value and the range.
  """
  if value is None and allow_none:
    return
  x = scalar(value, name, caller, schedule=schedule, example=example)
  if x is None:
    return
  ok = math.isfinite(x)
  if ok and low is not None:
    ok = x > low if low_open else x >= low
  if ok and high is not None:
    ok = x < high if high_open else x <= high
  if not ok:
    lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
    hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
    where = (f"in {lo}, {hi}" if low is not None and high is not None
             else f"{'>' if low_open else '>='} {low:g}" if low is not None
             else f"{'<' if high_open else '<='} {high:g}")
    raise ValueError(f"{caller}: {name}={value!r}; pass a finite number {where} "
                     f"(e.g. {example}){'; ' + why if why else ''}")


def check_int(value, low: int, name: str, caller: str, *, allow_none: bool = False,
              high: int | None = None) -> None:
  """`value` must be an `int` in `[low, high]` (or `None` where allowed; a traced array is
  left to the trace)."""
  if (value is None and allow_none) or isinstance(value, jax.core.Tracer):
    return
  if isinstance(value, jax.Array) and value.shape == () and _is_int(value.dtype.type(0)):
    value = int(value)
  if not _is_int(value) or value < low or (high is not None and value > high):
    span = f">= {low}" if high is None else f"in [{low}, {high}]"
    raise ValueError(f"{caller}: {name}={value!r}; pass an int {span}"
                     + (" (or None for the default)" if allow_none else ""))


def check_flag(value, name: str, caller: str, *, allow_none: bool = False) -> None:
  """`value` must be `True` or `False` (or `None` where allowed)."""
  if (value is None and allow_none) or isinstance(value, bool | np.bool_):
    return
  raise ValueError(f"{caller}: {name}={value!r}; pass True or False"
                   + (" (or None for the default)" if allow_none else ""))


def check_choice(value, options, name: str, caller: str) -> None:
  """`value` must be one of `options` (strings, or `None`)."""
  if isinstance(value, str | type(None)) and value in options:
    return
  raise ValueError(f"{caller}: unknown {name}={value!r}; choose one of "
                   f"{', '.join(repr(o) for o in options)}")


def check_callable(value, name: str, caller: str, *, allow_none: bool = True,
                   what: str = "a function") -> None:
  """`value` must be callable (or `None` where allowed)."""
  if (value is None and allow_none) or callable(value):
    return
  raise ValueError(f"{caller}: {name}={value!r} is {_kind(value)}, not callable; pass "
                   f"{what}" + (" or None" if allow_none else ""))


def first_non_finite(tree) -> str | None:
  """The path (`/`-joined) of the first float leaf of `tree` holding a NaN or an infinity,
  `''` for a bare array, or `None` when every value is finite (or not known: traced)."""
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  for path, x in leaves:
    if isinstance(x, jax.core.Tracer) or not hasattr(x, "dtype"):
      continue
    if not np.issubdtype(np.dtype(x.dtype), np.inexact):
      continue
    # A NumPy array is checked in its own precision (float64 stays float64: no false inf).
    finite = np.isfinite(x).all() if isinstance(x, np.ndarray | np.generic) else (
        jnp.all(jnp.isfinite(x)))
    if not bool(finite):
      return jax.tree_util.keystr(path, simple=True, separator="/")
  return None

