"""Jacobian spectra, dense vs matrix-free, at scale, and end to end through a whole model.

    python -m experiments.benchmarks.jacobian [--k 8] [--tol 1e-4] [--rounds 3]
        [--scale-t 256 512 1024 2048] [--scale-krylov-dim 160] [--budget 60]
        [--train-steps 100] [--e2e small gpt2-small] [--runs runs]

Every matrix-free value here is converged by the library's rule: the Krylov space grows until
every requested value's bound is at most `tol · σ_1` (`analysis.jacobian_top_singular_values`,
`transformer.linalg.lanczos_svd`); a row that did not converge is marked `NO` and is never
counted as a size reached. Takes about 5 minutes on 2 idle CPU cores (15–25 on busy ones),
most of it the `T = 2048` rows. Three parts, one run:

1. Ratio. For one block of width `d = 64` at `T = 8, 16, 32` (`T·d` = 512 … 2048), the time
   of the top-`k` singular values of `J = ∂block/∂x` by the dense path (`jax.jacfwd`, then an
   SVD of the `(T·d)²` matrix) and by the matrix-free path (Golub–Kahan–Lanczos through one
   `jax.linearize` and its transpose, never forming `J`), both compiled ahead, timed in
   interleaved rounds (`experiments.lab.timing`), with the Krylov dimension the
   matrix-free path needed and the measured agreement.
2. Scale. One block of width `d = 512` (8 heads) at `T = 256 … 2048`, up to
   `T·d = 2²⁰ ≈ 1.05·10⁶`, at a random normal input: the compile and run seconds of the
   converged top-`k`, the Krylov dimension used (cap `--scale-krylov-dim`; memory
   `≈ 2 · cap · T·d` floats, 1.3 GB at the cap 160 and `T·d = 2²⁰`) and the largest bound
   relative to `σ_1`. Two blocks: **trained**, the layer of a one-layer model after
   `--train-steps` AdamW steps on the stdlib corpus (the block analysis is applied to), and
   **init**, the same layer at initialization: near the identity, its top singular values
   cluster (1.506, 1.504, 1.491, … at `T = 512`), the slow case for Krylov methods. The
   summary gives, per block, the largest converged `T·d` within `--budget` seconds
   (compile + run).
3. End to end. The Jacobian of a whole model, from the residual stream after the embeddings
   to the stream before the final norm (`analysis.model_jacobian_top_singular_values`), at
   the `small` shared model (trained, `experiments.models.trained.base_model`, on stdlib validation
   tokens) and at gpt2-small width (`transformer.preset("gpt2-small")`, at init, random
   tokens; `--gpt2-layers` and `--gpt2-t` set its depth and length).

The dense path needs `4 (T·d)²` bytes and `O((T·d)³)` time; the matrix-free path needs
`O(krylov_dim · T·d)` memory and one JVP/VJP pair per Krylov vector, so only it reaches
`T·d ≥ 10⁶`.
"""

from __future__ import annotations

import argparse
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments.lab import timing


def _block(d: int, T: int, n_heads: int, key: jax.Array):
  cfg = transformer.preset("tiny", d_model=d, n_heads=n_heads, n_layers=1, max_len=T)
  init_key, x_key = jax.random.split(key)
  params = transformer.layer(transformer.init(cfg, init_key, seq_len=8), 0)
  x_TD = jax.random.normal(x_key, (T, d))
  return transformer.block_fn(cfg), params, x_TD


def trained_block(d: int, n_heads: int, steps: int, seed: int = 0) -> tuple[dict, float]:
  """Layer 0 of a one-layer model (`tiny` family) after `steps` AdamW steps on stdlib text
  (batch 8 × 128 tokens, warm-up 10), and its final training loss."""
  from experiments import train
  from experiments.train import sweep

  cfg = transformer.preset("tiny", d_model=d, n_heads=n_heads, n_layers=1, max_len=128)
  tc = train.TrainConfig(steps=steps, batch_size=8, seq_len=128, warmup_steps=min(10, steps))
  res = sweep.train_many(cfg, sweep.train_like(tc), seeds=(seed,), learning_rates=(3e-3,),
                            steps=steps, data="stdlib", batch_size=8, seq_len=128,
                            eval_every=steps, eval_batches=1)
  params = jax.tree.map(lambda a: a[0, 0], res.params)
  return transformer.layer(params, 0), float(res.loss[0, 0, -1])


