"""The sliding-window claim: its theorem in float64, the receptive field and local mass it measures,
its sizes and its run."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.claims import CLAIMS, sliding_window
from experiments.lab import attention_arms, receptive
from experiments.verdict import Spec
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare import axes
from experiments.verdict.declare.clause import conjunction
from tests.experiments.claims.attention_helpers import (
  RNG,
  SHAPE,
  TINY,
  check_shape,
  committed,
  init_params,
)
from transformer.attention import local_attention


def test_local_mass_is_an_extension_not_the_headline():
  c = CLAIMS["sliding-window"]
  assert [th.metric for th in c.thresholds] == ["loss_ratio", "flops_growth", "memory_growth",
                                                "rf_exact", "rates_at_edge"]
  assert [th.metric for e in c.extensions for th in e.thresholds] == ["local_mass"]
  mass = c.extensions[0].thresholds[0]
  assert (mass.supports, mass.refutes) == ("> 0.55", "< 0.55")


# ------------------------------------------------------------------ sliding-window theorem


@pytest.mark.parametrize("T, w, bs", [(19, 5, 4), (32, 8, 8), (40, 7, 16)])
def test_window_reads_at_most_w_keys_and_ignores_the_rest_float64(T, w, bs):
  """`sliding-window` theorem: query t reads exactly min(t + 1, w) keys, its output is a
  function of positions t − w + 1 … t alone, and the blocks form at most T·(⌈(w−1)/bs⌉+1)·bs
  scores: linear in T at fixed w."""
  with jax.enable_x64(True):
    q, k, v = (jnp.asarray(RNG.standard_normal((1, T, 2, 4))) for _ in range(3))
    out, aux = local_attention(q, k, v, None, scale=0.5, window=w, block_size=bs)
    t = np.arange(T)
    np.testing.assert_array_equal(np.asarray(aux["keys_read"][0, 0]), np.minimum(t + 1, w))
    computed = int((np.asarray(aux["scores"]) > np.finfo(np.float32).min).sum())
    assert computed <= T * (math.ceil((w - 1) / bs) + 1) * bs * 2  # 2 heads
    # Perturb every key and value farther than w − 1 behind the last query: nothing moves.
    far = t <= T - 1 - w
    k2 = jnp.where(far[None, :, None, None], k + 3.0, k)
    v2 = jnp.where(far[None, :, None, None], v - 2.0, v)
    out2, _ = local_attention(q, k2, v2, None, scale=0.5, window=w, block_size=bs)
    assert out.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(out2[0, -1]), np.asarray(out[0, -1]))
    # ... while a key inside the window does move it.
    k3 = k.at[0, T - w].add(3.0)
    out3, _ = local_attention(q, k3, v, None, scale=0.5, window=w, block_size=bs)
    assert np.abs(np.asarray(out3[0, -1] - out[0, -1])).max() > 1e-6


@pytest.mark.parametrize("window", [3, 5])
def test_receptive_field_measures_layers_times_window_minus_one(window):
  cfg = TINY.replace(attention="local", window=window, block_size=4, positions="none")
  params = transformer.init(cfg, jax.random.key(0))
  rf = receptive.receptive_field(params, cfg, 16, jax.random.key(1))
  assert rf["expected"] == 2 * (window - 1) and rf["reach"] == rf["expected"]
  assert rf["rf_exact"] == 1.0


@pytest.mark.parametrize("attention", ["full", "local"])
def test_abs_jacobian_rows_matches_the_whole_jacobian_by_jacrev(attention):
  # The row-at-a-time map against `jax.jacrev` of the whole stack, on full attention (every
  # causal entry nonzero) and a window (its zeros must be exactly where jacrev's are).
  cfg = TINY.replace(positions="none", **({"attention": "local", "window": 3, "block_size": 4}
                                          if attention == "local" else {}))
  params = transformer.init(cfg, jax.random.key(0))
  f_l = transformer.block_fn(cfg)

  def stack(x_TD):
    for layer in range(cfg.n_layers):
      x_TD = f_l(transformer.layer(params, layer), x_TD)
    return x_TD

  x_TD = jax.random.normal(jax.random.key(1), (12, cfg.d_model))
  want = np.abs(np.asarray(jax.jacrev(stack)(x_TD), np.float64)).sum((1, 3))
  got = np.asarray(receptive.abs_jacobian_rows(stack, x_TD))
  assert got.shape == (12, 12) and (want > 0).sum() > 12  # not a diagonal-only stack
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
  np.testing.assert_array_equal(got > 0, want > 0)


def test_receptive_field_catches_attention_that_is_not_a_window():
  # The dense masked window reaches exactly L(w−1) too; full attention reaches everything.
  cfg = TINY.replace(positions="none")
  params = transformer.init(cfg, jax.random.key(0))
  dense = receptive.receptive_field(params, cfg.replace(window=3), 16, jax.random.key(1))
  assert dense["rf_exact"] == 1.0 and dense["reach"] == 4.0
  full = receptive.receptive_field(params, cfg, 16, jax.random.key(1), window=3)
  assert full["rf_exact"] == 0.0 and full["reach"] == 15.0


def test_window_mass_against_numpy():
  params = transformer.init(TINY, jax.random.key(2))
  tokens = np.asarray(jax.random.randint(jax.random.key(3), (2, 20), 0, 64))
  got = receptive.window_mass(params, TINY, tokens, 4)
  _, state = transformer.Transformer(TINY).apply({"params": params}, tokens,
                                                  mutable=["intermediates"])
  w = np.asarray(state["intermediates"]["blocks"]["attn"]["weights"][0], np.float64)  # L B H T S
  T = w.shape[-1]
  lag = np.arange(T)[:, None] - np.arange(T)[None, :]
  mass = (w * ((lag >= 0) & (lag < 4))).sum(-1).mean(-1)  # (L, B, H): causal, so |lag| = lag
  per_head = mass.mean(1)
  assert got["local_mass"] == pytest.approx(mass.mean(), abs=1e-6)
  assert got["heads_mostly_local"] == pytest.approx((per_head > 0.5).mean())
  assert got["local_mass_min_head"] == pytest.approx(per_head.min(), abs=1e-6)


def test_sliding_window_sizes_refuse_a_timing_grid_the_sweep_would_not_run():
  for z in (sliding_window.QUICK, sliding_window.FULL):
    assert z.rf_seq_len > attention_arms.base_config().n_layers * (sliding_window.WINDOW - 1)
  with pytest.raises(ValueError, match="timing_seq_lens"):
    sliding_window.SlidingWindowSizes(**{**sliding_window.QUICK.to_dict(),
                                         "timing_seq_lens": (128, 512)})


# ------------------------------------------------------------------ sliding-window: sizes

def test_sliding_window_trains_every_size_at_20_tokens_per_parameter():
  """v3: registered at `micro-20` with batches of 2 × 1024 (T = 1024, the longest committed
  model's length), `steps=None` training each size of the scale axis (now with `mini-20`) at 20
  tokens per parameter; the grid follows the recipe's width rule with ratio 2."""
  z = sliding_window.FULL
  assert (z.model, z.steps, z.batch_size, z.seq_len, z.extend, z.split) == (
      "micro-20", None, 2, 1024, 2, "test")
  for name in ("pico-20", "micro-20", "mini-20"):
    at = dataclasses.replace(z, model=name)
    assert 20 <= at.train_tokens() / axes.model_card(name)["params"] < 20.1, name
    assert at.budget_steps() == models.RECIPES[name].steps  # 2 × 1024 = 16 × 128 tokens
    assert at.rates == pytest.approx(tuple(f * 3e-3 * 64 / models.config(name).d_model
                                           for f in sliding_window.RATE_FACTORS))
  assert np.diff(np.log(z.rates)) == pytest.approx([math.log(2)] * 3)
  assert sliding_window.QUICK.rates == (3e-3,) and sliding_window.QUICK.budget_steps() == 30
  with pytest.raises(ValueError, match="no recipe"):
    dataclasses.replace(z, model="nano")
  c = CLAIMS["sliding-window"]
  assert (c.version, c.bits_metric, c.axis("context").values) == (3, ("full", "loss"),
                                                                  (256, 512, 1024))
  assert c.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20", "mini-20")
  assert axes.scale_models(c, quick=True) == ()  # quick runs stay one size


@pytest.mark.parametrize("T, batch, probe", [(256, 8, 4), (512, 4, 2), (1024, 2, 1)])
def test_sliding_window_context_points_keep_tokens_steps_and_grid(T, batch, probe):
  z = sliding_window.FULL
  at = sliding_window.at_length(z, T)
  assert (at.seq_len, at.batch_size, at.probe_batch) == (T, batch, probe)
  assert at.budget_steps() == z.budget_steps() == 409 and at.rates == z.rates
  assert at.timing_seq_lens == (() if T != z.seq_len else z.timing_seq_lens)
  assert at.work_seq_lens == z.work_seq_lens and at.split == "test"
  for bad in (48, 96, 100, 32):  # not a multiple above the window, or not dividing 2,048
    with pytest.raises(ValueError, match="context length"):
      sliding_window.at_length(z, bad)


def _runs(ratios, flops=(0.0,) * 5, memory=(-0.1,) * 5, edge=0.0):
  return {"local": {s: {"loss_ratio": r, "flops_growth": f, "memory_growth": m, "rf_exact": 1.0,
                        "rates_at_edge": edge}
                    for s, r, f, m in zip(SEEDS, ratios, flops, memory, strict=True)}}


SEEDS = (10, 11, 12, 13, 14)


@pytest.mark.parametrize("runs, want", [
    (_runs((-0.02, -0.01, -0.03, 0.0, -0.015)), ("supported", "supported")),
    (_runs((0.05, 0.04, 0.06, 0.045, 0.05)), ("supported", "refuted")),
    (_runs((-0.02, 0.05, 0.0, 0.04, 0.01)), ("supported", "inconclusive")),
    (_runs((0.0,) * 5, edge=1.0), ("supported", "inconclusive")),  # a control blocks ② only
    (_runs((0.0,) * 5, flops=(0.5,) * 5), ("refuted", "supported")),  # quadratic work
    (_runs((0.0,) * 5, memory=(0.0, 0.0, 0.2, 0.0, 0.0)), ("inconclusive", "supported")),
])
def test_sliding_window_v3_clauses_decide_synthetic_runs_as_registered(runs, want):
  """① (proof) on XLA's counts alone, exactly: no change of FLOPs per added token and no growth
  of memory per token; ② on the loss ratio at T = 1024 against 2%, blocked by its controls."""
  c = sliding_window.CLAIM
  assert [cl.proof is not None for cl in c.clauses] == [True, False]
  assert "T = 1024" in c.clauses[1].text and "the longest measured" in c.clauses[1].text
  parts = rule.clause_verdicts(c, runs, SEEDS, indicative=False)
  assert tuple(p["verdict"] for p in parts) == want
  assert rule.verdict(c, runs, SEEDS, indicative=False)[0] == conjunction(want)


# ---------------------------------------------------- sliding-window, dynamic-sparsity: sizes

SCALE = ("mini", "micro", "small", "llama-micro", "llama-mini", "llama-small")


SW_ARMS = {"full": {}, "local": dict(attention="local", window=32, block_size=32)}


def test_sliding_window_registered_size_trains_the_model_of_the_committed_results():
  """QUICK's `mini` arms are the `tiny` preset v1 trained, field by field; FULL's are the
  `micro-20` recipe's shape, and a result of this registration ran exactly FULL."""
  assert (sliding_window.FULL.model, sliding_window.QUICK.model) == ("micro-20", "mini")
  assert sliding_window.ARMS == SW_ARMS
  for arm, over in SW_ARMS.items():
    for T in (128, 256):
      old = attention_arms.config_at(T, **over)  # what v1's `run` built
      got = sliding_window.arm_config("mini", arm, T)
      assert dataclasses.asdict(got) == dataclasses.asdict(old)
    new = sliding_window.arm_config("micro-20", arm, 256)
    assert new == models.RECIPES["micro-20"].cfg.replace(**over) and new.max_len == 256
    long = sliding_window.arm_config("micro-20", arm, 1024)
    assert long == new.replace(max_len=1024)  # v3's registered length
  res = committed("sliding-window")
  if res.get("version", 1) == sliding_window.CLAIM.version:  # registered before its results land
    assert sliding_window.FULL.to_dict() == res["config"]["sizes"]
    assert sliding_window.arm_config("micro-20", "local", 1024).to_dict() == res["config"][
        "setup"]["model_config"]


@pytest.mark.parametrize("size", list(SHAPE))
def test_sliding_window_other_sizes_build_the_declared_shape(size):
  for T in (256, 1024):  # the registered length and a context length past max_len
    for arm, over in SW_ARMS.items():
      cfg = sliding_window.arm_config(size, arm, T)
      check_shape(cfg, size, T)
      assert (cfg.attention, cfg.window, cfg.block_size) == (
          over.get("attention", "softmax"), over.get("window"), over.get("block_size", 32))


def test_sliding_window_run_trains_both_arms_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `llama-micro-20`: both arms are tuned on seeds 110, 111 (the edge rule up to
  twice, on `val`) and train at its shape at T = 1024, its 20-tokens-per-parameter steps and
  their own rates, read on `test`; the reach (exactly L(w − 1) with RoPE and grouped keys) and
  the mass are measured on those models, XLA counts one layer of its heads, the timing sweep
  times them, and an arm whose rate stays at an edge fails the edge control."""
  seen, timed = [], []

  def fake_tune(cfg, *, tuning_seeds, grid, extend, data, steps, batch_size, seq_len):
    assert tuning_seeds == (110, 111) and extend == 2
    seen.append(("tune", cfg, tuple(grid), steps, batch_size, seq_len))
    lr = grid[-1] if cfg.attention == "local" else grid[1]  # local's stays at the top edge
    return {"learning_rate": lr, "index": list(grid).index(lr), "seeds": [110, 111],
            "grid": list(grid), "losses": [2.2] * 4, "excluded": [False] * 4,
            "at_edge": lr == grid[-1]}

  def fake_train(cfg, seeds, *, learning_rates, data, steps, batch_size, seq_len, split):
    assert split == "test"
    seen.append((data, cfg, tuple(seeds), tuple(learning_rates), steps))
    return {"per_seed": {s: {"loss": 2.0 + 0.1 * (cfg.attention == "local"), "diverged": 0.0}
                         for s in seeds}, "lr": learning_rates[0],
            "params": init_params(cfg, seeds)}

  def fake_timing(ts, rounds, *, heads, d_head):
    timed.append((tuple(ts), rounds, heads, d_head))
    row = {"fwd": [1e-3] * len(ts), "bwd": [2e-3] * len(ts), "slope_fwd": 1.0,
           "slope_bwd": 1.0, "crossover_fwd": None, "crossover_bwd": None}
    return {"T": list(ts), "softmax": row, "local": row}

  monkeypatch.setattr(sliding_window, "tune_rate", fake_tune)
  monkeypatch.setattr(sliding_window, "train_arm", fake_train)
  monkeypatch.setattr(sliding_window, "timing", fake_timing)
  monkeypatch.setattr(sliding_window.attention_timing, "figure", lambda *a: "timing.png")
  z = dataclasses.replace(sliding_window.FULL, model="llama-micro-20", rf_seq_len=64)
  out = sliding_window.run(Spec(quick=False, seeds=(0,), run_dir=str(tmp_path), sizes=z,
                                log=lambda *_: None))
  want = {a: sliding_window.arm_config("llama-micro-20", a, 1024) for a in ("full", "local")}
  g, n = z.rates, models.param_count("llama-micro-20")
  assert g == pytest.approx((1.5e-3, 3e-3, 6e-3, 1.2e-2))
  steps = math.ceil(20 * n / (2 * 1024))
  assert seen == [("tune", want["full"], g, steps, 2, 1024),
                  ("stdlib", want["full"], (0,), (g[1],), steps),
                  ("tune", want["local"], g, steps, 2, 1024),
                  ("stdlib", want["local"], (0,), (g[-1],), steps)]
  assert timed == [((256, 512, 1024, 2048), 3, 4, 8)]  # its heads: 4 of d / 4 = 8
  local, full = out["runs"]["local"][0], out["runs"]["full"][0]
  assert (local["rf_exact"], local["reach"], local["expected"]) == (1.0, 62.0, 62.0)
  assert local["loss_ratio"] == pytest.approx(0.05) and local["rates_at_edge"] == 1.0
  assert (local["flops_growth"], local["memory_growth"] <= 0) == (0.0, True)
  assert out["setup"]["work"]["full"]["marginal_growth"] > 1 and out["split"] == "test"
  assert 0.0 < full["local_mass"] < 1.0
  assert out["setup"]["model_config"] == want["local"].to_dict()
  assert out["notes"][0].startswith("Models: the `llama-micro-20` shape from scratch (llama: "
                                    "d 32, L 2, H 4 on 2 key/value heads, rope positions; "
                                    "41,120 parameters")
  assert f"{steps} AdamW steps of 2 × 1024 tokens, 20.0 tokens per parameter" in out["notes"][0]
  assert "(4 heads × 8, blocks of 16)" in out["notes"][4]
  assert "Still at an edge: local, so the control fails." in out["notes"][-1]
  v, _, evals = rule.decide(CLAIMS["sliding-window"].thresholds, out["runs"], (0,))
  assert v == "inconclusive" and evals[0]["blocked"]
  parts = rule.clause_verdicts(CLAIMS["sliding-window"], out["runs"], (0,), indicative=True)
  assert parts[0]["verdict"] == "supported"  # ① needs no control


def test_sliding_window_run_refuses_a_shape_whose_reach_the_input_cannot_show(monkeypatch):
  monkeypatch.setattr(sliding_window, "tune_rate", lambda *a, **k: pytest.fail("trained"))
  z = dataclasses.replace(sliding_window.FULL, model="small", rf_seq_len=124)  # reach 4·31
  with pytest.raises(ValueError, match="rf_seq_len=124 must exceed the reach"):
    sliding_window.run(Spec(quick=False, seeds=(0,), run_dir="unused", sizes=z))
  for name in SCALE:  # every declared size's reach fits FULL's and QUICK's input
    L = models.config(name).n_layers
    assert sliding_window.FULL.rf_seq_len > L * 31 and sliding_window.QUICK.rf_seq_len > L * 31
