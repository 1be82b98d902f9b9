"""The KV-cache benchmark's own arithmetic: bytes, ratios and peak memory against the formulas
(its speed numbers are never asserted)."""

import pytest

from experiments.benchmarks import kv_cache


def test_measure_reports_the_bytes_of_the_arrays_and_a_peak_that_holds_them():
  B, L, K, dh = 2, 2, 2, 16  # d_model 32, 2 heads
  out = kv_cache.measure(lengths=(32, 64), batch=B, rounds=1, rank_ratios=(8,), bits=(4,),
                         d_model=32, layers=L, heads=K)
  for T, res in out.items():
    caches = res["caches"]
    assert sorted(caches) == ["full-f16", "full-f32", "latent-r2-4bit"]
    flags = 1 + 4 / (B * T)  # the validity flag per token, the index shared by all
    per_token = {"full-f32": 2 * L * K * dh * 4 + flags, "full-f16": 2 * L * K * dh * 2 + flags,
                 "latent-r2-4bit": 2 * L * -(-K * 2 * 4 // 8) + flags}  # rank 2: ⌈R·4/8⌉ bytes
    for name, m in caches.items():
      assert m["bytes_per_token"] == pytest.approx(per_token[name], rel=1e-12)
      assert m["bytes"] == m["measured_bytes"] == round(per_token[name] * B * T)
      assert m["ratio_vs_16bit"] == pytest.approx(per_token["full-f16"] / per_token[name])
      # The step's arguments hold the cache; its peak holds its arguments.
      assert m["peak_bytes"] >= m["read_bytes"] > m["bytes"]
      assert m["x_floor"] == pytest.approx(m["step_ms"] / m["floor_ms"])
    assert caches["full-f16"]["speedup_vs_f16"] == caches["full-f32"]["speedup_vs_f32"] == 1.0
  text = kv_cache.explain(out)
  assert "at T = 32 the float32 full cache" in text and "at T = 64" in text
  rows = kv_cache.table(out).splitlines()
  assert len(rows) == 1 + 2 * (3 + 1)  # header; per T three caches and the read probe
