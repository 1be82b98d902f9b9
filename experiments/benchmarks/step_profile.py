"""Where a claim's train step spends its time: XLA's own per-op timings, grouped by model part.

    python -m experiments.benchmarks.step_profile [--size micro-20] [--steps 40] [--top 12]

The sweep benchmark (`experiments.benchmarks.sweep`) says how fast the claims train; this says
why. It compiles the step every claim trains through (`experiments.train.step.train_step`,
AdamW on the budget schedule, `steps` of them in one `lax.fori_loop`, as
`experiments.train.sweep.train_many` runs one run), runs it once to warm up, then once under
`jax.profiler`, and reads the trace: every event named after an instruction of the compiled
program is that instruction's time. Each instruction is put in the part of the model its
`op_name` names (attention, feed-forward, norms, embedding and logits, the optimizer, other)
and its time divided by the steps, so the table reads "ms of op time per step" (on a multi-core
CPU, ops of one step may overlap, so the sum can exceed the step's wall time, which is shown
beside it). Then the `--top` slowest instructions with their shapes. The last line is JSON.

On 2 shared CPU cores, `micro-20`: about a minute, most of it compiling.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile
import time

import jax
import jax.numpy as jnp

# Model parts, tried in order against an instruction's op_name (the first match wins).
PARTS = (("attention", ("/attn/",)),
         ("feed-forward", ("/ffn/",)),
         ("norms", ("norm",)),
         ("embedding and logits", ("embed", "logits", "jvp()/", "transpose(jvp())/")),
         ("optimizer", ("optax", "adam", "scale_by", "clip", "apply_updates", "tree_")))
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ([\w\-]+)\((.*)$", re.M)
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def part_of(op_name: str) -> str:
  """The model part an instruction belongs to, from its `op_name` metadata.

  Example:
    >>> part_of("jit(run)/while/body/jvp(Transformer)/closed_call/blocks/blocks/attn/exp")
    'attention'
    >>> part_of("jit(run)/while/body/transpose(jvp(Transformer))/blocks/ffn/dot_general")
    'feed-forward'
    >>> part_of("jit(run)/while/body/sqrt")
    'other'
  """
  for part, keys in PARTS:
    if any(k in op_name for k in keys):
      return part
  return "other"


def instructions(hlo_text: str) -> dict[str, dict]:
  """`{name: {"shape", "opcode", "op_name"}}` for every instruction of a compiled HLO text.

  Example:
    >>> text = ('  %dot.3 = f32[8,4]{1,0} dot(%a, %b), lhs_contracting_dims={1}, '
    ...         'metadata={op_name="jit(f)/attn/dot_general"}')
    >>> instructions(text)["dot.3"]
    {'shape': 'f32[8,4]{1,0}', 'opcode': 'dot', 'op_name': 'jit(f)/attn/dot_general'}
  """
  out = {}
  for m in _INSTRUCTION.finditer(hlo_text):
    meta = _OP_NAME.search(m.group(4))
    out.setdefault(m.group(1), {"shape": m.group(2), "opcode": m.group(3),
                                "op_name": meta.group(1) if meta else ""})
  return out


def op_times(events, names) -> dict[str, float]:
  """Total microseconds per instruction: the complete (`"ph": "X"`) trace events whose name is
  one of `names` (an instruction of the profiled program).

  Example:
    >>> ev = [{"ph": "X", "name": "dot.3", "dur": 5.0}, {"ph": "X", "name": "dot.3", "dur": 7.0},
    ...       {"ph": "X", "name": "$python.py:1 f", "dur": 99.0}, {"ph": "i", "name": "dot.3"}]
    >>> op_times(ev, {"dot.3"})
    {'dot.3': 12.0}
  """
  total: dict[str, float] = collections.defaultdict(float)
  for e in events:
    if e.get("ph") == "X" and e.get("name") in names:
      total[e["name"]] += float(e.get("dur", 0.0))
  return dict(total)


def by_part(times_us: dict[str, float], table: dict[str, dict], steps: int) -> dict[str, float]:
  """Milliseconds per step in each model part (`PARTS`, then "other"), largest first.

  Example:
    >>> table = {"a": {"op_name": "x/attn/dot"}, "b": {"op_name": "x/ffn/dot"},
    ...          "c": {"op_name": "x/attn/exp"}}
    >>> by_part({"a": 3000.0, "b": 1000.0, "c": 1000.0}, table, steps=2)
    {'attention': 2.0, 'feed-forward': 0.5}
  """
  parts: dict[str, float] = collections.Counter()
  for name, us in times_us.items():
    parts[part_of(table[name]["op_name"])] += us / steps / 1e3
  return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def _program(size: str, steps: int):
  """The jitted `steps`-step AdamW loop of one run at `size`, its state and a batch."""
  import optax

  import transformer
  from experiments import data as data_lib
  from experiments.models import recipes
  from experiments.train.arms import adamw_arm, on_budget
  from experiments.train.step import TrainState, train_step
  from experiments.train.sweep import UNROLL_LAYERS

  rec = recipes.RECIPES[size]
  cfg = rec.cfg
  model = transformer.Transformer(cfg, scan_unroll=cfg.n_layers if cfg.n_layers <= UNROLL_LAYERS
                                  else 1)
  tx = optax.inject_hyperparams(on_budget(adamw_arm(), 1000))(learning_rate=3e-3)
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  state = TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
  batch = data_lib.source("stdlib", rec.seq_len).batch(0, 1, rec.batch_size, "train")
  tokens, weights = jnp.asarray(batch.tokens), jnp.asarray(batch.weights)

  @jax.jit
  def run(state, tokens, weights):
    def body(_, carry):
      state, total = carry
      state, metrics = train_step(state, tokens, weights, model=model, tx=tx)
      return state, total + metrics["loss"]
    return jax.lax.fori_loop(0, steps, body, (state, jnp.zeros((), jnp.float32)))

  return run, (state, tokens, weights)


def profile(size: str, steps: int) -> dict:
  """`{"parts": ms per step by part, "ops": [(name, ms per step, shape, op_name)], "wall_ms"}`."""
  run, args = _program(size, steps)
  compiled = run.lower(*args).compile()
  table = instructions(compiled.as_text())
  jax.block_until_ready(compiled(*args))
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  wall_ms = (time.perf_counter() - start) / steps * 1e3
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    try:
      jax.block_until_ready(compiled(*args))
    finally:
      jax.profiler.stop_trace()
    found = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)
    if not found:
      raise RuntimeError(f"step_profile: jax.profiler wrote no trace under {trace_dir}")
    with gzip.open(found[0]) as f:
      trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  times = op_times(events, set(table))
  if not times:
    raise RuntimeError("step_profile: the trace names none of the program's instructions "
                       f"(jax {jax.__version__}); XLA's trace format may have changed")
  ops = sorted(((n, us / steps / 1e3, table[n]["shape"], table[n]["op_name"])
                for n, us in times.items()), key=lambda o: -o[1])
  return {"parts": by_part(times, table, steps), "ops": ops, "wall_ms": wall_ms}


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--size", default="micro-20", help="a trained regime's model, e.g. mini-20")
  p.add_argument("--steps", type=int, default=40, help="steps in the profiled call")
  p.add_argument("--top", type=int, default=12, help="slowest instructions listed")
  a = p.parse_args(argv)
  if a.steps < 1:
    p.error(f"--steps {a.steps}: must be at least 1")
  out = profile(a.size, a.steps)
  total = sum(out["parts"].values())
  print(f"{a.size}: one step {out['wall_ms']:.2f} ms wall; {total:.2f} ms of op time "
        f"({jax.device_count()} {jax.default_backend()} device(s), {a.steps} steps profiled)")
  for part, ms in out["parts"].items():
    print(f"  {part:<22} {ms:7.2f} ms  {ms / total:6.1%}")
  print(f"the {a.top} slowest instructions (ms per step, shape, op_name):")
  for name, ms, shape, op_name in out["ops"][:a.top]:
    print(f"  {ms:7.3f}  {name:<26} {shape:<24} {op_name[-70:]}")
  summary = {"size": a.size, "steps": a.steps, "wall_ms_per_step": round(out["wall_ms"], 3),
             "op_ms_per_step": {k: round(v, 3) for k, v in out["parts"].items()}}
  print(json.dumps(summary))
  return summary


if __name__ == "__main__":
  main()