def compare(T: int, d: int, k: int, tol: float = 1e-4, krylov_dim: int | None = None,
            rounds: int = 3) -> dict:
  """Median run times (compiled ahead) of the dense and matrix-free top-`k` singular values."""
  f, params, x_TD = _block(d, T, n_heads=4, key=jax.random.key(0))

  def dense(p, x):
    J = analysis.jacobian(functools.partial(f, p), x, max_bytes=2**31)
    return jnp.linalg.svd(J, compute_uv=False)[:k]

  def matrix_free(p, x):
    return analysis.jacobian_top_singular_values(functools.partial(f, p), x, k, tol=tol,
                                                 krylov_dim=krylov_dim)

  compiled = {name: jax.jit(fn).lower(params, x_TD).compile()
              for name, fn in (("dense", dense), ("matrix_free", matrix_free))}
  times = timing.interleaved({name: functools.partial(c, params, x_TD)
                              for name, c in compiled.items()}, rounds)
  s = np.asarray(compiled["dense"](params, x_TD), np.float64)
  res = compiled["matrix_free"](params, x_TD)
  values = np.asarray(res.values, np.float64)
  return {"dense_s": times["dense"], "matrix_free_s": times["matrix_free"],
          "rel_err": float(np.max(np.abs(values - s)) / s[0]),
          "bound": float(np.max(np.asarray(res.bounds)) / values[0]),
          "converged": bool(np.all(np.asarray(res.converged))),
          "krylov_dim": int(res.krylov_dim)}


def _timed(fn, *args) -> dict:
  """Compile `fn(*args)` ahead, run it once; seconds of each and the `SVDResult` summary."""
  compiled = None

  def build():
    nonlocal compiled
    compiled = jax.jit(fn).lower(*args).compile()

  compile_s = timing.seconds(build)
  res = None

  def run():
    nonlocal res
    res = compiled(*args)
    return res

  run_s = timing.seconds(run)
  values = np.asarray(res.values, np.float64)
  if not np.all(np.isfinite(values)):
    raise FloatingPointError(f"non-finite singular values: {values}")
  return {"compile_s": compile_s, "run_s": run_s, "values": values,
          "bound": float(np.max(np.asarray(res.bounds)) / values[0]),
          "converged": bool(np.all(np.asarray(res.converged))),
          "krylov_dim": int(res.krylov_dim)}


def scale(block_params, d: int, T: int, k: int, tol: float, krylov_dim: int | None,
          n_heads: int = 8) -> dict:
  """Compile and run seconds, convergence and largest bound / σ_1 of the top-`k` of one block's
  Jacobian at `T·d`, at a random normal input."""
  f, init_params, x_TD = _block(d, T, n_heads, key=jax.random.key(0))
  params = init_params if block_params is None else block_params
  return _timed(lambda p, x: analysis.jacobian_top_singular_values(
      functools.partial(f, p), x, k, tol=tol, krylov_dim=krylov_dim), params, x_TD)


def end_to_end(params, cfg: transformer.Config, tokens_T, k: int, tol: float,
               krylov_dim: int | None) -> dict:
  """Compile and run seconds and convergence of the whole model's top-`k`."""
  return _timed(lambda p, t: analysis.model_jacobian_top_singular_values(
      p, cfg, t, k, tol=tol, krylov_dim=krylov_dim), params, tokens_T)


