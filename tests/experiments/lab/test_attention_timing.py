"""The attention benchmark's helpers: log-log slope, crossover, score-tensor bytes, XLA's counts."""

import math

import numpy as np
import pytest

from experiments.lab.attention_timing import crossover, options, score_bytes, slope, work
from transformer.attention import LINEAR_CHUNK

TS = [512, 1024, 2048, 4096]


@pytest.mark.parametrize("power", [1.0, 1.5, 2.0])
def test_slope_recovers_the_power_of_a_power_law(power):
  times = [3e-4 * (t / 512) ** power for t in TS]
  assert slope(TS, times) == pytest.approx(power, abs=1e-12)


def test_slope_is_least_squares_on_noisy_points():
  rng = np.random.default_rng(0)
  times = np.exp(1.3 * np.log(TS) - 9 + rng.normal(0, 0.1, len(TS)))
  x, y = np.log(TS), np.log(times)
  want = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
  assert slope(TS, times) == pytest.approx(want, rel=1e-10)


def test_crossover_interpolates_log_log_where_the_ratio_crosses_one():
  # time / base = 1500 / T: log-linear in log T, so the interpolation is exact at T = 1500.
  base = [1e-9 * t**2 for t in TS]
  times = [b * 1500 / t for b, t in zip(base, TS, strict=True)]
  assert crossover(TS, times, base) == pytest.approx(1500, rel=1e-9)


def test_crossover_first_point_and_never():
  base = [1.0, 2.0, 4.0, 8.0]
  assert crossover(TS, [0.5, 1.0, 2.0, 4.0], base) == 512.0  # already faster at the first T
  assert crossover(TS, [1.0, 2.0, 4.0, 8.0], base) == 512.0  # a tie counts as a win
  assert crossover(TS, [2.0, 3.0, 5.0, 9.0], base) is None  # never faster on the grid


def test_score_bytes_count_what_each_variant_forms():
  T, H, dh, bs = 1000, 4, 32, 64  # T not a multiple of the block: padded to 16 blocks
  n_blocks, rows = math.ceil(T / bs), H * math.ceil(T / bs) * bs
  o = options(bs)
  assert score_bytes("softmax", T, H, dh, bs) == 4 * rows * T
  # local: own block and ⌈(w−1)/bs⌉ = 2 earlier blocks for w = 128.
  assert score_bytes("local", T, H, dh, bs) == 4 * rows * 3 * bs
  assert score_bytes("bigbird", T, H, dh, bs) == 4 * rows * (4 * bs + o["bigbird"]["n_global"])
  assert score_bytes("moba", T, H, dh, bs) == 4 * rows * (3 * bs + n_blocks)
  # linear: one C × C quadratic form and one (dh × dh + dh) sum per chunk, not per position.
  n_chunks = math.ceil(T / LINEAR_CHUNK)
  assert score_bytes("linear", T, H, dh, bs) == 4 * H * n_chunks * (
      LINEAR_CHUNK**2 + dh * dh + dh)
  assert score_bytes("linear", T, H, dh, bs) < 4 * H * T * dh * (dh + 1) / 10


def test_work_counts_a_window_linear_and_full_attention_quadratic():
  """`work`, against numpy: the marginal FLOPs per added token and the memory per token come
  from the counts it returns; a window's are constant (exactly), full attention's double."""
  ts = (64, 128, 256, 512)
  local = work("local", ts, heads=2, d_head=4, window=16, block_size=16)
  full = work("softmax", ts, heads=2, d_head=4)
  for w in (local, full):
    f, t = np.asarray(w["flops"], np.float64), np.asarray(ts, np.float64)
    m = np.diff(f) / np.diff(t)
    assert w["marginal_growth"] == np.abs(m / m[0] - 1).max()
    per = np.asarray(w["temp_bytes"], np.float64) / t
    assert w["memory_growth"] == pytest.approx(per.max() / per[0] - 1, abs=1e-15)
  assert local["marginal_growth"] == 0.0 and local["memory_growth"] <= 0.0
  f = np.asarray(local["flops"])
  np.testing.assert_array_equal(f[1:] - f[:-1], (f[1] - f[0]) * np.diff(ts) / (ts[1] - ts[0]))
  # Full attention's extra token costs ~T: from 64→128 to 256→512 the marginal cost grows ~4x.
  assert full["marginal_growth"] > 2.5 and full["memory_growth"] > 3
  with pytest.raises(ValueError, match="three increasing"):
    work("local", (64, 128), heads=2, d_head=4, window=16, block_size=16)
