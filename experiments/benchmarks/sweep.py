"""Benchmark: how fast the claims' training sweeps run, per strategy, against the machine's ceiling.

    python -m experiments.benchmarks.sweep [--sizes pico-20,micro-20,mini-20] [--runs 1,5,20]
                                           [--steps 8,24] [--rounds 1]

Every claim trains through `experiments.train.sweep.train_many`. For each size (the trained
regime's GPT recipes: AdamW at 16 × 128 tokens a step) and each run count, every strategy
trains the same runs (seeds 0…R−1 at one rate) for two step counts with one compiled program
(loaded from JAX's persistent cache after a first, untimed call); the difference of the two
wall times over the difference of the run-steps is the steady-state rate, so loading and
start-up cancel, and the compile time is shown apart. The strategies:

- `vmap-today`: one `jax.vmap`-ed program over the runs, the layer scan looped and the weight
  gradients autodiff's own — the sweep as it was before issue 50 (`strategy="vmap",
  scan_unroll=1`, traced inside `transformer.layout.plain_products()`), the baseline of every
  ratio;
- `vmap`: the same with the shallow models' layer scan unrolled;
- `sequential`: one unbatched program per run, each call waited for;
- `dispatch`: the same calls, all in flight at once (the runtime overlaps them on the cores);
- `dispatch-plain`: `dispatch` with autodiff's own weight gradients (`plain_products()`), so
  the share of `transformer.layout.matmul` (dW from a row-major `xᵀ`) shows apart;
- `processes`: one worker process per core, each single-threaded XLA, running its share of
  the runs in turn (the closures a claim passes are not picklable, so the sweep itself
  cannot use this; it is here to show what the machine gives).

Achieved FLOP/s count `6 N` per token plus attention's `12 L T D` per token (QKᵀ and AV,
forward and backward, the causal half not skipped) and are shown as a share of the float32
matmul ceiling measured in the same run (a 2048² matmul). Each step count is timed `--rounds`
times, interleaved across strategies, and the median taken. The last line is JSON.

Where one run's step spends that time, op by op and by model part:
`python -m experiments.benchmarks.step_profile`.

On 2 shared CPU cores a full run (3 sizes, 1/5/20 runs, 5 strategies) takes about 25 minutes.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import contextlib
import json
import multiprocessing
import os
import resource
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

STRATEGIES = ("vmap-today", "vmap", "sequential", "dispatch", "dispatch-plain", "processes")
RATE = 3e-3


def _recipe(size: str):
  from experiments.models import recipes
  return recipes.RECIPES[size]


def flops_per_run_step(size: str) -> float:
  """`6 N` per token plus attention's `12 L T D` per token, times the step's `B T` tokens.

  Example:
    >>> round(flops_per_run_step("micro-20") / 1e9, 2)  # 0.52 of 6N, 0.20 of attention
    0.72
  """
  from experiments.models import param_count
  rec = _recipe(size)
  tokens = rec.batch_size * rec.seq_len
  return tokens * (6 * param_count(size) + 12 * rec.cfg.n_layers * rec.seq_len * rec.cfg.d_model)


def train_runs(size: str, seeds, steps: int, strategy: str, eval_every: int) -> float:
  """Seconds to train `seeds` at `size` for `steps` steps with `strategy` (not `processes`)."""
  from experiments.lab import optimizers, tuning
  from experiments.train import sweep
  from transformer.layout import plain_products
  rec = _recipe(size)
  kw = {"vmap-today": {"strategy": "vmap", "scan_unroll": 1},
        "dispatch-plain": {"strategy": "dispatch"}}.get(strategy, {"strategy": strategy})
  plain = plain_products() if strategy in ("vmap-today", "dispatch-plain") else (
      contextlib.nullcontext())
  start = time.perf_counter()
  with plain:
    r = sweep.train_many(rec.cfg, tuning.on_budget(optimizers.adamw_arm(), 1000), seeds=seeds,
                         learning_rates=(RATE,), steps=steps, data="stdlib",
                         batch_size=rec.batch_size, seq_len=rec.seq_len, eval_every=eval_every,
                         eval_batches=0, **kw)
  if not np.isfinite(r.loss).all():
    raise RuntimeError(f"sweep benchmark: {size} {strategy} gave a non-finite loss")
  return time.perf_counter() - start


def _worker(size: str, seeds, steps: int, eval_every: int) -> float:
  return train_runs(size, tuple(seeds), steps, "sequential", eval_every)


def _processes(size: str, seeds, steps: int, eval_every: int, workers: int) -> float:
  """Wall seconds for `workers` single-threaded processes to train their shares of `seeds`."""
  shares = [s for s in (tuple(seeds[i::workers]) for i in range(workers)) if s]
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
  try:
    start = time.perf_counter()
    with futures.ProcessPoolExecutor(len(shares),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
      n = len(shares)
      list(pool.map(_worker, [size] * n, shares, [steps] * n, [eval_every] * n))
    return time.perf_counter() - start
  finally:
    os.environ["XLA_FLAGS"] = flags


def matmul_ceiling(n: int = 2048, repeats: int = 5) -> float:
  """Float32 FLOP/s of an `n × n` matmul on the default device (median of `repeats`)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  mm = jax.jit(lambda x: x @ x)
  jax.block_until_ready(mm(a))
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(mm(a))
    times.append(time.perf_counter() - t)
  return 2 * n**3 / statistics.median(times)


