"""Forward and backward time of one attention layer vs sequence length, per variant.

    python -m experiments.benchmarks.attention [--max-t 8192] [--rounds 3] [--heads 4]
                                               [--d-head 32] [--block-size 64]

For `T = 512, 1024, … max_t` it times the registry function of `softmax`, `local`, `bigbird`,
`moba` and `linear` (batch 1, `H` heads of width `dh`, causal) forward (`out`) and forward +
backward (`∂ sum(out) / ∂(q, k, v)`), jitted, in interleaved rounds
(`experiments.lab.attention_timing`). It prints, per variant, the median times, the log-log
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

from experiments.lab.attention_timing import run


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
