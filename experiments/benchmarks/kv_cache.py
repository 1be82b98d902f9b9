"""Decode memory and speed: the full K/V cache against latent (low-rank) caches, explained.

    python -m experiments.benchmarks.kv_cache [--quick] [--lengths 2048 8192] [--batch 4]
        [--rounds 7] [--rank-ratios 4 8] [--bits 16 4] [--d-model 128] [--layers 4] [--heads 4]

Runtime on 2 CPU cores: about 2 minutes at the defaults, under 60 s with `--quick`
(`T = 256, 1024`, batch 2, 3 rounds, one latent cache). It shows that the full cache's decode
time follows the bytes of the cache, at a measured share of the machine's read bandwidth, and
how much of a latent cache's smaller size turns into speed.

A Llama-style model (RoPE, so any context length; random weights: speed does not depend on
them) decodes one token per sequence against a cache already holding `T − 1` tokens, at `T`
in `--lengths`. The caches: the model's own (`transformer.decode`) in float32 and in float16
(the model computes in float32; a 16-bit cache is what the compression ratios are measured
against), and `transformer.latent` caches keeping `Dh / r` coefficients per head for each
`r` in `--rank-ratios` (data-free bases, `latent.weight_compression`), stored at each of
`--bits` (16: float16; 8, 4, 2: packed integer codes). Every step donates its cache and writes
the token in place, as `transformer.decode_step` does, and decodes at the same slot each time.
Per `T` and cache it reports:

* `B/tok`: bytes per cached token, `transformer.decode.bytes_per_token`: the bytes of every
  array of the cache pytree as allocated (keys, values or coefficients, validity flags, index)
  over `B·S`; `MiB`, the cache's size, the same bytes measured from the allocated arrays
  (on a backend that keeps device memory statistics, the rise of `bytes_in_use` when it was
  allocated); `ratio`, the float16 full cache's bytes over this one's, all arrays counted.
* `peak MiB`: the decode step's peak memory, from the compiled step's `memory_analysis()`:
  arguments + outputs + temporaries − the outputs that reuse donated arguments. CPU keeps no
  device memory statistics, and where a device does (`memory_stats()`) its
  `peak_bytes_in_use` is a high-water mark of the whole process that cannot be reset between
  contenders, so XLA's accounting is the one source on every backend; the output names it.
* `ms`, `tok/s`: median step time over interleaved rounds (`experiments.lab.timing`), and
  `batch / ms`; `× f16`, `× f32`: tokens/s over the float16 and float32 full caches'.
* `GB/s`: bytes read per step (the step's arguments: cache, weights and bases) over its time,
  the achieved bandwidth; `read`: the cache's bytes over the time of `read_bw`, a jitted sum
  of an array as large as the float32 cache, timed in the same rounds: the step's floor had it
  only to read its cache; `× floor`: step time over that floor.

The last paragraph printed explains the full cache's rate from these numbers (share of the
read bandwidth, the step's fixed cost and marginal bandwidth from the two lengths).
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp

import transformer
from experiments.lab import timing
from transformer import decode, latent

QUICK = dict(lengths=(256, 1024), batch=2, rounds=3, rank_ratios=(8,), bits=(4,))


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


def _full_step(params, token_B, cache, *, cfg):
  logits_BV, new = decode.decode_step(params, cfg, token_B, cache)
  return logits_BV, new._replace(index=cache.index)  # the next step decodes at the same slot


def _latent_step(params, token_B, comp, cache, *, cfg):
  logits_B1V, new = latent.forward(params, cfg, token_B[:, None], comp, cache=cache)
  return logits_B1V[:, 0], new._replace(index=cache.index)


def nbytes(tree) -> int:
  """Bytes of every array of `tree`."""
  return sum(int(x.nbytes) for x in jax.tree.leaves(tree))


def device_stats():
  """The default device's memory statistics, or None where the backend keeps none (CPU)."""
  stats = jax.devices()[0].memory_stats()
  return stats if stats and "bytes_in_use" in stats else None


def compiled_peak(compiled) -> int:
  """Peak bytes of a compiled step by XLA's own accounting: arguments + outputs + temporaries,
  less the outputs that reuse donated arguments."""
  m = compiled.memory_analysis()
  return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
             - m.alias_size_in_bytes)


class Stepper:
  """One contender: a compiled decode step and the state it threads (its donated cache)."""

  def __init__(self, step, params, token_B, cache, *extra):
    self.params, self.token_B, self.extra = params, token_B, extra
    stats = device_stats()
    before = stats["bytes_in_use"] if stats else None
    self.cache = jax.tree.map(jnp.copy, cache)  # this contender's own buffers, to donate
    self.measured = (device_stats()["bytes_in_use"] - before if stats else nbytes(self.cache))
    self.compiled = step.lower(params, token_B, *extra, self.cache).compile()
    self.read_bytes = int(self.compiled.memory_analysis().argument_size_in_bytes)
    self.peak = compiled_peak(self.compiled)

  def __call__(self):
    logits_BV, self.cache = self.compiled(self.params, self.token_B, *self.extra, self.cache)
    return logits_BV


