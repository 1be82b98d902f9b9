"""The Muon HLO benchmark at a small size: ownership has no collective inside the iterations."""

import json

import jax
import numpy as np

import optim
from experiments.benchmarks import muon_sharding
from experiments.train import sharding


def test_collective_parser_on_handwritten_hlo():
  a2a = ("%a2a = (f32[1,16]{1,0}, f32[1,16]{1,0}) all-to-all(%y, %z), "
         "replica_groups=mesh['a'=2,'b'=2], device_ids=([4]) {'b'}, "
         'metadata={op_name="jit(f)/muon_newton_schulz/dot"}')
  hlo = """
%body.1 (p: f32[4]) -> f32[4] {
  %ar = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={{0,1},{2,3}}, to_apply=%add
}
ENTRY %main (x: f32[8,16]) -> f32[8,16] {
  %ag = f32[8,16]{1,0} all-gather(f32[2,16]{1,0} %x), replica_groups=[1,4]<=[4], dimensions={0}
  %w = f32[4]{0} while(f32[4]{0} %t), condition=%cond.1, body=%body.1
  A2A
}
""".replace("A2A", a2a)
  found = muon_sharding.collectives(hlo, n_devices=4)
  assert [(c["kind"], c["bytes"], c["inside"]) for c in found] == [
      ("all-reduce", 16, True),  # 2 (g-1)/g × 16 bytes, g = 2, in the while body
      ("all-gather", 384, False),  # (g-1)/g × 512 bytes, g = 4
      ("all-to-all", 64, True),  # (g-1)/g × (64 + 64) bytes, g = 2, in the named scope
  ]


def test_owner_has_no_collective_inside_the_iterations(capsys):
  assert muon_sharding.main(["--mesh", "data=2,fsdp=4", "--d", "32", "--layers", "8"]) == 0
  report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert set(report) == {"gspmd", "replicate", "owner"}
  owner, replicate, gspmd = report["owner"], report["replicate"], report["gspmd"]
  assert owner["collectives_inside_loop"] == 0 and owner["collectives_outside_loop"] > 0
  assert replicate["collectives_inside_loop"] == 0
  assert gspmd["collectives_inside_loop"] > 0  # the detector sees collectives when they exist
  assert 0 < owner["bytes_moved"] <= replicate["bytes_moved"]
  for design in report.values():  # the three layouts compute the same update
    assert design["max_abs_diff_vs_gspmd"] < 5e-6


def test_replicate_equals_one_device():
  mesh = sharding.make_mesh({"data": 2, "fsdp": 4})
  abstract = muon_sharding.stacked_matrices(32, 8)
  rng = np.random.default_rng(1)
  grads = {k: rng.standard_normal(s.shape).astype(np.float32) for k, s in abstract.items()}
  one = optim.scale_by_muon(matrix_axes=optim.MatrixAxes(-2, -1))
  ref, _ = jax.jit(one.update)(grads, one.init(grads))
  tx = optim.scale_by_muon(shard="replicate", mesh=mesh, matrix_axes=optim.MatrixAxes(-2, -1))
  placed = jax.device_put(grads, sharding.param_shardings(mesh, abstract))
  out, _ = jax.jit(tx.update)(placed, tx.init(placed))
  for k in grads:  # unit-scale updates (~0.5): 5e-6 is float32 rounding that Newton–Schulz
    # amplified (see tests/optim/test_muon_sharding.py)
    np.testing.assert_allclose(out[k], ref[k], rtol=0, atol=5e-6)
    assert np.abs(ref[k]).max() > 0.05