def _cpu_seconds() -> float:
  """CPU time of this process and its finished children, every thread, user and system."""
  me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(size: str, runs: int, steps: tuple[int, int], strategies, rounds: int,
            workers: int) -> dict:
  """`{strategy: {"run_steps_per_s", "cpu_ms_per_run_step", "compile_s"}}` at `size`.

  Every call evaluates every `steps[0]` steps, so both step counts run one program; a first
  untimed call compiles it into the persistent cache, and its excess over the cached call at
  the same steps is the compile time (0 where an earlier strategy compiled the same program:
  sequential and dispatch share theirs). CPU time per run-step is the work a strategy does,
  which other load on a shared machine does not inflate the way it inflates wall time.
  """
  seeds = tuple(range(runs))

  def once(s, n):
    cpu = _cpu_seconds()
    wall = (_processes(size, seeds, n, steps[0], workers) if s == "processes"
            else train_runs(size, seeds, n, s, steps[0]))
    return wall, _cpu_seconds() - cpu

  first = {s: once(s, steps[0])[0] for s in strategies}
  walls = {s: {n: [] for n in steps} for s in strategies}
  cpus = {s: {n: [] for n in steps} for s in strategies}
  for _ in range(rounds):
    for n in steps:
      for s in strategies:
        wall, cpu = once(s, n)
        walls[s][n].append(wall)
        cpus[s][n].append(cpu)
  out = {}
  lo, hi = steps
  for s in strategies:
    w_lo, w_hi = (statistics.median(walls[s][n]) for n in steps)
    c_lo, c_hi = (statistics.median(cpus[s][n]) for n in steps)
    out[s] = {"run_steps_per_s": (hi - lo) * runs / max(w_hi - w_lo, 1e-9),
              "cpu_ms_per_run_step": 1e3 * (c_hi - c_lo) / ((hi - lo) * runs),
              "compile_s": max(first[s] - w_lo, 0.0)}
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.sweep",
                              description=__doc__.split("\n")[0])
  p.add_argument("--sizes", default="pico-20,micro-20,mini-20")
  p.add_argument("--runs", default="1,5,20")
  p.add_argument("--steps", default="10,40",
                 help="two step counts, differenced; the second a multiple of the first")
  p.add_argument("--strategies", default=",".join(STRATEGIES))
  p.add_argument("--rounds", type=int, default=1)
  p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
  p.add_argument("--cache", default=None,
                 help="compilation cache folder (default: a fresh one, so compiles are timed)")
  args = p.parse_args(argv)
  cache = args.cache or tempfile.mkdtemp(prefix="sweep-bench-cache-")
  jax.config.update("jax_compilation_cache_dir", cache)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = cache  # the worker processes' cache too
  steps = tuple(int(x) for x in args.steps.split(","))
  if len(steps) != 2 or not 0 < steps[0] < steps[1] or steps[1] % steps[0]:
    raise SystemExit(f"--steps {args.steps!r}: give two increasing step counts, the second a "
                     "multiple of the first (one program runs both), e.g. 10,40.")
  strategies = tuple(args.strategies.split(","))
  unknown = set(strategies) - set(STRATEGIES)
  if unknown:
    raise SystemExit(f"--strategies: {sorted(unknown)} unknown. Fix: any of {STRATEGIES}.")
  ceiling = matmul_ceiling()
  print(f"float32 matmul ceiling (2048², {jax.default_backend()}, {os.cpu_count()} cores): "
        f"{ceiling / 1e9:.0f} GFLOP/s; load average {os.getloadavg()[0]:.1f}", flush=True)
  table = []
  for size in args.sizes.split(","):
    flops = flops_per_run_step(size)
    for runs in (int(x) for x in args.runs.split(",")):
      res = measure(size, runs, steps, strategies, args.rounds, args.workers)
      base = res.get("vmap-today", next(iter(res.values())))["run_steps_per_s"]
      for s, r in res.items():
        rate = r["run_steps_per_s"]
        row = {"size": size, "runs": runs, "strategy": s, "run_steps_per_s": round(rate, 2),
               "gflops": round(rate * flops / 1e9, 2),
               "ceiling_share": round(rate * flops / ceiling, 4),
               "vs_vmap_today": round(rate / base, 2),
               "cpu_ms_per_run_step": round(r["cpu_ms_per_run_step"], 1),
               "compile_s": round(r["compile_s"], 1)}
        table.append(row)
        print(f"{size:>9} x{runs:<3} {s:<11} {rate:7.1f} run-steps/s  {row['gflops']:6.1f} "
              f"GFLOP/s  {100 * row['ceiling_share']:4.1f}% of ceiling  "
              f"{row['vs_vmap_today']:5.2f}x vmap-today  "
              f"{row['cpu_ms_per_run_step']:6.1f} CPU-ms/run-step  "
              f"compile {row['compile_s']:5.1f} s",
              flush=True)
  best = {f"{r['size']} x{r['runs']}": max(
      (x for x in table if x["size"] == r["size"] and x["runs"] == r["runs"]),
      key=lambda x: x["run_steps_per_s"])["strategy"] for r in table}
  print(json.dumps({"benchmark": "sweep", "ceiling_gflops": round(ceiling / 1e9, 1),
                    "load_average": round(os.getloadavg()[0], 1), "steps": steps,
                    "best": best, "rows": table}))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
