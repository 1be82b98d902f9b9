"""The gpt2-small train step on whatever backend JAX finds: MFU in bfloat16, tokens/s, memory.

    python -m experiments.benchmarks.accelerator [--small] [--peak-tflops X] [--rounds 5]

On a GPU/TPU it compiles `experiments.train.build` for `gpt2-small` (124M parameters,
`T = 1024`, `B = 8`) with bfloat16 matmuls (float32 parameters and optimizer state) and AdamW,
and reports per step: median time, tokens/s, model-FLOPs utilisation, the device's peak memory
(`device.memory_stats()["peak_bytes_in_use"]`, `null` where the backend keeps none), and
the time of one `optim.muon` update of the model's hidden matrices against
`optax.contrib.muon` on the same matrices (both jitted, timed in interleaved rounds). On CPU
(or with `--small`) the same program runs at `d = 128, L = 2, T = 64, B = 4`, vocabulary 512,
in about a minute on 2 CPU cores, so CI keeps this script working for the day an accelerator is
at hand.

Model FLOPs are counted from the config, not from the profiler
(`experiments.benchmarks.train_step.model_flops_per_step`): per token, ``6 N_matmul`` for the
weights used as `x @ W` (output matrix included, embedding lookup excluded) plus
``12 L T H d_h`` for `Q Kᵀ` and `A V` (the full square, forward and backward = 3 × forward).
MFU = that count / step time / the device's peak dense bfloat16 FLOP/s, from `PEAK_TFLOPS`
by device kind (vendor datasheets, dense, no sparsity); on CPU, or an unknown kind, the peak is
estimated as the measured rate of a jitted float32 `(1024, 1024)` matmul in this run (so CPU
"MFU" is a share of what XLA's matmul reaches here), unless `--peak-tflops` gives it.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np
import optax

import optim
import transformer
from experiments import train
from experiments.benchmarks.train_step import matmul_fn, model_flops_per_step
from experiments.lab.timing import interleaved
from experiments.train import sharding

# Peak dense bfloat16 TFLOP/s per device, matched by substring of `device.device_kind`
# (first match wins, so the more specific names come first).
PEAK_TFLOPS = {
    "H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "H800": 989.0, "GH200": 989.0,
    "B200": 2250.0, "A100": 312.0, "A10G": 70.0, "L40S": 362.0, "L4": 121.0, "V100": 125.0,
    "TPU v6": 918.0, "TPU v5p": 459.0, "TPU v5 lite": 197.0, "TPU v5e": 197.0,
    "TPU v4": 275.0, "TPU v3": 123.0,
}

SMALL = dict(d_model=128, n_layers=2, n_heads=4, vocab_size=512, max_len=64)


def peak_flops(device, measured_matmul: float | None, override_tflops: float | None):
  """`(peak FLOP/s, where it came from)` for `device`."""
  if override_tflops:
    return override_tflops * 1e12, "--peak-tflops"
  for name, tflops in PEAK_TFLOPS.items():
    if name in device.device_kind:
      return tflops * 1e12, f"datasheet ({name}, dense bf16)"
  return measured_matmul, "estimated: measured float32 (1024, 1024) matmul rate"


def _hidden_dims(params):
  roles = optim.labels(params)
  return jax.tree.map(lambda r, p: optax.contrib.MuonDimensionNumbers(p.ndim - 2, p.ndim - 1)
                      if r == "hidden" else None, roles, params)


def muon_update_times(params, rounds: int) -> dict:
  """Median seconds of one jitted Muon update of the hidden matrices: ours vs optax's."""
  hidden = jax.tree.map(lambda r: r == "hidden", optim.labels(params))
  grads = jax.tree.map(lambda p: p * 0.5 + 0.01, params)
  ours = optim.muon(0.02, adam_learning_rate=3e-4, adam_b2=0.95, adam_nesterov=False)
  ref = optax.contrib.muon(0.02, muon_weight_dimension_numbers=_hidden_dims(params))
  fns = {}
  for name, tx in (("optim.muon", ours), ("optax.contrib.muon", ref)):
    state = jax.jit(tx.init)(params)
    update = jax.jit(tx.update)
    fns[name] = (lambda u=update, s=state: u(grads, s, params)[0])
  times = interleaved(fns, rounds)
  times["hidden_matrices"] = int(sum(jax.tree.leaves(hidden)))
  return times


