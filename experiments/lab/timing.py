"""The one timer every benchmark uses: interleaved rounds, medians.

The machines this project runs on are shared and noisy, so a benchmark never times one
contender after another: `interleaved` runs every contender once per round, for several
rounds, and reports each one's median. Drift in machine load then hits all of them alike,
and the ratios stay meaningful even when the absolute times do not.

Example:
  >>> import jax.numpy as jnp
  >>> x = jnp.ones((64, 64))
  >>> times = interleaved({"mm": lambda: x @ x, "add": lambda: x + x}, rounds=3)
  >>> sorted(times)
  ['add', 'mm']
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jax


def seconds(fn: Callable[[], object]) -> float:
  """Wall time of one call of `fn`, waiting for every array it returns."""
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def timed(fn: Callable[[], object]) -> tuple[float, object]:
  """`(seconds, result)` of one call of `fn`, waiting for every array it returns."""
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - start, out


def median_seconds(fn: Callable[[], object], repeats: int, *, warmup: int = 1) -> float:
  """Median wall time of `repeats` calls of `fn`, after `warmup` untimed calls."""
  for _ in range(warmup):
    jax.block_until_ready(fn())
  return statistics.median(seconds(fn) for _ in range(repeats))


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, *,
                warmup: int = 1) -> dict[str, float]:
  """Median seconds per call of each of `fns`, timed in `rounds` interleaved rounds.

  Args:
    fns: name -> zero-argument callable (already jitted; the warm-up compiles it).
    rounds: timed rounds; each calls every function once, in the given order.
    warmup: untimed calls of each function before the first round.

  Returns:
    name -> median seconds.
  """
  if rounds < 1:
    raise ValueError(f"interleaved: {rounds=} must be >= 1")
  for fn in fns.values():
    for _ in range(warmup):
      jax.block_until_ready(fn())
  times: dict[str, list[float]] = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      times[name].append(seconds(fn))
  return {name: statistics.median(t) for name, t in times.items()}
