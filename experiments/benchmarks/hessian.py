"""Top Hessian eigenvalue of the `small` shared model on one batch, matrix-free, converged.

    python -m experiments.benchmarks.hessian [--batch-size 16] [--seq-len 128] [--k 1]
        [--tol 1e-4] [--krylov-dim 160] [--seed 0] [--runs runs] [--linearize]
        [--slq-probes 0] [--slq-krylov-dim 30] [--check-dense]

The model is the trained `small` shared model (d 128, L 4, H 4, 0.86M parameters; AdamW,
400 steps on the stdlib corpus), read from `experiments.models.base_model("small",
seed)`: cached under `runs/cache/` after the first call, which trains it (about 5 minutes on 2
idle cores, over 20 on busy ones). The batch is `--batch-size` stdlib validation windows of
`--seq-len + 1` tokens; the loss is their mean next-token cross-entropy, as in training.

It prints the compile and run seconds of `analysis.hessian_top_eigenvalues` (symmetric Lanczos
on forward-over-reverse Hessian-vector products, grown until the bound of each value is at
most `tol · |λ_1|`), the Krylov size it needed, the values with their bounds, the time of one
gradient and one Hessian-vector product, and the machine's load average (the machines are
shared: read the times with it). Measured on 2 CPU cores shared with other jobs (load average
11–13, 2026-12-01), defaults (16 × 128 tokens, top-1, `tol = 1e-4`): compile 39–47 s, run
42–55 s, Krylov size 12, `λ_1 = 72.940 ± 0.005`; one gradient 1.0–1.7 s, one Hessian-vector
product 3.0–3.7 s (three runs). `--slq-probes P` adds a stochastic-Lanczos-quadrature density
(`analysis.hessian_spectral_density`); `--check-dense` adds the top-5 of a one-layer model
with 808 parameters against its dense Hessian (`jax.hessian`, `numpy.linalg.eigvalsh`).
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments.lab import timing


def next_token_loss(model: transformer.Transformer):
  """`loss(params, tokens_BT1)`: the training loss (`experiments.train.loss_fn`), all targets."""
  from experiments.train import loss_fn

  def loss(params, tokens_BT1):
    weights_BT = jnp.ones(tokens_BT1[:, 1:].shape, jnp.float32)
    return loss_fn(params, model, tokens_BT1, weights_BT)

  return loss


def _load(seed: int, runs: str, batch_size: int, seq_len: int):
  from experiments.models import base_model, val_tokens

  params, cfg = base_model("small", seed, root=runs)
  tokens = jnp.asarray(val_tokens(seq_len + 1, batch_size, seed))
  return params, cfg, tokens


def top_eigenvalues(params, cfg, tokens, *, k: int, tol: float, krylov_dim: int | None,
                    linearize: bool) -> dict:
  """Compile and run seconds of the converged top-`k`, and what it found."""
  loss = next_token_loss(transformer.Transformer(cfg))
  fn = jax.jit(functools.partial(analysis.hessian_top_eigenvalues, loss, k=k, tol=tol,
                                 krylov_dim=krylov_dim, linearize=linearize))
  start = time.perf_counter()
  compiled = fn.lower(params, tokens).compile()
  compile_s = time.perf_counter() - start
  run_s, out = timing.timed(lambda: compiled(params, tokens))
  theta, merge, _ = analysis.split_params(params)
  grad = jax.jit(jax.grad(lambda t: loss(merge(t), tokens)))
  hvp = jax.jit(lambda v: analysis.hessian_operator(loss, params, tokens,
                                                    linearize=False)[0](v))
  v = jax.random.normal(jax.random.key(1), theta.shape)
  grad_s = timing.median_seconds(lambda: grad(theta), 3)
  hvp_s = timing.median_seconds(lambda: hvp(v), 3)
  return {"n_params": int(theta.size), "compile_s": compile_s, "run_s": run_s,
          "krylov_dim": int(out.krylov_dim), "values": np.asarray(out.values),
          "bounds": np.asarray(out.bounds), "converged": np.asarray(out.converged),
          "grad_s": grad_s, "hvp_s": hvp_s}


def slq(params, cfg, tokens, *, probes: int, krylov_dim: int) -> dict:
  """Seconds and summary of one stochastic-Lanczos-quadrature density."""
  loss = next_token_loss(transformer.Transformer(cfg))
  fn = jax.jit(functools.partial(analysis.hessian_spectral_density, loss, num_probes=probes,
                                 krylov_dim=krylov_dim))
  seconds, out = timing.timed(lambda: fn(params, tokens))
  mean, err = analysis.spectral_moments(out, (1, 2))
  return {"seconds": seconds, "lambda_min": float(out.nodes.min()),
          "lambda_max": float(out.nodes.max()), "trace_over_n": float(mean[0]),
          "trace_over_n_err": float(err[0]), "second_moment": float(mean[1])}


def dense_check() -> float:
  """Largest relative error of the top-5 of an 808-parameter model against its dense Hessian."""
  cfg = transformer.preset("tiny", d_model=8, n_layers=1, n_heads=2, d_ff=16, vocab_size=16,
                           max_len=8, init_std=0.3)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 5), 0, cfg.vocab_size)
  loss = next_token_loss(transformer.Transformer(cfg))
  theta, merge, _ = analysis.split_params(params)
  H = np.asarray(jax.jit(jax.hessian(lambda t: loss(merge(t), tokens)))(theta), np.float64)
  lam = np.linalg.eigvalsh((H + H.T) / 2)[::-1][:5]
  top = jax.jit(lambda p, t: analysis.hessian_top_eigenvalues(loss, p, t, 5))(params, tokens)
  return float(np.max(np.abs(np.asarray(top.values) - lam) / np.abs(lam)))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m experiments.benchmarks.hessian",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--batch-size", type=int, default=16)
  parser.add_argument("--seq-len", type=int, default=128)
  parser.add_argument("--k", type=int, default=1)
  parser.add_argument("--tol", type=float, default=1e-4)
  parser.add_argument("--krylov-dim", type=int, default=None)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--runs", default="runs", help="the folder holding cache/")
  parser.add_argument("--linearize", action="store_true",
                      help="linearize the gradient once instead of in every product")
  parser.add_argument("--slq-probes", type=int, default=0)
  parser.add_argument("--slq-krylov-dim", type=int, default=30)
  parser.add_argument("--check-dense", action="store_true")
  args = parser.parse_args(argv)

  params, cfg, tokens = _load(args.seed, args.runs, args.batch_size, args.seq_len)
  print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} CPUs, {jax.devices()[0].platform})")
  r = top_eigenvalues(params, cfg, tokens, k=args.k, tol=args.tol, krylov_dim=args.krylov_dim,
                      linearize=args.linearize)
  print(f"small model: {r['n_params']:,} parameters, batch {args.batch_size} x {args.seq_len} "
        f"tokens, top-{args.k} at tol {args.tol:g} "
        f"({'one linearization' if args.linearize else 'jvp of grad per product'})")
  print(f"  compile {r['compile_s']:.1f} s, run {r['run_s']:.1f} s, Krylov size "
        f"{r['krylov_dim']}, converged {r['converged'].tolist()}")
  for i, (v, b) in enumerate(zip(r["values"], r["bounds"], strict=True)):
    print(f"  lambda_{i + 1} = {v:.6g} +- {b:.2g}")
  print(f"  one gradient {r['grad_s']:.2f} s, one Hessian-vector product {r['hvp_s']:.2f} s "
        f"(median of 3)")
  if args.slq_probes:
    s = slq(params, cfg, tokens, probes=args.slq_probes, krylov_dim=args.slq_krylov_dim)
    print(f"SLQ density: {args.slq_probes} probes x {args.slq_krylov_dim} steps in "
          f"{s['seconds']:.1f} s; nodes in [{s['lambda_min']:.4g}, {s['lambda_max']:.4g}], "
          f"tr(H)/n = {s['trace_over_n']:.4g} +- {s['trace_over_n_err']:.2g}")
  if args.check_dense:
    print(f"dense check (808 parameters, top-5): max relative error {dense_check():.2e}")
  print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
