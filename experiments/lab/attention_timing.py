"""Forward and backward time of one attention layer vs sequence length, per variant.

The measurement behind `python -m experiments.benchmarks.attention` (which prints it) and the
`sliding-window` claim (which reads its slopes and crossovers): for `T = min_t, 2·min_t, …
max_t`, each registry variant's forward and forward + backward, jitted, timed in interleaved
rounds (`experiments.lab.timing`), with the bytes of its score tensor and XLA's temporary
bytes of the compiled forward. `work` is the part no machine's load can move: XLA's own count
of a layer's FLOPs and temporary bytes at each `T`, which `sliding-window` reads as the exact
verification that a fixed window's cost grows linearly in `T`.
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


def work(name: str, ts, *, heads: int, d_head: int, **opts) -> dict:
  """XLA's count of one attention layer's forward + backward (gradients of `sum(out)` with
  respect to q, k, v; batch 1) at each length of `ts`: FLOPs and temporary bytes.

  `marginal_growth` is `max_i |m_i / m_0 − 1|` over the FLOPs per added token
  `m_i = (F(T_{i+1}) − F(T_i)) / (T_{i+1} − T_i)`: exactly 0 when the work is affine in `T`
  (linear scaling; a constant part is allowed), about 1 per doubling when it is quadratic.
  `memory_growth` is `max_T (M(T)/T) / (M(T_0)/T_0) − 1` of the temporary bytes `M`: at most 0
  when the memory per token never grows. Compiled only, never run: the numbers do not depend on
  the machine's load, but they are the compiler's count of the program it chose, which at toy
  sizes may differ by length (window 8 at T = 64 counts 11% more FLOPs per token than at 128;
  window 32 at T = 128 … 2048, 4 heads of 4, 8 or 16, counts them exactly alike).

  Example:
    >>> from experiments.lab.attention_timing import work
    >>> w = work("local", (64, 128, 256), heads=2, d_head=4, window=16, block_size=16)
    >>> w["marginal_growth"], w["memory_growth"] <= 0
    (0.0, True)
  """
  ts = tuple(ts)
  if len(ts) < 3 or list(ts) != sorted(set(ts)):
    raise ValueError(f"work: ts={ts!r} must be at least three increasing lengths (two "
                     "differences to compare). Fix: e.g. (256, 512, 1024, 2048).")
  attn = functools.partial(ATTENTION[name], scale=d_head**-0.5, **opts)
  grad = jax.jit(jax.grad(lambda q, k, v: attn(q, k, v, None)[0].sum(), argnums=(0, 1, 2)))
  flops, temp = [], []
  for T in ts:
    x = jax.ShapeDtypeStruct((1, T, heads, d_head), np.float32)
    compiled = grad.lower(x, x, x).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    flops.append(float(cost["flops"]))
    temp.append(int(compiled.memory_analysis().temp_size_in_bytes))
  f, t = np.asarray(flops), np.asarray(ts, np.float64)
  marginal = np.diff(f) / np.diff(t)
  per_token = np.asarray(temp) / t
  return {"T": list(ts), "flops": flops, "temp_bytes": temp,
          "marginal_growth": float(np.abs(marginal / marginal[0] - 1).max()),
          "memory_growth": float((per_token / per_token[0]).max() - 1)}


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


def _t(x) -> str:
  return "never on the grid" if x is None else f"{x:.0f}"


def figure(tm: dict, heads: int, d_head: int, window: int) -> dict:
  """`sliding-window`'s `timing.png`, declared as data: forward + backward time of one
  attention layer against T, log-log (`tm`: the claim's timing dict, softmax and local)."""
  ts = tm["T"]
  lines = [{"x": ts, "y": [x * 1e3 for x in tm[name]["bwd"]], "style": f"{marker}-",
            "label": f"{label}: log-log slope {tm[name]['slope_bwd']:.2f}"
            if tm[name]["slope_bwd"] is not None else label}
           for name, label, marker in (("softmax", "full causal softmax", "o"),
                                       ("local", f"sliding window (w = {window})", "s"))]
  cross = tm["local"]["crossover_bwd"]
  return {"name": "timing.png", "size": [6, 4], "panels": [{
      "lines": lines, "xbase": 2, "ylog_ticks": True, "xticks": ts,
      "xticklabels": [str(t) for t in ts],
      "vlines": [{"x": cross, "color": "grey", "style": ":", "label": f"crossover T = {cross:.0f}"}]
      if cross is not None and cross > ts[0] else [],
      "xlabel": "sequence length T (tokens)", "ylabel": "forward + backward time (ms)",
      "title": f"one attention layer ({heads} heads × {d_head}, blocks of 16, batch 1)\n"
               f"{jax.default_backend()}, shared machine: times are indicative", "legend": 8}]}


def timing_note(tm: dict | None, heads: int, d_head: int) -> str:
  """`sliding-window`'s line on the timing sweep (`tm`: its timing dict; None: no sweep)."""
  if tm is None:
    return ("No timing sweep in this run (a run at another length: the registered run times "
            "one attention layer once).")
  loc = tm["local"]
  return (f"One attention layer ({heads} heads × {d_head}, blocks of 16), T = {tm['T']}: "
          "fwd+bwd ms softmax " + "/".join(f"{x * 1e3:.2f}" for x in tm["softmax"]["bwd"])
          + ", local " + "/".join(f"{x * 1e3:.2f}" for x in loc["bwd"])
          + (f"; log-log slope softmax {tm['softmax']['slope_bwd']:.2f}, local "
             f"{loc['slope_bwd']:.2f}" if loc["slope_bwd"] is not None else "")
          + f"; crossover T (fwd+bwd) {_t(loc['crossover_bwd'])}, forward only "
          f"{_t(loc['crossover_fwd'])} (BigBird advises full attention below 1024 tokens); "
          f"{jax.default_backend()}, machine shared, so times are indicative.")


def work_note(cost: dict, heads: int, d_head: int) -> str:
  """`sliding-window`'s line on XLA's counts (`work` of local and full, its clause ①)."""
  ts = cost["local"]["T"]
  per = {a: "/".join(f"{f / t / 1e3:.1f}" for f, t in zip(c["flops"], ts, strict=True))
         for a, c in cost.items()}
  return (f"XLA's count of one attention layer ({heads} heads × {d_head}, batch 1, forward + "
          f"backward) at T = {ts}: kFLOPs per token local {per['local']}, full {per['full']}; "
          f"change of the FLOPs per added token local {cost['local']['marginal_growth']:.3g}, "
          f"full {cost['full']['marginal_growth']:.3g}; growth of temporary bytes per token "
          f"local {cost['local']['memory_growth']:+.3g}, "
          f"full {cost['full']['memory_growth']:+.3g}.")
