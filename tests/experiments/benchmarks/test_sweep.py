"""The sweep benchmark's arithmetic: steady-state rates from two step counts, FLOPs per step."""

import json
import os

import jax
import pytest

from experiments.benchmarks import sweep as bench
from experiments.models import param_count


def test_flops_count_6n_per_token_plus_attention():
  # micro-20: GPT, d 32, 2 layers, 16 x 128 tokens a step.
  n = param_count("micro-20")
  want = 16 * 128 * (6 * n + 12 * 2 * 128 * 32)
  assert bench.flops_per_run_step("micro-20") == want


def test_rates_and_compile_time_come_from_differenced_walls(monkeypatch, capsys, tmp_path):
  # A fake strategy whose wall is `compile (first call only) + fixed + steps x runs x per`:
  # the benchmark must recover `per` and the compile time exactly, whatever `fixed` is.
  per = {"vmap-today": 0.05, "dispatch": 0.02}
  seen = set()

  def fake(size, seeds, steps, strategy, eval_every):
    assert eval_every == 10
    first = (size, len(seeds), strategy) not in seen
    seen.add((size, len(seeds), strategy))
    return (7.0 if first else 0.0) + 1.5 + steps * len(seeds) * per[strategy]

  monkeypatch.setattr(bench, "train_runs", fake)
  monkeypatch.setattr(bench, "matmul_ceiling", lambda: 100e9)
  # main points JAX's cache at --cache: give the suite's own setting back afterwards.
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", os.environ.get("JAX_COMPILATION_CACHE_DIR", ""))
  old = jax.config.jax_compilation_cache_dir
  try:
    bench.main(["--sizes", "pico-20", "--runs", "2", "--steps", "10,40",
                "--strategies", "vmap-today,dispatch", "--cache", str(tmp_path)])
  finally:
    jax.config.update("jax_compilation_cache_dir", old)
  out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  rows = {r["strategy"]: r for r in out["rows"]}
  assert rows["vmap-today"]["run_steps_per_s"] == pytest.approx(20.0)
  assert rows["dispatch"]["run_steps_per_s"] == pytest.approx(50.0)
  assert rows["dispatch"]["vs_vmap_today"] == pytest.approx(2.5)
  assert rows["dispatch"]["compile_s"] == pytest.approx(7.0)
  flops = bench.flops_per_run_step("pico-20")
  assert rows["dispatch"]["ceiling_share"] == pytest.approx(round(50.0 * flops / 100e9, 4))
  assert out["best"] == {"pico-20 x2": "dispatch"}


def test_step_counts_must_share_one_program():
  with pytest.raises(SystemExit, match="multiple of the first"):
    bench.main(["--steps", "10,25"])