def run(small: bool, rounds: int = 5, peak_tflops: float | None = None) -> dict:
  device = jax.devices()[0]
  small = small or device.platform == "cpu"
  cfg = transformer.preset("gpt2-small", dtype="bfloat16", **(SMALL if small else {}))
  batch, seq_len = (4, 64) if small else (8, 1024)
  tc = train.TrainConfig(steps=1000, warmup_steps=10)
  trainer = train.build(cfg, train.optimizer(tc), sharding.make_mesh({"data": 1}),
                        train.schedule(tc))
  rng = np.random.default_rng(0)
  tokens = jax.numpy.asarray(rng.integers(0, cfg.vocab_size, (batch, seq_len + 1)), "int32")
  weights = jax.numpy.ones((batch, seq_len), "float32")
  box = [trainer.init(jax.random.key(0))]
  start = time.perf_counter()
  compiled = trainer.step.lower(box[0], tokens, weights).compile()
  compile_s = time.perf_counter() - start

  def one_step():
    box[0], metrics = compiled(box[0], tokens, weights)
    return metrics["loss"]

  matmul, matmul_flops = matmul_fn()
  times = interleaved({"step": one_step, "matmul": matmul}, rounds)
  flops = model_flops_per_step(cfg, batch, seq_len)
  peak, peak_source = peak_flops(device, matmul_flops / times["matmul"], peak_tflops)
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  muon = muon_update_times(box[0].params, rounds)
  return {
      "backend": device.platform, "device_kind": device.device_kind, "small": small,
      "config": {"d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                 "vocab_size": cfg.vocab_size, "seq_len": seq_len, "batch": batch,
                 "dtype": cfg.dtype, "param_dtype": cfg.param_dtype},
      "compile_s": round(compile_s, 2),
      "step_s": times["step"],
      "tokens_per_s": batch * seq_len / times["step"],
      "model_flops_per_step": flops,
      "peak_flops": peak, "peak_source": peak_source,
      "mfu": flops / times["step"] / peak,
      "peak_memory_bytes": (stats or {}).get("peak_bytes_in_use"),
      "muon_update_s": muon["optim.muon"],
      "optax_contrib_muon_update_s": muon["optax.contrib.muon"],
      "muon_vs_optax": muon["optim.muon"] / muon["optax.contrib.muon"],
      "muon_hidden_matrices": muon["hidden_matrices"],
  }


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--small", action="store_true", help="small shapes (automatic on CPU)")
  ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
  ap.add_argument("--peak-tflops", type=float, default=None,
                  help="peak dense bf16 TFLOP/s of the device (default: PEAK_TFLOPS, or on "
                       "CPU the measured matmul rate)")
  args = ap.parse_args(argv)
  r = run(args.small, args.rounds, args.peak_tflops)
  mem = r["peak_memory_bytes"]
  print(f"{r['backend']} ({r['device_kind']}), gpt2-small{' (small shapes)' if r['small'] else ''}"
        f", bf16 compute: step {r['step_s'] * 1e3:.2f} ms, {r['tokens_per_s']:,.0f} tokens/s, "
        f"MFU {r['mfu']:.1%} of {r['peak_flops'] / 1e12:.3g} TFLOP/s ({r['peak_source']}), "
        f"peak memory {'n/a' if mem is None else f'{mem / 2**30:.2f} GiB'}")
  print(f"Muon update of {r['muon_hidden_matrices']} hidden matrices: optim.muon "
        f"{r['muon_update_s'] * 1e3:.2f} ms, optax.contrib.muon "
        f"{r['optax_contrib_muon_update_s'] * 1e3:.2f} ms (ratio {r['muon_vs_optax']:.2f})")
  print(json.dumps(r))
  return 0


if __name__ == "__main__":
  sys.exit(main())