def bandwidth_probe(n_bytes: int):
  """A jitted float32 sum over an array of `n_bytes`: the machine's read rate, timed as a
  contender."""
  x = jnp.ones((max(n_bytes // 4, 1),), jnp.float32)
  total = jax.jit(jnp.sum)
  return (lambda: total(x)), int(x.nbytes)


def measure(lengths=(2048, 8192), batch: int = 4, rounds: int = 7, rank_ratios=(4, 8),
            bits=(16, 4), d_model: int = 128, layers: int = 4, heads: int = 4) -> dict:
  """`{T: {cache: {...}}}`, per `T` also `"read_bw"` (see the module docstring).

  Example:
    >>> from experiments.benchmarks.kv_cache import measure
    >>> out = measure(lengths=(64,), batch=1, rounds=1, rank_ratios=(8,), bits=(4,),
    ...               d_model=32, layers=1, heads=2)
    >>> sorted(out[64]["caches"])
    ['full-f16', 'full-f32', 'latent-r2-4bit']
    >>> out[64]["caches"]["full-f16"]["bytes_per_token"]  # K, V: 2·2 heads·16·2 B; valid; index
    129.0625
  """
  cfg = model(d_model, layers, heads, max(lengths))
  params = transformer.init(cfg, jax.random.key(0))
  comps = {f"latent-r{cfg.d_head // r}-{b}bit": latent_compression(params, cfg,
                                                                    max(cfg.d_head // r, 1), b)
           for r in rank_ratios for b in bits}
  token_B = jnp.zeros((batch,), jnp.int32)
  full_step = jax.jit(functools.partial(_full_step, cfg=cfg), donate_argnames="cache")
  latent_step = jax.jit(functools.partial(_latent_step, cfg=cfg), donate_argnames="cache")
  out = {}
  for T in lengths:
    steppers = {f"full-{n}": Stepper(full_step, params, token_B,
                                     filled(decode.init_cache(cfg, batch, T, dt), T))
                for n, dt in (("f32", jnp.float32), ("f16", jnp.float16))}
    for n, comp in comps.items():
      steppers[n] = Stepper(latent_step, params, token_B,
                            filled(latent.init_cache(cfg, comp, batch, T), T), comp)
    probe, probe_bytes = bandwidth_probe(nbytes(steppers["full-f32"].cache))
    times = timing.interleaved({**steppers, "read_bw": probe}, rounds)
    read_bw = probe_bytes / times["read_bw"]
    full16 = nbytes(steppers["full-f16"].cache)
    per = {}
    for n, s in steppers.items():
      cache_bytes = nbytes(s.cache)
      floor = cache_bytes / read_bw
      per[n] = {"bytes": cache_bytes, "bytes_per_token": decode.bytes_per_token(s.cache),
                "measured_bytes": s.measured, "ratio_vs_16bit": full16 / cache_bytes,
                "peak_bytes": s.peak,
                "read_bytes": s.read_bytes, "step_ms": 1e3 * times[n],
                "tokens_per_s": batch / times[n], "achieved_GBps": s.read_bytes / times[n] / 1e9,
                "floor_ms": 1e3 * floor, "x_floor": times[n] / floor}
    for n in per:
      per[n]["speedup_vs_f16"] = per[n]["tokens_per_s"] / per["full-f16"]["tokens_per_s"]
      per[n]["speedup_vs_f32"] = per[n]["tokens_per_s"] / per["full-f32"]["tokens_per_s"]
    out[T] = {"caches": per, "read_GBps": read_bw / 1e9, "probe_bytes": probe_bytes}
  return out


def table(out: dict) -> str:
  """The compact table of `measure`'s numbers."""
  head = (f"{'T':>5} {'cache':>15} {'B/tok':>7} {'MiB':>7} {'ratio':>5} {'peak MiB':>8} "
          f"{'ms':>7} {'tok/s':>8} {'× f16':>5} {'× f32':>5} {'GB/s':>5} {'× floor':>7}")
  rows = [head]
  for T, res in out.items():
    for n, m in res["caches"].items():
      mib = m["measured_bytes"] / 2**20
      rows.append(f"{T:>5} {n:>15} {m['bytes_per_token']:>7.1f} {mib:>7.2f} "
                  f"{m['ratio_vs_16bit']:>5.1f} {m['peak_bytes'] / 2**20:>8.1f} "
                  f"{m['step_ms']:>7.2f} {m['tokens_per_s']:>8.1f} {m['speedup_vs_f16']:>5.2f} "
                  f"{m['speedup_vs_f32']:>5.2f} {m['achieved_GBps']:>5.2f} {m['x_floor']:>7.1f}")
    rows.append(f"{T:>5} {'read_bw':>15}  jitted sum of {res['probe_bytes'] / 2**20:.0f} MiB: "
                f"{res['read_GBps']:.2f} GB/s")
  return "\n".join(rows)


def explain(out: dict) -> str:
  """One paragraph on the full cache's decode rate, computed from `measure`'s numbers."""
  Ts = sorted(out)
  parts = []
  for T in Ts:
    f32 = out[T]["caches"]["full-f32"]
    parts.append(f"at T = {T} the float32 full cache ({f32['bytes'] / 2**20:.0f} MiB, "
                 f"{f32['read_bytes'] / 2**20:.0f} MiB read per step with the weights) decodes in "
                 f"{f32['step_ms']:.1f} ms, {f32['achieved_GBps']:.2f} GB/s, "
                 f"{f32['achieved_GBps'] / out[T]['read_GBps']:.0%} of the "
                 f"{out[T]['read_GBps']:.2f} GB/s a jitted sum reads here "
                 f"({f32['x_floor']:.1f}× the time of one read of the cache)")
  text = "Full cache: " + "; ".join(parts) + "."
  if len(Ts) >= 2:
    a, b = out[Ts[0]]["caches"]["full-f32"], out[Ts[-1]]["caches"]["full-f32"]
    slope = (b["step_ms"] - a["step_ms"]) / (b["read_bytes"] - a["read_bytes"])  # ms per byte
    fixed = a["step_ms"] - slope * a["read_bytes"]
    if slope > 0:
      text += (f" From T = {Ts[0]} to {Ts[-1]} each extra MiB read costs {slope * 2**20:.2f} ms "
               f"({1e-6 / slope:.2f} GB/s marginal), "
               + (f"over a fixed {fixed:.1f} ms per step (weights, dispatch)" if fixed > 0.05
                  else "with no measurable fixed cost per step")
               + ": the step time follows the bytes of the cache.")
    else:
      text += (f" The step did not slow from T = {Ts[0]} to {Ts[-1]}: at these sizes the "
               "machine's noise exceeds the cost of the cache.")
  text += (" Beyond one read of its bytes, a step pays for XLA:CPU copying each layer's keys and "
           "values out of the stacked cache that the layer scan carries, before the score and "
           "mixing einsums (one more read and a write of every byte; `transformer.model."
           "stacked_kv`).")
  last = out[Ts[-1]]["caches"]
  best = max((n for n in last if n.startswith("latent")), key=lambda n: last[n]["speedup_vs_f16"],
             default=None)
  if best is not None:
    m = last[best]
    text += (f" At T = {Ts[-1]}, {best} holds {m['ratio_vs_16bit']:.1f}× fewer bytes than the "
             f"float16 cache and decodes {m['speedup_vs_f16']:.2f}× as fast "
             f"({m['speedup_vs_f32']:.2f}× the float32 cache)")
    text += (": the speed-up stays below the ratio by the work per decoded token (weights, "
             "projecting the query, decoding codes), which does not shrink with the cache."
             if m["speedup_vs_f16"] < m["ratio_vs_16bit"] else ".")
  return text


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.benchmarks.kv_cache",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true",
                 help=f"smoke test, < 60 s: {QUICK} (explicit flags still win)")
  p.add_argument("--lengths", type=int, nargs="+")
  p.add_argument("--batch", type=int)
  p.add_argument("--rounds", type=int)
  p.add_argument("--rank-ratios", type=int, nargs="+", help="keep Dh / r coefficients per head")
  p.add_argument("--bits", type=int, nargs="+", choices=(16, 8, 4, 2))
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--layers", type=int, default=4)
  p.add_argument("--heads", type=int, default=4)
  args = p.parse_args(argv)
  sizes = dict(lengths=(2048, 8192), batch=4, rounds=7, rank_ratios=(4, 8), bits=(16, 4))
  if args.quick:
    sizes.update(QUICK)
  sizes.update({k: tuple(v) if isinstance(v, list) else v for k in sizes
                if (v := getattr(args, k)) is not None})
  out = measure(**sizes, d_model=args.d_model, layers=args.layers, heads=args.heads)
  print(f"device {jax.devices()[0].platform}; d_model {args.d_model}, L {args.layers}, "
        f"H {args.heads}, batch {sizes['batch']}, {sizes['rounds']} rounds (medians); peak "
        "memory from the compiled step's memory_analysis(); cache MiB measured "
        + ("as the rise of device bytes_in_use" if device_stats() else "from the arrays"))
  print(table(out))
  print(explain(out))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
