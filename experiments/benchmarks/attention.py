"""Forward and backward time of one attention layer vs sequence length, per variant.

    python -m experiments.benchmarks.attention [--max-t 8192] [--rounds 3] [--heads 4]
                                               [--d-head 32] [--block-size 64]

For `T = 512, 1024, … max_t` it times the registry function of `softmax`, `local`, `bigbird`,
`moba` and `linear` (batch 1, `H` heads of width `dh`, causal) forward (`out`) and forward +
backward (`∂ sum(out) / ∂(q, k, v)`), jitted, in interleaved rounds
(`experiments.benchmarks.timing`). It prints, per variant, the median times, the log-log
slope of time against `T` (2 for dense attention, 1 for the block-sparse and linear ones), the
crossover `T` from which the variant is faster than `softmax`, the bytes of its score tensor
(the `(T, S)` scores softmax forms, the gathered blocks the sparse ones form; for `linear`,
chunked in `C = LINEAR_CHUNK` positions, the `C × C` quadratic form of each chunk plus the
chunk's sums `Σ φ(k) vᵀ`, `Σ φ(k)`: `⌈T/C⌉ (C² + dh (dh + 1))` numbers per head) and XLA's
temporary bytes of the compiled forward. The projections (`x W_Q`, …) cost the same for
every variant and are left out.

Defaults: block 64; `local` window 128 (≤ 128 keys per query); `bigbird` window 128 + 16
global tokens + 1 random block; `moba` 2 picked blocks + its own (≤ 192 keys). With
`--max-t 4096` it takes a few minutes on 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import functools
import math

import jax
import numpy as np

from experiments.benchmarks.timing import interleaved
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
    >>> from experiments.benchmarks.attention import score_bytes
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
    >>> from experiments.benchmarks.attention import slope
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


def render(result: dict) -> str:
  """The result as a markdown table."""
  ts = result["T"]
  head = ("| variant | " + " | ".join(f"fwd/bwd ms T={t}" for t in ts)
          + " | slope fwd | slope bwd | crossover fwd | crossover bwd | score MiB @max T"
          + " | XLA temp MiB @max T |")
  lines = [head, "|" + " --- |" * (len(ts) + 7)]

  def fmt(x, spec):
    return "—" if x is None else format(x, spec)

  for name, row in result["variants"].items():
    cells = [f"{f * 1e3:.1f}/{b * 1e3:.1f}" for f, b in zip(row["fwd"], row["bwd"], strict=True)]
    temp = row["temp_bytes"][-1]
    lines.append(
        f"| {name} | " + " | ".join(cells)
        + f" | {fmt(row['slope_fwd'], '.2f')} | {fmt(row['slope_bwd'], '.2f')}"
        + f" | {fmt(row.get('crossover_fwd'), '.0f')} | {fmt(row.get('crossover_bwd'), '.0f')}"
        + f" | {row['score_bytes'][-1] / 2**20:.1f} | {fmt(temp and temp / 2**20, '.1f')} |")
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.attention",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--max-t", type=int, default=8192)
  parser.add_argument("--min-t", type=int, default=512)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--d-head", type=int, default=32)
  parser.add_argument("--block-size", type=int, default=64)
  args = parser.parse_args(argv)
  result = run(args.max_t, rounds=args.rounds, heads=args.heads, d_head=args.d_head,
               block_size=args.block_size, min_t=args.min_t)
  print(f"backend {result['backend']}, batch 1, heads {args.heads}, d_head {args.d_head}, "
        f"block {args.block_size}; options {result['options']}")
  print(render(result))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
