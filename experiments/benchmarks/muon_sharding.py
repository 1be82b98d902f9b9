"""Where Muon communicates under a mesh: collectives in the compiled HLO, per design.

    python -m experiments.benchmarks.muon_sharding [--mesh data=2,fsdp=4] [--d 256 --layers 8]

About half a minute on 2 CPU cores (8 simulated devices; on CPU this module asks for them
before JAX starts). It compiles one `optim.scale_by_muon` update of a GPT-shaped stack of
hidden matrices (`w_q, w_o: (L, d, d)`, `w_1: (L, d, 4d)`, `w_2: (L, 4d, d)`), with the
gradients, momentum and updates sharded as the training loop shards parameters
(`experiments.train.sharding.param_shardings`: FSDP on the largest divisible axis), for
three designs:

- `gspmd`: no constraint (`shard=None`); GSPMD infers the iteration's layout from the
  momentum's, so a matrix split along a contracted axis is reduced inside every iteration;
- `replicate`: every matrix gathered to every device and orthogonalized redundantly;
- `owner`: the stacked layer axis split over the `fsdp` axis (`optim.owner_spec`, see
  `owner_axes`), each device orthogonalizing its own layers; one all-to-all in, one out.

From the compiled (post-partitioning) HLO text it counts the collectives (all-gather,
all-reduce, reduce-scatter, all-to-all, collective-permute, and their async `-start` forms)
inside the Newton–Schulz iterations — instructions whose `op_name` lies in the named scope
`optim.orthogonalized.NS_SCOPE`, or in the body of a `while` loop — and outside them, with
the bytes each device sends under ring algorithms: all-gather `(g-1)/g × result`, reduce-scatter
`(g-1)/g × operand`, all-reduce `2 (g-1)/g × buffer`, all-to-all `(g-1)/g × buffer`,
collective-permute `buffer`, for `g` devices per replica group. Expected: `owner` has no
collective inside the iterations and moves no more bytes than `replicate`; `gspmd` has
reductions inside. The three updates agree to float32 rounding (`max_abs_diff_vs_gspmd`).
The last line printed is JSON: `{"gspmd": {...}, "replicate": {...}, "owner": {...}}`.

Measured (default sizes, `data=2,fsdp=4`, 8 simulated CPU devices): `gspmd` 14 all-reduces
inside the iterations, 36 MiB; `replicate` 4 all-gathers outside, 15 MiB; `owner` 12
all-to-alls outside, 11.25 MiB. The floor for `owner` is 7.5 MiB (one all-to-all in and one
out per matrix): GSPMD moves the momentum and the gradient to the owners separately, before
their Nesterov combination, instead of the combination once (an optimization barrier before
the constraint did not change that).
"""

from __future__ import annotations

import os
import sys

if "jax" not in sys.modules:  # 8 simulated devices on CPU; harmless on an accelerator
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import optim  # noqa: E402
from experiments.train import sharding
from optim.orthogonalized import NS_SCOPE  # noqa: E402

DESIGNS = {"gspmd": None, "replicate": "replicate", "owner": "owner"}
KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4,
          "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_SHAPE = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+(" + "|".join(KINDS)
                    + r")(-start)?\(")


def stacked_matrices(d: int, layers: int) -> dict:
  """A GPT block stack's hidden matrices as `ShapeDtypeStruct`s (float32)."""
  shapes = {"w_q": (layers, d, d), "w_o": (layers, d, d), "w_1": (layers, d, 4 * d),
            "w_2": (layers, 4 * d, d)}
  return {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}


def _group_size(line: str, n_devices: int) -> int:
  """Devices per replica group of one collective (all of them when the groups are empty)."""
  named = re.search(r"replica_groups=mesh\[([^\]]*)\].*?\)\s*\{([^}]*)\}", line)
  if named:  # replica_groups=mesh['axis_0'=4,…], device_ids=(…) {'axis_0', …}
    sizes = {k: int(v) for k, v in re.findall(r"'(\w+)'=(\d+)", named.group(1))}
    return math.prod(sizes[a] for a in re.findall(r"'(\w+)'", named.group(2)))
  iota = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
  if iota:
    return int(iota.group(1).split(",")[-1])
  groups = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
  if groups and groups.group(1):
    return len(groups.group(1).split(","))
  return n_devices


def _while_bodies(hlo: str) -> set[str]:
  return set(re.findall(r"\bwhile\(.*?body=%?([\w.\-]+)", hlo))