def _row(label: str, r: dict) -> str:
  total = r["compile_s"] + r["run_s"]
  return (f"{label}  compile {r['compile_s']:6.1f} s  run {r['run_s']:6.1f} s  total "
          f"{total:6.1f} s  krylov {r['krylov_dim']:>4}  converged "
          f"{'yes' if r['converged'] else 'NO':>3}  max bound/σ1 {r['bound']:.1e}  σ "
          + " ".join(f"{v:.4f}" for v in r["values"][:4]) + " …")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.jacobian",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--k", type=int, default=8)
  parser.add_argument("--tol", type=float, default=1e-4,
                      help="required accuracy relative to σ_1")
  parser.add_argument("--krylov-dim", type=int, default=None,
                      help="cap on the Krylov dimension (ratio part; default: the library's)")
  parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
  parser.add_argument("--compare-t", type=int, nargs="*", default=[8, 16, 32])
  parser.add_argument("--scale-d", type=int, default=512)
  parser.add_argument("--scale-t", type=int, nargs="*", default=[256, 512, 1024, 2048])
  parser.add_argument("--scale-krylov-dim", type=int, default=160,
                      help="cap on the Krylov dimension (scale part); each step streams the "
                      "whole basis, so a cap far above the need costs time")
  parser.add_argument("--blocks", nargs="*", default=["trained", "init"],
                      choices=["trained", "init"], help="which blocks the scale part measures")
  parser.add_argument("--train-steps", type=int, default=100,
                      help="AdamW steps of the trained block")
  parser.add_argument("--budget", type=float, default=60.0,
                      help="seconds (compile + run) a converged size must fit")
  parser.add_argument("--give-up", type=float, default=900.0,
                      help="stop a block's sweep after a size that took longer than this")
  parser.add_argument("--e2e", nargs="*", default=["small", "gpt2-small"],
                      choices=["small", "gpt2-small"], help="whole models of part 3")
  parser.add_argument("--e2e-krylov-dim", type=int, default=None,
                      help="cap on the Krylov dimension (part 3; default: the library's)")
  parser.add_argument("--gpt2-layers", type=int, default=12)
  parser.add_argument("--gpt2-t", type=int, default=64)
  parser.add_argument("--runs", default="runs", help="the runs folder holding cache/ "
                      "(the `small` shared model is trained there if missing)")
  args = parser.parse_args(argv)

  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores, "
        f"load average {load:.2f} at start")
  if args.compare_t:
    d = 64
    print(f"\n1. top-{args.k} singular values of one block's Jacobian, d={d}, tol={args.tol:g} "
          f"(compiled ahead, median of {args.rounds} interleaved rounds)")
    print(f"{'T':>5} {'T·d':>7} {'dense s':>9} {'matrix-free s':>14} {'ratio':>7} "
          f"{'krylov':>7} {'conv.':>6} {'bound/σ1':>9} {'rel err':>9}")
    for T in args.compare_t:
      r = compare(T, d, args.k, args.tol, args.krylov_dim, args.rounds)
      ratio = f"{r['dense_s'] / r['matrix_free_s']:>7.1f}" if r["converged"] else f"{'-':>7}"
      print(f"{T:>5} {T * d:>7} {r['dense_s']:>9.3f} {r['matrix_free_s']:>14.3f} {ratio} "
            f"{r['krylov_dim']:>7} {('yes' if r['converged'] else 'NO'):>6} "
            f"{r['bound']:>9.1e} {r['rel_err']:>9.1e}", flush=True)

  if args.scale_t and args.blocks:
    print(f"\n2. one block's Jacobian at scale: d={args.scale_d}, 8 heads, top-{args.k}, "
          f"tol={args.tol:g}, Krylov cap {args.scale_krylov_dim}, random normal input")
    summary = {}
    for kind in args.blocks:
      if kind == "trained":
        params, loss = trained_block(args.scale_d, 8, args.train_steps)
        print(f"  trained block: {args.train_steps} AdamW steps, final loss {loss:.3f}",
              flush=True)
      else:
        params = None
      best = None
      for T in args.scale_t:
        r = scale(params, args.scale_d, T, args.k, args.tol, args.scale_krylov_dim)
        print(_row(f"  {kind:>7} T={T:>5} T·d={T * args.scale_d:>9,}", r), flush=True)
        total = r["compile_s"] + r["run_s"]
        if r["converged"] and total <= args.budget:
          best = T * args.scale_d
        if total > args.give_up:
          break
      summary[kind] = best
    for kind, best in summary.items():
      print(f"  {kind}: largest converged T·d within {args.budget:.0f} s: "
            + (f"{best:,}" if best else "none"))

  if args.e2e:
    print(f"\n3. whole-model Jacobian (embedding output -> final residual), top-{args.k}, "
          f"tol={args.tol:g}")
    for name in args.e2e:
      if name == "small":
        from experiments.models import RECIPES, base_model, val_tokens

        params, cfg = base_model("small", 0, root=args.runs)
        T = RECIPES["small"].seq_len
        tokens_T = jnp.asarray(val_tokens(T, 1, 0)[0])
        label = f"small (trained, d={cfg.d_model}, L={cfg.n_layers}, T={T})"
      else:
        cfg = transformer.preset("gpt2-small", n_layers=args.gpt2_layers)
        T = args.gpt2_t
        params = transformer.init(cfg, jax.random.key(0))
        tokens_T = jax.random.randint(jax.random.key(1), (T,), 0, cfg.vocab_size)
        label = f"gpt2-small width (init, d={cfg.d_model}, L={cfg.n_layers}, T={T})"
      r = end_to_end(params, cfg, tokens_T, args.k, args.tol, args.e2e_krylov_dim)
      print(f"  {label}: T·d={T * cfg.d_model:,}", flush=True)
      print(_row("   ", r), flush=True)

  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"\nload average {load:.2f} at the end")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
