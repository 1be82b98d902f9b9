"""Forward and backward time of one attention layer vs sequence length, per variant.

The measurement behind `python -m experiments.benchmarks.attention` (which prints it) and the
`sliding-window` claim (which reads its slopes and crossovers): for `T = min_t, 2·min_t, …
max_t`, each registry variant's forward and forward + backward, jitted, timed in interleaved
rounds (`experiments.lab.timing`), with the bytes of its score tensor and XLA's temporary
bytes of the compiled forward.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np

from experiments.lab.timing import interleaved
from transformer.attention import ATTENTION, LINEAR_CHUNK

VARIANTS = ("softmax", "local", "bigbird", "moba", "linear")


def options(block_size: int) -> dict[str, dict]:
  """Keyword options of each benchmarked variant."""
  w = 2 * block_size
  return {"softmax": {}, "linear": {},
          "local": dict(window=w, block_size=block_size),
          "bigbird": dict(window=w, block_size=block_size, n_global=16, n_random=1),
          "moba": dict(block_size=block_size, top_k_blocks=2)}


def score_bytes(name: str, T: int, heads: int, d_head: int, block_size: int) -> int:
  """Bytes of the float32 score tensor each variant forms at length `T` (batch 1).

  Example:
    >>> from experiments.lab.attention_timing import score_bytes
    >>> score_bytes("softmax", 512, 4, 32, 64) == 4 * 4 * 512 * 512
    True
  """
  opts = options(block_size)[name]
  n_blocks = math.ceil(T / block_size)
  rows = heads * n_blocks * block_size
  if name == "softmax":
    per_row = T
  elif name == "local":
    per_row = (math.ceil((opts["window"] - 1) / block_size) + 1) * block_size
  elif name == "bigbird":
    per_row = ((math.ceil((opts["window"] - 1) / block_size) + 1 + opts["n_random"])
               * block_size + opts["n_global"])
  elif name == "moba":
    per_row = (1 + opts["top_k_blocks"]) * block_size + n_blocks  # + the gate's block scores
  else:  # linear: the quadratic form inside each chunk, and one running sum per chunk
    chunk = LINEAR_CHUNK
    n_chunks = math.ceil(T / chunk)
    return 4 * heads * n_chunks * (chunk * chunk + d_head * (d_head + 1))
  return 4 * rows * per_row


def slope(ts, times) -> float:
  """Least-squares slope of log(time) against log(T).

  Example:
    >>> from experiments.lab.attention_timing import slope
    >>> round(slope([512, 1024, 2048], [1.0, 4.0, 16.0]), 6)
    2.0
  """
  return float(np.polyfit(np.log(ts), np.log(times), 1)[0])


def crossover(ts, times, base) -> float | None:
  """Smallest `T` at which `times <= base`, interpolated log-log between grid points.

  Returns the first `T` if it already wins there, None if it never wins on the grid.
  """
  ratio = np.log(np.asarray(times) / np.asarray(base))
  if ratio[0] <= 0:
    return float(ts[0])
  for i in range(1, len(ts)):
    if ratio[i] <= 0:
      x0, x1 = np.log(ts[i - 1]), np.log(ts[i])
      return float(np.exp(x0 + (x1 - x0) * ratio[i - 1] / (ratio[i - 1] - ratio[i])))
  return None


def run(max_t: int = 4096, *, rounds: int = 3, heads: int = 4, d_head: int = 32,
        block_size: int = 64, min_t: int = 512, variants=VARIANTS) -> dict:
  """Time every variant at `T = min_t, 2·min_t, … max_t`; returns the table as a dict."""
  opts = options(block_size)
  ts = [t for t in (min_t * 2**i for i in range(16)) if t <= max_t]
  if not ts:
    raise ValueError(f"run: max_t={max_t} < min_t={min_t}. Fix: pass --max-t >= {min_t}.")
  table = {name: {"fwd": [], "bwd": [], "score_bytes": [], "temp_bytes": []}
           for name in variants}
  for T in ts:
    keys = jax.random.split(jax.random.key(T), 3)
    q, k, v = (jax.random.normal(key, (1, T, heads, d_head)) for key in keys)
    fns = {}
    for name in variants:
      attn = functools.partial(ATTENTION[name], scale=d_head**-0.5, **opts[name])
      fwd = jax.jit(lambda q, k, v, attn=attn: attn(q, k, v, None)[0])
      bwd = jax.jit(jax.grad(lambda q, k, v, attn=attn: attn(q, k, v, None)[0].sum(),
                             argnums=(0, 1, 2)))
      fns[f"{name}/fwd"] = functools.partial(fwd, q, k, v)
      fns[f"{name}/bwd"] = functools.partial(bwd, q, k, v)
      mem = fwd.lower(q, k, v).compile().memory_analysis()
      table[name]["temp_bytes"].append(None if mem is None else int(mem.temp_size_in_bytes))
      table[name]["score_bytes"].append(score_bytes(name, T, heads, d_head, block_size))
    times = interleaved(fns, rounds)
    for name in variants:
      table[name]["fwd"].append(times[f"{name}/fwd"])
      table[name]["bwd"].append(times[f"{name}/bwd"])
    print(f"T={T}: " + ", ".join(f"{n} {times[f'{n}/fwd'] * 1e3:.1f}/{times[f'{n}/bwd'] * 1e3:.1f}"
                                  for n in variants) + " ms (fwd/fwd+bwd)", flush=True)
  for name in variants:
    row = table[name]
    for kind in ("fwd", "bwd"):
      row[f"slope_{kind}"] = slope(ts, row[kind]) if len(ts) > 1 else None
      if "softmax" in table and name != "softmax":
        row[f"crossover_{kind}"] = crossover(ts, row[kind], table["softmax"][kind])
  return {"T": ts, "heads": heads, "d_head": d_head, "block_size": block_size,
          "options": opts, "backend": jax.default_backend(), "variants": table}