def collectives(hlo: str, n_devices: int) -> list[dict]:
  """Every collective of a compiled HLO text: kind, bytes sent per device, inside the loop?

  Args:
    hlo: `compiled.as_text()` of a partitioned program.
    n_devices: devices of the program (for collectives over all of them).

  Returns:
    One dict per collective: `{"kind", "bytes", "inside"}`; `inside` when its `op_name` is in
    the Newton–Schulz scope or it sits in a `while` body.
  """
  bodies, computation, found = _while_bodies(hlo), "", []
  for line in hlo.splitlines():
    head = re.match(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
    if head and "=" not in line.split("{")[0]:
      computation = head.group(1)
      continue
    match = _INSTR.match(line)
    if not match:
      continue
    result, kind = match.group(1), match.group(2)
    sizes = [_BYTES[t] * math.prod(int(n) for n in dims.split(",") if n)
             for t, dims in _SHAPE.findall(result)]
    # A tuple result is one buffer per operand (combined collectives, all-to-all chunks);
    # an async `-start` returns (operands, results): count the larger side only.
    buffer = max(sizes, default=0) if match.group(3) else sum(sizes)
    g = _group_size(line, n_devices)
    share = (g - 1) / g
    sent = {"all-gather": share * buffer, "reduce-scatter": share * buffer * g,
            "all-reduce": 2 * share * buffer, "all-to-all": share * buffer,
            "collective-permute": buffer}[kind]
    if kind == "reduce-scatter" and match.group(3):  # async: the tuple holds the operand
      sent = share * buffer
    found.append({"kind": kind, "bytes": int(round(sent)),
                  "inside": NS_SCOPE in line or computation in bodies})
  return found


def summarize(found: list[dict]) -> dict:
  """Counts and bytes of collectives inside and outside the loop, and per kind."""
  inside = [c for c in found if c["inside"]]
  return {"collectives_inside_loop": len(inside),
          "collectives_outside_loop": len(found) - len(inside),
          "bytes_inside_loop": sum(c["bytes"] for c in inside),
          "bytes_moved": sum(c["bytes"] for c in found),
          "by_kind": {k: sum(c["kind"] == k for c in found) for k in KINDS
                      if any(c["kind"] == k for c in found)}}


def owner_axes(mesh) -> tuple[str, ...]:
  """The axes that own layers: `fsdp` when it splits the parameters, else every axis.

  Ownership over `data` as well would split the work further, but the parameters are
  replicated over `data`, so the owners' results must then be gathered back across it: on
  `data=2,fsdp=4`, `d=32` that moved 358,400 bytes per update against 184,320 over `fsdp`
  alone (and 245,760 for `replicate`).
  """
  return ("fsdp",) if mesh.shape["fsdp"] > 1 else tuple(mesh.axis_names)


def compile_designs(mesh, d: int, layers: int, **muon_kw) -> dict:
  """`{design: (compiled update, its HLO text, compile seconds)}` on `mesh`."""
  abstract = stacked_matrices(d, layers)
  shards = sharding.param_shardings(mesh, abstract)
  out = {}
  for name, shard in DESIGNS.items():
    where = {} if shard is None else {"shard": shard, "mesh": mesh}
    if shard == "owner":
      where["shard_axes"] = owner_axes(mesh)
    tx = optim.scale_by_muon(**muon_kw, **where, matrix_axes=optim.MatrixAxes(-2, -1))
    state = jax.eval_shape(tx.init, abstract)
    state_shards = sharding.param_shardings(mesh, state)
    step = jax.jit(tx.update, in_shardings=(shards, state_shards),
                   out_shardings=(shards, state_shards))
    start = time.perf_counter()
    compiled = step.lower(abstract, state).compile()
    out[name] = (compiled, compiled.as_text(), time.perf_counter() - start)
  return out


def run(mesh_spec: str = "data=2,fsdp=4", d: int = 256, layers: int = 8, **muon_kw) -> dict:
  """The report: per design the summary of `collectives`, compile time and agreement."""
  mesh = sharding.make_mesh(sharding.parse_mesh(mesh_spec))
  designs = compile_designs(mesh, d, layers, **muon_kw)
  abstract = stacked_matrices(d, layers)
  rng = np.random.default_rng(0)
  grads = {k: rng.standard_normal(s.shape).astype(np.float32) for k, s in abstract.items()}
  shards = sharding.param_shardings(mesh, abstract)
  report, ref = {}, None
  for name, (compiled, hlo, compile_s) in designs.items():
    tx = optim.scale_by_muon(**muon_kw, matrix_axes=optim.MatrixAxes(-2, -1))
    state = jax.device_put(tx.init(grads), sharding.param_shardings(
        mesh, jax.eval_shape(tx.init, abstract)))
    updates, _ = compiled(jax.device_put(grads, shards), state)
    updates = jax.device_get(updates)
    ref = updates if ref is None else ref
    diff = max(float(np.abs(updates[k] - ref[k]).max()) for k in updates)
    report[name] = {**summarize(collectives(hlo, mesh.size)), "compile_s": round(compile_s, 2),
                    "max_abs_diff_vs_gspmd": diff}
  return report


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--mesh", default="data=2,fsdp=4", help="e.g. 'fsdp=8' or 'data=2,fsdp=4'")
  ap.add_argument("--d", type=int, default=256, help="d_model (w_1 is (L, d, 4d))")
  ap.add_argument("--layers", type=int, default=8, help="stacked layers L")
  ap.add_argument("--coeffs", default="standard", help="Newton–Schulz coefficients")
  args = ap.parse_args(argv)
  report = run(args.mesh, args.d, args.layers, coeffs=args.coeffs)
  print(f"mesh {args.mesh}, L={args.layers}, d={args.d}, {jax.devices()[0].platform}")
  print(f"{'design':<10} {'inside':>6} {'outside':>7} {'MB moved':>9}  kinds")
  for name, r in report.items():
    print(f"{name:<10} {r['collectives_inside_loop']:>6} {r['collectives_outside_loop']:>7} "
          f"{r['bytes_moved'] / 2**20:>9.3f}  {r['by_kind']}")
  print(json.dumps(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
