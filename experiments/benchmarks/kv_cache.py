"""Decode speed and cache bytes: the full K/V cache against the latent (low-rank) cache.

    python -m experiments.benchmarks.kv_cache [--lengths 2048 8192] [--batch 4] [--rounds 5]
                                              [--d-model 128] [--layers 4] [--heads 4]

A Llama-style model (RoPE, so any context length; random weights: speed does not depend on
them) decodes one token per sequence against a cache already holding `T − 1` tokens. Four
caches are timed in interleaved rounds (`experiments.lab.timing`): the model's own
cache in float16 and in float32 (`transformer.decode`; float16 arithmetic is emulated and slow
on CPUs, so there the float32 cache is the fair speed baseline), and `transformer.latent`
caches at 8× (16-bit coefficients at rank Dh/8) and 32× (4-bit coefficients at rank Dh/8,
packed two per byte) — both measured ratios against a 16-bit K/V cache. It prints per `T` and
cache: the cache's bytes (from its arrays), decode tokens per second (batch / median step
time) and the speed-up over the float16 cache. Decoding a token reads the whole cache, so at
long `T` the step time follows the bytes read; the latent cache's extra work (projecting the
query into the basis, decoding packed codes) is per token, not per cached token.
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
import numpy as np

import transformer
from experiments.lab import timing
from transformer import decode, latent


def model(d_model: int, layers: int, heads: int, max_len: int) -> transformer.Config:
  """The benchmarked Llama-style config (RoPE, no GQA)."""
  return transformer.llama_config(vocab_size=256, d_model=d_model, n_layers=layers,
                                  n_heads=heads, n_kv_heads=heads, d_ff=4 * d_model,
                                  max_len=max_len)


def filled(cache, T: int):
  """`cache` marked as holding `T − 1` tokens (their content does not change the speed)."""
  S = cache.valid.shape[1]
  valid = jnp.broadcast_to(jnp.arange(S) < T - 1, cache.valid.shape)
  return cache._replace(valid=valid, index=jnp.asarray(T - 1, jnp.int32))


def latent_compression(params, cfg: transformer.Config, rank: int, bits: int):
  """Data-free bases at `rank` (`latent.weight_compression`), with unit steps for int bits."""
  comp = latent.weight_compression(params, cfg, rank, bits=16 if bits < 16 else bits)
  if bits >= 16:
    return comp
  width = cfg.n_kv_heads * rank
  steps = tuple(jnp.full((width,), 0.1, jnp.float32) for _ in range(cfg.n_layers))
  return latent.make_compression(comp.key_basis, comp.value_basis, comp.key_ranks,
                                 comp.value_ranks, bits, steps, steps)


def measure(lengths=(2048, 8192), batch: int = 4, rounds: int = 5, d_model: int = 128,
            layers: int = 4, heads: int = 4) -> dict:
  """`{T: {cache: {"bytes", "tokens_per_s", "ratio_vs_16bit"}}}` (see the module docstring).

  Example:
    >>> from experiments.benchmarks.kv_cache import measure
    >>> out = measure(lengths=(64,), batch=1, rounds=1, d_model=32, layers=1, heads=2)
    >>> round(out[64]["latent-32x"]["ratio_vs_16bit"])
    32
  """
  cfg = model(d_model, layers, heads, max(lengths))
  params = transformer.init(cfg, jax.random.key(0))
  rank = cfg.d_head // 8 if cfg.d_head >= 8 else 1
  comps = {"latent-8x": latent_compression(params, cfg, rank, 16),
           "latent-32x": latent_compression(params, cfg, rank, 4)}
  token_B = jnp.zeros((batch,), jnp.int32)
  full_step = jax.jit(functools.partial(decode.decode_step, cfg=cfg))
  latent_step = jax.jit(lambda p, t, comp, cache: latent.forward(p, cfg, t[:, None], comp,
                                                                 cache=cache))
  out = {}
  for T in lengths:
    caches = {"full-fp16": filled(decode.init_cache(cfg, batch, T, jnp.float16), T),
              "full-fp32": filled(decode.init_cache(cfg, batch, T, jnp.float32), T)}
    caches.update({n: filled(latent.init_cache(cfg, c, batch, T), T) for n, c in comps.items()})
    fns = {n: lambda c=caches[n]: full_step(params, token_B=token_B, cache=c)
           for n in ("full-fp16", "full-fp32")}
    for n, comp in comps.items():
      fns[n] = lambda c=caches[n], comp=comp: latent_step(params, token_B, comp, c)
    times = timing.interleaved(fns, rounds)
    full_bytes = latent.full_cache_bytes(cfg, batch, T)
    out[T] = {}
    for n, cache in caches.items():
      nbytes = (int(cache.k.nbytes + cache.v.nbytes) if n.startswith("full")
                else latent.cache_bytes(cache))
      out[T][n] = {"bytes": nbytes, "ratio_vs_16bit": full_bytes / nbytes,
                   "tokens_per_s": batch / times[n], "step_ms": 1e3 * times[n]}
    for n in out[T]:
      out[T][n]["speedup"] = out[T][n]["tokens_per_s"] / out[T]["full-fp16"]["tokens_per_s"]
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.kv_cache",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--layers", type=int, default=4)
  p.add_argument("--heads", type=int, default=4)
  args = p.parse_args(argv)
  out = measure(tuple(args.lengths), args.batch, args.rounds, args.d_model, args.layers,
                args.heads)
  print(f"device {jax.devices()[0].platform}; d_model {args.d_model}, L {args.layers}, "
        f"H {args.heads}, batch {args.batch}")
  print(f"{'T':>6} {'cache':>11} {'MiB':>8} {'ratio':>6} {'tok/s':>9} {'ms/step':>8} "
        f"{'speed-up':>8}")
  for T, per in out.items():
    for n, m in per.items():
      print(f"{T:>6} {n:>11} {m['bytes'] / 2**20:>8.2f} {m['ratio_vs_16bit']:>6.1f} "
            f"{m['tokens_per_s']:>9.1f} {m['step_ms']:>8.2f} {m['speedup']:>8.2f}")
  print(np.round([[m["speedup"] for m in per.values()] for per in out.values()], 3).tolist())
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
