"""The claims psd-attention, sliding-window and dynamic-sparsity: theorems, measurements, rules."""

import dataclasses
import math
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import data as data_lib
from experiments import jsonio, models
from experiments.claims import CLAIMS, dynamic_sparsity, psd_attention, sliding_window
from experiments.lab import attention_arms, receptive, sparsity
from experiments.verdict import Spec, Threshold, axes, folders, rule
from transformer.attention import (
  linear_quadratic,
  local_attention,
  rbf_attention,
  softmax_attention,
)

TINY = transformer.Config(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32,
                          positions="learned", init_std=0.1)
RNG = np.random.default_rng(21)
IDS = ("psd-attention", "sliding-window", "dynamic-sparsity")


# ------------------------------------------------------------------ the declarations


def test_claims_registered_built_and_pre_registered():
  for cid in IDS:
    c = CLAIMS[cid]
    assert c.built and c.anchors
    assert c.seeds == (0, 1, 2, 3, 4) and c.tuning_seeds == (100,)
    assert not set(c.seeds) & set(c.tuning_seeds)
    for th in c.thresholds + tuple(t for e in c.extensions for t in e.thresholds):
      assert th.unit, th.name
      if not th.control:  # every comparison carries its practical margin
        assert th.margin is not None and th.margin > 0, th.name
      # Labels must not carry sizes that only the full run has (quick runs T = 128, not 256).
      assert "T = " not in th.name and "%" not in th.name, th.name
  assert CLAIMS["psd-attention"].theorem and CLAIMS["sliding-window"].theorem


def test_local_mass_is_an_extension_not_the_headline():
  c = CLAIMS["sliding-window"]
  assert [th.metric for th in c.thresholds] == ["loss_ratio", "rf_exact", "rates_at_edge"]
  assert [th.metric for e in c.extensions for th in e.thresholds] == ["local_mass"]
  mass = c.extensions[0].thresholds[0]
  assert (mass.supports, mass.refutes) == ("> 0.55", "< 0.55")


@pytest.mark.parametrize("direction, values, expected", [
    ("<", (0.001, 0.004, 0.002), "supported"),    # cost inside the margin
    ("<", (0.030, 0.035, 0.040), "refuted"),      # cost beyond it
    ("<", (0.000, 0.030, 0.015), "inconclusive"),  # straddles it
    (">", (-0.01, 0.02, 0.0), "supported"),       # score drop smaller than the margin
    (">", (-0.3, -0.25, -0.2), "refuted"),
])
def test_within_is_non_inferiority_by_the_runners_rule(direction, values, expected):
  margin = 0.02 if direction == "<" else 0.1
  th = Threshold("cost", "new", "m", unit="u", **attention_arms.within(margin, direction))
  runs = {"new": {s: {"m": v} for s, v in enumerate(values)}}
  assert rule.decide((th,), runs, (0, 1, 2))[0] == expected


def test_within_refuses_a_zero_margin_and_unknown_direction():
  with pytest.raises(ValueError, match="margin"):
    attention_arms.within(0.0)
  with pytest.raises(ValueError, match="direction"):
    attention_arms.within(0.1, ">=")


def test_ended_diverged_is_the_end_not_a_spike():
  got = attention_arms.ended_diverged([1.0, math.nan, math.inf, math.log(256) + 1e-3, 5.0], 256)
  assert got.tolist() == [False, True, True, True, False]


# ------------------------------------------------------------------ tuning on tuning seeds


def test_tuned_arm_chooses_on_tuning_seeds_and_reports_at_one_rate(monkeypatch):
  calls = []

  def fake(cfg, seeds, *, learning_rates, **kw):
    calls.append((tuple(seeds), tuple(learning_rates)))
    # The reported seeds would prefer 1e-3; the tuning seed prefers 3e-3.
    loss = {100: [2.5, 2.0], 0: [1.0, 3.0], 1: [1.0, 3.0]}
    grid = [[loss[s][(1e-3, 3e-3).index(lr)] for s in seeds] for lr in learning_rates]
    best = int(np.argmin(np.mean(grid, 1)))
    return {"per_seed": {s: {"loss": grid[best][j]} for j, s in enumerate(seeds)},
            "lr": learning_rates[best], "params": {}, "val_loss_grid": grid}

  monkeypatch.setattr(attention_arms, "train_arm", fake)
  out = attention_arms.tuned_arm(None, (0, 1), tuning_seeds=(100,), grid=(1e-3, 3e-3),
                                 data="x", steps=1, batch_size=1, seq_len=1)
  assert calls == [((100,), (1e-3, 3e-3)), ((0, 1), (3e-3,))]
  assert out["lr"] == 3e-3 and out["tuning"]["val_loss"] == [2.5, 2.0]
  calls.clear()
  assert attention_arms.tuned_arm(None, (0,), tuning_seeds=(100,), grid=(3e-3,), data="x",
                                  steps=1, batch_size=1, seq_len=1)["tuning"] is None
  assert calls == [((0,), (3e-3,))]
  with pytest.raises(ValueError, match="both tune and report"):
    attention_arms.tuned_arm(None, (0, 100), tuning_seeds=(100,), grid=(1e-3, 3e-3))


def test_tune_rate_extends_a_winning_edge_once_only_when_asked(monkeypatch):
  """The edge rule (opt-in): a best rate at the top runs one rate a step beyond it, once; a
  rate still at the edge is flagged; a rate that ended diverged never wins; extend=0 keeps the
  record every other claim reads."""
  calls = []

  def fake(cfg, seeds, *, learning_rates, **kw):
    calls.append(tuple(learning_rates))
    loss = {1e-3: 3.0, 2e-3: 2.5, 4e-3: 2.2, 8e-3: 2.0, 1.6e-2: 1.9, 3.2e-2: math.nan}
    return {"val_loss_grid": [[loss[round(lr, 6)]] for lr in learning_rates],
            "lr": learning_rates[-1]}

  monkeypatch.setattr(attention_arms, "train_arm", fake)
  cfg = types.SimpleNamespace(vocab_size=256)
  kw = dict(tuning_seeds=(100,), data="x", steps=1, batch_size=1, seq_len=1)
  plain = attention_arms.tune_rate(cfg, grid=(1e-3, 2e-3, 4e-3, 8e-3), **kw)
  assert calls == [(1e-3, 2e-3, 4e-3, 8e-3)] and plain["lr"] == 8e-3
  assert set(plain["tuning"]) == {"seeds", "grid", "val_loss"}  # unchanged without extend
  calls.clear()
  once = attention_arms.tune_rate(cfg, grid=(1e-3, 2e-3, 4e-3, 8e-3), extend=1, **kw)
  assert calls == [(1e-3, 2e-3, 4e-3, 8e-3), (1.6e-2,)]
  assert once["lr"] == pytest.approx(1.6e-2) and once["tuning"]["at_edge"]
  assert once["tuning"]["grid"] == pytest.approx([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
  inside = attention_arms.tune_rate(cfg, grid=(4e-3, 8e-3, 1.6e-2, 3.2e-2), extend=1, **kw)
  assert inside["lr"] == pytest.approx(1.6e-2) and not inside["tuning"]["at_edge"]
  assert inside["tuning"]["diverged"] == [False, False, False, True]
  with pytest.raises(ValueError, match="increasing"):
    attention_arms.tune_rate(cfg, grid=(8e-3, 4e-3), extend=1, **kw)


def test_full_sizes_tune_and_quick_sizes_do_not():
  for mod in (psd_attention, sliding_window, dynamic_sparsity):
    assert len(mod.FULL.rates) >= 4 and len(mod.QUICK.rates) == 1


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
  """v2: registered at `micro-20` with batches of 8 × 256 (T = 256, as v1), `steps=None`
  training each size of the scale axis at 20 tokens per parameter; the grid follows the
  recipe's width rule with ratio 2; the context axis is dropped."""
  z = sliding_window.FULL
  assert (z.model, z.steps, z.batch_size, z.seq_len, z.extend) == ("micro-20", None, 8, 256, 1)
  for name in ("pico-20", "micro-20", "mini-20"):
    at = dataclasses.replace(z, model=name)
    assert 20 <= at.train_tokens() / axes.model_card(name)["params"] < 20.1, name
    assert at.budget_steps() == models.RECIPES[name].steps  # 8 × 256 = 16 × 128 tokens
    assert at.rates == pytest.approx(tuple(f * 3e-3 * 64 / models.config(name).d_model
                                           for f in sliding_window.RATE_FACTORS))
  assert np.diff(np.log(z.rates)) == pytest.approx([math.log(2)] * 3)
  assert sliding_window.QUICK.rates == (3e-3,) and sliding_window.QUICK.budget_steps() == 30
  with pytest.raises(ValueError, match="no recipe"):
    dataclasses.replace(z, model="nano")
  c = CLAIMS["sliding-window"]
  assert (c.version, c.bits_metric, c.context_lengths) == (2, ("full", "loss"), ())
  assert c.scale_models == ("pico-20", "micro-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20")
  assert axes.scale_models(c, quick=True) == ()  # quick runs stay one size
  assert "context axis" in c.revisions[0] and "dropped" in c.revisions[0]


def test_sliding_window_edge_control_blocks_the_headline():
  c = CLAIMS["sliding-window"]
  runs = {"local": {s: {"loss_ratio": 0.001, "rf_exact": 1.0, "rates_at_edge": 0.0}
                    for s in range(3)}}
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "supported"
  for s in range(3):
    runs["local"][s]["rates_at_edge"] = 1.0
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "inconclusive"


DS = dynamic_sparsity


def test_dynamic_sparsity_full_sizes_are_the_registered_ones():
  """v2: micro-20 at 20 tokens per parameter in both tasks (recall counts the tokens read),
  every arm tuned on 0.25..2 × the recipe's rate; v1's recall layout and key budget. v3: the
  edge rule up to three times, a flat arm not at an edge."""
  z = DS.FULL
  assert (z.recall_filler, z.recall_len, z.recall_batch, z.text) == (0, 17, 32, True)
  assert (z.recall_window, z.recall_block, z.recall_top_k) == (4, 2, 1)
  n = models.param_count("micro-20")
  assert (z.recall_train_steps, z.budget_steps()) == (1635, 409)
  assert z.recall_train_steps * 32 * 16 >= 20 * n > (z.recall_train_steps - 1) * 32 * 16
  assert z.train_tokens() >= 20 * n and (z.batch_size, z.seq_len) == (16, 128)
  assert z.rates == pytest.approx((1.5e-3, 3e-3, 6e-3, 1.2e-2))
  assert (z.extend, z.flat_nats) == (3, 0.01)  # v3: up to three extensions; flat arms
  assert DS.QUICK.rates == (3e-3,) and DS.QUICK.recall_train_steps == 30
  c = CLAIMS["dynamic-sparsity"]
  assert (c.version, c.context_lengths, c.at_length) == (3, (), DS.at_length)
  assert c.scale_models == ("pico-20", "micro-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20")
  assert axes.scale_models(c, quick=True) == ()
  pico = dataclasses.replace(z, model="pico-20")  # the scale axis keeps the ratio
  assert (pico.recall_train_steps, pico.budget_steps()) == (578, 145)
  assert pico.rates == pytest.approx((3e-3, 6e-3, 1.2e-2, 2.4e-2))
  for T in (16, 64, 256, 1024):
    assert DS.at_length(DS.FULL, T).recall_len == T + 1
  assert DS.at_length(DS.FULL, 16) == DS.FULL  # its own length: the runner reuses that run


def test_dynamic_sparsity_counts_a_flat_arm_at_no_edge(monkeypatch):
  """v3's rule: an arm at an edge counts unless its tuning losses span < `flat_nats` (it
  learned the same at every rate); v2's sizes (`flat_nats` 0) count every arm at an edge."""
  losses = {"full": [0.60, 0.65, 0.70, 0.80], "local": [1.386, 1.390, 1.391, 1.3885],
            "moba": [0.70, 0.55, 0.65, 0.90]}  # full and local at an edge, local flat

  def fake_tune(cfg, *, tuning_seeds, grid, extend, **kw):
    val = losses[cfg.attention if cfg.attention != "softmax" else "full"]
    i = int(np.argmin(val))
    return {"lr": grid[i], "tuning": {"seeds": list(tuning_seeds), "grid": list(grid),
                                      "val_loss": val, "diverged": [False] * 4,
                                      "at_edge": i in (0, len(val) - 1)}}

  monkeypatch.setattr(sparsity, "tune_rate", fake_tune)
  monkeypatch.setattr(sparsity, "train_arm", lambda cfg, seeds, **kw: {"lr": 0.0})
  cfgs = DS.recall_configs(DS.FULL)
  for z, want in ((DS.FULL, ["recall full"]),
                  (dataclasses.replace(DS.FULL, flat_nats=0.0), ["recall full", "recall local"])):
    out = sparsity.tune_and_train(cfgs, z, (0,), tune_seed=100, log=lambda *_: None,
                                  task="recall")
    assert out["at_edge"] == want
    assert [out["tuning"][a]["flat"] for a in cfgs] == [False, z.flat_nats > 0, False]


@pytest.mark.parametrize("T, batch, eval_batches", [(64, 8, 16), (256, 2, 64), (512, 1, 128),
                                                    (1024, 1, 128)])
def test_dynamic_sparsity_at_length_keeps_tokens_budget_and_answers_scored(T, batch, eval_batches):
  z = DS.at_length(DS.FULL, T)
  assert z.recall_len - 1 == T and z.recall_filler == T - 16
  assert (z.recall_batch, z.eval_batches) == (batch, eval_batches)
  if T <= 512:
    assert z.recall_batch * T == 32 * 16  # tokens read per step, as in FULL
  assert z.eval_batches * z.recall_batch == 4 * 32  # sequences (so answers) scored, as in FULL
  # The key budget is FULL's: the window is 4 and MoBA reads its own block plus one of 2.
  assert (z.recall_window, z.recall_block, z.recall_top_k) == (4, 2, 1)
  assert (z.recall_steps, z.rates, z.recall_pairs, z.recall_queries) == (
      1635, DS.FULL.rates, 4, 4)  # the steps, so the tokens read, are FULL's
  assert z.text is False  # only the primary question is measured against T
  assert DS.FULL.recall_filler == 0 and DS.FULL.recall_batch == 32  # FULL untouched
  assert attention_arms.config_at(T).max_len >= T


@pytest.mark.parametrize("T", [14, 15, 65, 0, 64.0, "64"])
def test_dynamic_sparsity_at_length_refuses_a_length_the_layout_cannot_take(T):
  with pytest.raises(ValueError, match="multiple of MoBA's blocks"):
    DS.at_length(DS.FULL, T)


def test_dynamic_sparsity_at_length_refuses_when_no_id_is_left_for_distractors():
  crowded = dataclasses.replace(DS.FULL, recall_keys=200, recall_values=46)
  assert DS.at_length(crowded, 16).recall_filler == 0  # no filler needed: fine
  with pytest.raises(ValueError, match="no id below SEP"):
    DS.at_length(crowded, 64)
  with pytest.raises(ValueError, match="recall_filler"):
    dataclasses.replace(DS.FULL, recall_filler=-1)
  assert DS.at_length(DS.FULL, 64).model == "micro-20"


def test_recall_without_filler_is_associative_recall_draw_for_draw():
  got = DS.recall_source(DS.FULL).batch(7, 3, 5, "val")
  want = data_lib.associative_recall(data_lib.batch_rng(7, 3, "val"), 5, 4, 4, 4, 4)
  np.testing.assert_array_equal(got.tokens, want.tokens)
  np.testing.assert_array_equal(got.weights, want.weights)


@pytest.mark.parametrize("T", [64, 256])
def test_long_recall_answers_are_their_keys_values_about_T_positions_back(T):
  """Read independently of the construction: each scored answer's query occurs exactly once
  earlier in its sequence, as a key (even position among the pairs) followed by the answer,
  and the distance from that key to the query lies in [T − 13, T − 1]."""
  z = DS.at_length(DS.FULL, T)
  src = DS.recall_source(z)
  b = src.batch(0, 5, 32)
  np.testing.assert_array_equal(b.tokens, src.batch(0, 5, 32).tokens)  # pure in (seed, step)
  assert not np.array_equal(b.tokens, src.batch(0, 6, 32).tokens)
  assert not np.array_equal(b.tokens, src.batch(0, 5, 32, "val").tokens)
  assert b.tokens.shape == (32, T + 1) and b.weights.shape == (32, T)
  distances = []
  for row, w in zip(b.tokens, b.weights, strict=True):
    scored = np.flatnonzero(w)  # weight column j scores token j + 1 (the answer after query j)
    assert len(scored) == 4 and (w[scored] == 1).all()
    assert row[scored[0] - 1] == data_lib.SEP and (row == data_lib.SEP).sum() == 1
    for j in scored:
      earlier = np.flatnonzero(row[:j] == row[j])
      assert len(earlier) == 1, "the query must match exactly one earlier token"
      p = earlier[0]
      assert p % 2 == 0 and p < 8 and row[p + 1] == row[j + 1]
      distances.append(j - p)
    sep = scored[0] - 1
    filler = row[8:sep]
    assert len(filler) == T - 16 and ((filler >= 8) & (filler < data_lib.SEP)).all()
  assert min(distances) >= T - 13 and max(distances) == T - 1


def test_context_lengths_of_the_quick_smoke_are_accepted():
  z = DS.at_length(DS.QUICK, 32)
  assert (z.recall_len, z.recall_batch, z.recall_steps) == (33, 8, DS.QUICK.recall_steps)


# ---------------------------------------------------- sliding-window, dynamic-sparsity: sizes

SCALE = ("mini", "micro", "small", "llama-micro", "llama-mini", "llama-small")
SW_ARMS = {"full": {}, "local": dict(attention="local", window=32, block_size=32)}


def _old_recall_configs(T, z):
  """The recall arms `recall_configs` built before the scale axis (`config_at` without a model)."""
  return {"full": attention_arms.config_at(T),
          "local": attention_arms.config_at(T, attention="local", window=z.recall_window,
                                            block_size=z.recall_block),
          "moba": attention_arms.config_at(T, attention="moba", block_size=z.recall_block,
                                           top_k_blocks=z.recall_top_k)}


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
  res = _committed("sliding-window")
  if res.get("version", 1) == DS.CLAIM.version:  # registered before its results land
    assert sliding_window.FULL.to_dict() == res["config"]["sizes"]
    assert sliding_window.arm_config("micro-20", "local", 256).to_dict() == res["config"][
        "setup"]["model_config"]


def test_dynamic_sparsity_registered_size_trains_the_model_of_the_committed_results():
  """QUICK's `mini` arms are the `tiny` preset they were before the scale axis; FULL's are the
  `micro-20` recipe's shape, and a result of this registration ran exactly FULL."""
  assert (DS.FULL.model, DS.QUICK.model) == ("micro-20", "mini")
  for z in (DS.QUICK, DS.at_length(DS.QUICK, 64)):
    T = z.recall_len - 1
    old, new = _old_recall_configs(T, z), DS.recall_configs(z)
    assert list(new) == list(old)
    for arm in old:
      assert dataclasses.asdict(new[arm]) == dataclasses.asdict(old[arm]), (arm, T)
    text = DS.text_configs(z)  # before: base_config(...), stdlib at T = 128
    assert dataclasses.asdict(text["full"]) == dataclasses.asdict(attention_arms.base_config())
    assert dataclasses.asdict(text["moba"]) == dataclasses.asdict(attention_arms.base_config(
        attention="moba", block_size=z.text_block, top_k_blocks=DS.TEXT_TOP_K))
  micro = models.RECIPES["micro-20"].cfg
  assert DS.recall_configs(DS.FULL)["full"] == micro == DS.text_configs(DS.FULL)["full"]
  res = _committed("dynamic-sparsity")
  if res.get("version", 1) == DS.CLAIM.version:  # registered before its results land
    assert DS.FULL.to_dict() == res["config"]["sizes"]
    assert micro.to_dict() == res["config"]["setup"]["model_config"]


def _llama_count_by_hand(d, L, H, K, F, V):
  """Parameters of a Llama-family model from the matrix catalog: no biases, no positions,
  untied output, RMSNorm scales only, SwiGLU's three matrices."""
  dh = d // H
  attn = d * H * dh + 2 * d * K * dh + H * dh * d
  return V * d + L * (attn + 3 * d * F + 2 * d) + d + d * V


# size: family, d, L, K, d_ff, positions
SHAPE = {"micro": ("gpt", 32, 2, 4, 128, "learned"), "small": ("gpt", 128, 4, 4, 512, "learned"),
         "llama-micro": ("llama", 32, 2, 2, 96, "rope"),
         "llama-small": ("llama", 128, 4, 2, 384, "rope")}


def _check_shape(cfg, size, T):
  """`cfg` has `size`'s declared shape, reading `T` tokens, and the parameters counted by hand."""
  fam, d, L, K, F, positions = SHAPE[size]
  max_len = max(256, T)
  assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff,
          cfg.positions, cfg.max_len) == (d, L, 4, K, d // 4, F, positions, max_len)
  assert (cfg.norm, cfg.activation) == (("layernorm", "gelu_tanh") if fam == "gpt"
                                        else ("rmsnorm", "swiglu"))
  shapes = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  n = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
  want = (_count_by_hand(d, L, 4, 256, max_len, tied=False) if fam == "gpt"
          else _llama_count_by_hand(d, L, 4, K, F, 256))
  assert n == want
  if max_len == 256:  # the card the scale axis reports is this shape's
    assert axes.model_card(size)["params"] == want


@pytest.mark.parametrize("size", list(SHAPE))
def test_sliding_window_other_sizes_build_the_declared_shape(size):
  for T in (256, 1024):  # the registered length and a context length past max_len
    for arm, over in SW_ARMS.items():
      cfg = sliding_window.arm_config(size, arm, T)
      _check_shape(cfg, size, T)
      assert (cfg.attention, cfg.window, cfg.block_size) == (
          over.get("attention", "softmax"), over.get("window"), over.get("block_size", 32))


@pytest.mark.parametrize("size", list(SHAPE))
def test_dynamic_sparsity_other_sizes_build_the_declared_shape(size):
  for z in (dataclasses.replace(DS.FULL, model=size),
            DS.at_length(dataclasses.replace(DS.FULL, model=size), 256)):
    rec = DS.recall_configs(z)
    for cfg in rec.values():
      _check_shape(cfg, size, z.recall_len - 1)
    assert (rec["full"].attention, rec["full"].window) == ("softmax", None)
    assert (rec["local"].attention, rec["local"].window, rec["local"].block_size) == (
        "local", 4, 2)
    assert (rec["moba"].attention, rec["moba"].block_size, rec["moba"].top_k_blocks) == (
        "moba", 2, 1)
  text = DS.text_configs(dataclasses.replace(DS.FULL, model=size))
  for cfg in text.values():
    _check_shape(cfg, size, 128)
  assert (text["moba"].attention, text["moba"].block_size, text["moba"].top_k_blocks) == (
      "moba", 16, 1)


def _init_params(cfg, seeds):
  return {s: transformer.init(cfg, jax.random.key(s)) for s in seeds}


def test_sliding_window_run_trains_both_arms_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `llama-micro-20`: both arms are tuned on seed 100 (the edge rule once) and train
  at its shape, its 20-tokens-per-parameter steps and their own rates; the reach (exactly
  L(w − 1) with RoPE and grouped keys) and the mass are measured on those models, the timing
  sweep times its heads, and an arm whose rate stays at an edge fails the edge control."""
  seen, timed = [], []

  def fake_tune(cfg, *, tuning_seeds, grid, extend, data, steps, batch_size, seq_len):
    assert tuning_seeds == (100,) and extend == 1
    seen.append(("tune", cfg, tuple(grid), steps, batch_size, seq_len))
    lr = grid[-1] if cfg.attention == "local" else grid[1]  # local's stays at the top edge
    return {"lr": lr, "tuning": {"seeds": [100], "grid": list(grid), "val_loss": [2.2] * 4,
                                 "diverged": [False] * 4, "at_edge": lr == grid[-1]}}

  def fake_train(cfg, seeds, *, learning_rates, data, steps, batch_size, seq_len):
    seen.append((data, cfg, tuple(seeds), tuple(learning_rates), steps))
    return {"per_seed": {s: {"loss": 2.0 + 0.1 * (cfg.attention == "local"), "diverged": 0.0}
                         for s in seeds}, "lr": learning_rates[0],
            "params": _init_params(cfg, seeds)}

  def fake_timing(ts, rounds, *, heads, d_head):
    timed.append((tuple(ts), rounds, heads, d_head))
    row = {"fwd": [1e-3] * len(ts), "bwd": [2e-3] * len(ts), "slope_fwd": 1.0,
           "slope_bwd": 1.0, "crossover_fwd": None, "crossover_bwd": None}
    return {"T": list(ts), "softmax": row, "local": row}

  monkeypatch.setattr(sliding_window, "tune_rate", fake_tune)
  monkeypatch.setattr(sliding_window, "train_arm", fake_train)
  monkeypatch.setattr(sliding_window, "timing", fake_timing)
  monkeypatch.setattr(sliding_window, "_figure", lambda *a: "timing.png")
  z = dataclasses.replace(sliding_window.FULL, model="llama-micro-20", rf_seq_len=64)
  out = sliding_window.run(Spec(quick=False, seeds=(0,), run_dir=str(tmp_path), sizes=z,
                                log=lambda *_: None))
  want = {a: sliding_window.arm_config("llama-micro-20", a, 256) for a in ("full", "local")}
  g, n = z.rates, models.param_count("llama-micro-20")
  assert g == pytest.approx((1.5e-3, 3e-3, 6e-3, 1.2e-2))
  steps = math.ceil(20 * n / (8 * 256))
  assert seen == [("tune", want["full"], g, steps, 8, 256),
                  ("stdlib", want["full"], (0,), (g[1],), steps),
                  ("tune", want["local"], g, steps, 8, 256),
                  ("stdlib", want["local"], (0,), (g[-1],), steps)]
  assert timed == [((256, 512, 1024, 2048), 3, 4, 8)]  # its heads: 4 of d / 4 = 8
  local, full = out["runs"]["local"][0], out["runs"]["full"][0]
  assert (local["rf_exact"], local["reach"], local["expected"]) == (1.0, 62.0, 62.0)
  assert local["loss_ratio"] == pytest.approx(0.05) and local["rates_at_edge"] == 1.0
  assert 0.0 < full["local_mass"] < 1.0
  assert out["setup"]["model_config"] == want["local"].to_dict()
  assert out["notes"][0].startswith("- Models: the `llama-micro-20` shape from scratch (llama: "
                                    "d 32, L 2, H 4 on 2 key/value heads, rope positions; "
                                    "41,120 parameters")
  assert f"{steps} AdamW steps of 8 × 256 tokens, 20.0 tokens per parameter" in out["notes"][0]
  assert "(4 heads × 8, blocks of 16)" in out["notes"][4]
  assert "Still at an edge: local, so the control fails." in out["notes"][-1]
  v, _, evals = rule.decide(CLAIMS["sliding-window"].thresholds, out["runs"], (0,))
  assert v == "inconclusive" and evals[0]["blocked"]


def test_sliding_window_run_refuses_a_shape_whose_reach_the_input_cannot_show(monkeypatch):
  monkeypatch.setattr(sliding_window, "tune_rate", lambda *a, **k: pytest.fail("trained"))
  z = dataclasses.replace(sliding_window.FULL, model="small", rf_seq_len=124)  # reach 4·31
  with pytest.raises(ValueError, match="rf_seq_len=124 must exceed the reach"):
    sliding_window.run(Spec(quick=False, seeds=(0,), run_dir="unused", sizes=z))
  for name in SCALE:  # every declared size's reach fits FULL's and QUICK's input
    L = models.config(name).n_layers
    assert sliding_window.FULL.rf_seq_len > L * 31 and sliding_window.QUICK.rf_seq_len > L * 31


def test_dynamic_sparsity_run_trains_every_arm_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `llama-micro`: every recall and stdlib arm is tuned apart on seed 100 (the edge
  rule once) and trains at its shape and its own rate; the keys read are counted on those
  models, and an arm whose rate stays at an edge counts in its task's edge control."""
  seen = []

  def fake_train(cfg, seeds, *, data, steps, batch_size, seq_len, learning_rates, **kw):
    task = "recall" if isinstance(data, DS.RecallSource) else "stdlib"
    seen.append((task, cfg, tuple(seeds), tuple(learning_rates), steps, seq_len))
    return {"per_seed": {s: {"loss": 2.0, "diverged": 0.0, "exact_match": 0.5,
                             "accuracy": 0.7 if cfg.attention != "local" else 0.3}
                         for s in seeds}, "lr": learning_rates[0],
            "params": _init_params(cfg, seeds)}

  def fake_tune(cfg, *, tuning_seeds, grid, extend, data, steps, batch_size, seq_len):
    assert "exact_match" not in locals() and tuning_seeds == (100,) and extend == 3
    task = "recall" if isinstance(data, DS.RecallSource) else "stdlib"
    seen.append(("tune " + task, cfg, tuple(grid), steps, seq_len))
    lr = grid[-1] if cfg.attention == "local" else grid[1]  # local's stays at the top edge
    val = [2.5, 2.4, 2.3, 2.2]  # not flat: an edge counts
    return {"lr": lr, "tuning": {"seeds": [100], "grid": list(grid), "val_loss": val,
                                 "diverged": [False] * 4, "at_edge": lr == grid[-1]}}

  monkeypatch.setattr(sparsity, "train_arm", fake_train)
  monkeypatch.setattr(sparsity, "tune_rate", fake_tune)
  z = dataclasses.replace(DS.FULL, model="llama-micro-20")
  out = DS.run(Spec(quick=False, seeds=(0, 1), run_dir=str(tmp_path), sizes=z,
                    log=lambda *_: None))
  rec, text = DS.recall_configs(z), DS.text_configs(z)
  g = z.rates
  assert g == pytest.approx((1.5e-3, 3e-3, 6e-3, 1.2e-2))
  rs, ts = z.recall_train_steps, z.budget_steps()
  n = models.param_count("llama-micro-20")
  assert (rs, ts) == (math.ceil(20 * n / (32 * 16)), math.ceil(20 * n / (16 * 128)))
  want = []
  for task, cfgs, steps, T in (("recall", rec, rs, 17), ("stdlib", text, ts, 128)):
    for arm, cfg in cfgs.items():
      lr = g[-1] if arm == "local" else g[1]
      want += [("tune " + task, cfg, g, steps, T), (task, cfg, (0, 1), (lr,), steps, T)]
  assert seen == want
  assert (out["setup"]["recall"]["at_edge"], out["setup"]["text"]["at_edge"]) == (
      ["recall local"], [])
  # Keys read per query, counted from the sown scores of the Llama models (GQA, RoPE): MoBA
  # its own block plus one past block of 2, the window min(t + 1, 4), full attention t + 1.
  t = np.arange(16)
  for s in (0, 1):
    moba = out["runs"]["moba"][s]
    assert moba["recall_keys"] == pytest.approx((t % 2 + 1 + 2 * (t >= 2)).mean())
    assert out["runs"]["local"][s]["recall_keys"] == pytest.approx(np.minimum(t + 1, 4).mean())
    assert out["runs"]["full"][s]["recall_keys"] == pytest.approx((t + 1).mean())
    assert moba["loss_ratio"] == pytest.approx(0.0) and 0.0 < moba["sparsity"] < 1.0
    assert (moba["recall_rates_at_edge"], moba["text_rates_at_edge"]) == (1.0, 0.0)
  assert out["setup"]["model_config"] == rec["full"].to_dict()
  assert out["setup"]["model_config"]["positions"] == "rope"
  assert out["notes"][0].startswith("- Models: the `llama-micro-20` shape from scratch (llama: d "
                                    "32, L 2, H 4 on 2 key/value heads, rope positions;")
  assert "20.0 tokens read and 5.0 scored answers per parameter" in out["notes"][1]
  assert "Still at an edge: recall local." in out["notes"][-1]
  v, _, evals = rule.decide(CLAIMS["dynamic-sparsity"].thresholds, out["runs"], (0, 1))
  assert v == "inconclusive" and [e["blocked"] for e in evals][:2] == [True, True]


# ------------------------------------------------------------------ psd-attention theorem


def _psd(K, rel=1e-10):
  lam = np.linalg.eigvalsh((K + K.T) / 2)
  return np.allclose(K, K.T, rtol=1e-12, atol=0) and lam.min() >= -rel * np.abs(lam).max()


@pytest.mark.parametrize("T, d, dh", [(12, 16, 4), (24, 32, 8)])
def test_tied_rbf_and_linear_kernels_are_psd_and_untied_softmax_is_not_symmetric(T, d, dh):
  """`psd-attention` theorem, in float64: with K = Q the Gaussian kernel and Φ(Q)Φ(Q)ᵀ
  (Φ = elu + 1) are PSD for any input; untied, the softmax kernel is not even symmetric."""
  elu1 = lambda x: np.where(x > 0, x + 1, np.exp(x))  # noqa: E731
  for _ in range(5):
    X = RNG.standard_normal((T, d))
    W, W_k = (RNG.standard_normal((d, dh)) / np.sqrt(d) for _ in range(2))
    Q = X @ W
    sq = (Q * Q).sum(-1)
    assert _psd(np.exp(-(sq[:, None] + sq[None, :] - 2 * Q @ Q.T) / (2 * np.sqrt(dh))))
    phi = elu1(Q * dh**-0.25)
    assert _psd(phi @ phi.T)
    untied = np.exp(Q @ (X @ W_k).T / np.sqrt(dh))
    assert np.abs(untied - untied.T).max() > 1e-3 * np.abs(untied).max()


@pytest.mark.parametrize("attention", ["softmax", "rbf", "linear"])
def test_the_library_tied_model_forms_psd_kernels(attention):
  """The kernels the library's tied model forms (its own score functions on its own q, k)."""
  cfg = TINY.replace(qk_tied=True, attention=attention, d_model=32, n_heads=2)
  params = transformer.init(cfg, jax.random.key(7))
  tokens = np.asarray(jax.random.randint(jax.random.key(8), (1, 24), 0, 64))
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                 mutable=["intermediates"])
  inter = state["intermediates"]["blocks"]["attn"]
  q, k = (np.asarray(inter[n][0]) for n in ("q", "k"))  # (L, B, T, H, dh)
  np.testing.assert_array_equal(q, k)  # tied: K = X W_Q exactly
  dh = q.shape[-1]
  everything = jnp.ones((1, 24, 24), bool)  # the bidirectional kernel matrix
  score_fn = {"softmax": softmax_attention, "rbf": rbf_attention,
              "linear": linear_quadratic}[attention]
  for layer in range(q.shape[0]):
    qa = jnp.asarray(q[layer])
    scores = score_fn(qa, qa, qa, everything, scale=dh**-0.5)[1]["scores"]
    kernel = np.exp(np.asarray(scores, np.float64))[0]  # (H, T, S)
    for K in kernel:
      lam = np.linalg.eigvalsh((K + K.T) / 2)
      assert np.abs(K - K.T).max() <= 1e-5 * np.abs(K).max()
      assert lam.min() >= -1e-5 * lam.max()


def test_price_is_paired_by_seed():
  arm = {0: {"loss": 2.2, "exact_match": 0.5}, 1: {"loss": 3.3, "exact_match": 1.0}}
  base = {0: {"loss": 2.0, "exact_match": 0.75}, 1: {"loss": 3.0, "exact_match": 0.5}}
  p = psd_attention.price(arm, base)
  assert p[0]["loss_ratio"] == pytest.approx(0.1) and p[1]["loss_ratio"] == pytest.approx(0.1)
  assert p[0]["em_diff"] == pytest.approx(-0.25) and p[1]["em_diff"] == pytest.approx(0.5)


def test_psd_primary_is_the_variant_chosen_on_the_tuning_seed():
  assert psd_attention.choose({"softmax-tied": 2.1, "rbf-tied": 2.3, "linear-tied": 2.05}) \
      == "linear-tied"
  assert psd_attention.choose({"softmax-tied": math.nan, "rbf-tied": 2.3,
                               "linear-tied": None}) == "rbf-tied"
  assert psd_attention.choose({a: None for a in psd_attention.TIED}) == "softmax-tied"
  c = CLAIMS["psd-attention"]
  assert [(th.arm, th.control) for th in c.thresholds] == [(psd_attention.CHOSEN, False),
                                                           (psd_attention.CHOSEN, True)]
  # The copy control blocks only its own extension, never the headline.
  runs = {psd_attention.CHOSEN: {s: {"loss_ratio": 0.001, "em_diff": 0.0, "rates_at_edge": 0.0}
                                 for s in range(3)},
          "softmax": {s: {"exact_match": 0.0} for s in range(3)},
          **{a: {s: {"loss_ratio": 0.001} for s in range(3)} for a in psd_attention.TIED}}
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "supported"
  copy = next(e for e in c.extensions if "copy" in e.name)
  assert rule.decide(copy.thresholds, runs, (0, 1, 2))[0] == "inconclusive"


# ------------------------------------------------------------------ psd-attention: sizes

def _committed(claim_id):
  return jsonio.load_strict(os.path.join(folders.RESULTS_DIR, claim_id, "results.json"))


def test_psd_trains_every_size_at_20_tokens_per_parameter():
  """v2: registered at `micro-20`; `steps=None` trains each size of the scale axis (the
  runner replaces `model`) for its recipe's steps, so every size sees 20 tokens per parameter;
  the rate grid scales with the recipe's width rule and keeps ratio 2."""
  z = psd_attention.FULL
  assert (z.model, z.steps, z.batch_size, z.seq_len, z.extend) == ("micro-20", None, 16, 128, 1)
  for name in models.TRAINED["gpt"]:
    at = dataclasses.replace(z, model=name)
    tpp = at.train_tokens() / axes.model_card(name)["params"]
    assert 20 <= tpp < 20.1, name
    assert at.train_steps == models.RECIPES[name].steps
    assert at.rates == pytest.approx(tuple(f * 3e-3 * 64 / models.config(name).d_model
                                           for f in psd_attention.RATE_FACTORS))
  assert np.diff(np.log(z.rates)) == pytest.approx([math.log(2)] * 3)
  assert psd_attention.QUICK.rates == (3e-3,) and psd_attention.QUICK.train_steps == 30
  with pytest.raises(ValueError, match="steps=None"):
    dataclasses.replace(z, batch_size=8)
  with pytest.raises(ValueError, match="no recipe"):
    dataclasses.replace(z, model="nano")
  c = CLAIMS["psd-attention"]
  assert c.version == 2 and c.bits_metric == ("softmax", "loss")
  for arm, over in psd_attention.ARMS.items():  # quick keeps the `tiny` preset v1 trained
    assert psd_attention.arm_config("mini", arm) == transformer.preset("tiny", **over)


def test_psd_edge_control_blocks_the_headline():
  c = CLAIMS["psd-attention"]
  runs = {psd_attention.CHOSEN: {s: {"loss_ratio": 0.001, "rates_at_edge": 0.0}
                                 for s in range(3)}}
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "supported"
  for s in range(3):
    runs[psd_attention.CHOSEN][s]["rates_at_edge"] = 1.0
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "inconclusive"


def test_psd_scale_axis_is_the_gpt_family_with_the_registered_size_first():
  c = CLAIMS["psd-attention"]
  assert c.scale_models == ("pico-20", "micro-20", "mini-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20", "mini-20")
  assert axes.scale_models(c, quick=True) == ()  # quick runs stay one size
  assert "Llama family is left out" in " ".join(psd_attention.__doc__.split())
  with pytest.raises(ValueError, match="qk_tied"):  # why: tied keys refuse K < H
    models.RECIPES["llama-mini-20"].cfg.replace(qk_tied=True)


def _count_by_hand(d, L, H, V, max_len, tied):
  """Parameters of a GPT-family model from the matrix catalog; tied: no `w_k`, no `b_k`."""
  dh, F = d // H, 4 * d
  attn = (3 - tied) * (d * H * dh + H * dh) + H * dh * d + d
  ffn = 2 * d * F + F + d
  return V * d + max_len * d + L * (attn + ffn + 2 * 2 * d) + 2 * d


@pytest.mark.parametrize("size, d, L", [("pico-20", 16, 2), ("mini-20", 64, 2)])
def test_psd_other_sizes_build_the_declared_shape(size, d, L):
  for arm, over in psd_attention.ARMS.items():
    cfg = psd_attention.arm_config(size, arm)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.max_len) == (
        d, L, 4, d // 4, 4 * d, 256)
    assert (cfg.attention, cfg.qk_tied) == (over.get("attention", "softmax"),
                                            over.get("qk_tied", False))
    shapes = jax.eval_shape(lambda cfg=cfg: transformer.init(cfg, jax.random.key(0)))
    n = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    assert n == _count_by_hand(d, L, 4, 256, 256, tied=cfg.qk_tied), arm
  assert axes.model_card(size)["params"] == _count_by_hand(d, L, 4, 256, 256, tied=False)


def test_psd_run_trains_every_arm_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `mini-20`: every tuning and training call gets `mini-20`'s shape with the arm's
  attention, its recipe's steps and rate grid, and the setup records that shape."""
  seen = []

  def fake_tune(cfg, **kw):
    seen.append(("tune", cfg))
    assert (kw["steps"], kw["extend"]) == (1298, 1)
    assert kw["grid"] == pytest.approx((7.5e-4, 1.5e-3, 3e-3, 6e-3))
    loss = {("softmax", False): 2.0, ("softmax", True): 2.3, ("rbf", True): 2.1,
            ("linear", True): 2.2}[cfg.attention, cfg.qk_tied]
    return {"lr": 1e-3, "tuning": {"seeds": [100], "grid": list(kw["grid"]), "val_loss": [loss],
                                   "at_edge": cfg.attention == "linear"}}

  def fake_train(cfg, seeds, *, data, **kw):
    assert kw["steps"] == (1298 if data == "stdlib" else psd_attention.COPY_STEPS)
    seen.append((data, cfg))
    return {"per_seed": {s: {"loss": 2.0 + 0.1 * cfg.qk_tied, "diverged": 0.0,
                             "exact_match": 0.9} for s in seeds}}

  monkeypatch.setattr(psd_attention, "tune_rate", fake_tune)
  monkeypatch.setattr(psd_attention, "train_arm", fake_train)
  z = dataclasses.replace(psd_attention.FULL, model="mini-20")
  out = psd_attention.run(Spec(quick=False, seeds=(0, 1), run_dir=str(tmp_path), sizes=z,
                               log=lambda *_: None))
  want = {a: psd_attention.arm_config("mini-20", a) for a in psd_attention.ARMS}
  assert [cfg for kind, cfg in seen if kind == "tune"] == list(want.values())
  # rbf-tied has the lowest tied tuning loss, so it is the variant trained beside softmax.
  assert [(kind, cfg) for kind, cfg in seen if kind != "tune"] == [
      ("stdlib", want["softmax"]), ("task:copy", want["softmax"]),
      ("stdlib", want["rbf-tied"]), ("task:copy", want["rbf-tied"])]
  assert out["setup"]["chosen"] == "rbf-tied"
  assert out["setup"]["model_config"]["d_model"] == 64
  assert out["runs"][psd_attention.CHOSEN][0]["loss_ratio"] == pytest.approx(0.05)
  # linear-tied sat at an edge: not the chosen arm, yet it fails the edge control.
  assert out["runs"][psd_attention.CHOSEN][0]["rates_at_edge"] == 1.0
  assert "Still at an edge: linear-tied" in out["notes"][-2]
  assert "`mini-20` shape from scratch (d 64, L 2, H 4, 132,864 parameters untied)" in out[
      "notes"][-1]


# ------------------------------------------------------------------ dynamic-sparsity


def _recall_runs(full, local, moba, at_edge=0.0):
  return {"full": {s: {"recall_acc": full[s]} for s in range(3)},
          "local": {s: {"recall_acc": local[s]} for s in range(3)},
          "moba": {s: {"recall_acc": moba[s], "recall_rates_at_edge": at_edge}
                   for s in range(3)}}


def test_a_failed_recall_control_blocks_only_what_needs_it():
  th = CLAIMS["dynamic-sparsity"].thresholds
  ok = _recall_runs((0.95, 0.9, 0.92), (0.1, 0.05, 0.12), (0.94, 0.9, 0.91))
  v, _, evals = rule.decide(th, ok, (0, 1, 2))
  assert v == "supported" and not any(e["blocked"] for e in evals)
  # The window does not fail: "adapts" cannot be read, "reads what full reads" still can.
  easy = _recall_runs((0.95, 0.9, 0.92), (0.9, 0.85, 0.9), (0.5, 0.45, 0.55))
  v, why, evals = rule.decide(th, easy, (0, 1, 2))
  assert [e["blocked"] for e in evals] == [True, False, False, False, False]
  assert v == "refuted" and "reads what full reads" in why
  # Full attention does not learn: both comparisons are blocked.
  unlearned = _recall_runs((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
  v, _, evals = rule.decide(th, unlearned, (0, 1, 2))
  assert v == "inconclusive" and [e["blocked"] for e in evals] == [True, True, False, False,
                                                                    False]
  # A recall arm's rate still at an edge of its grid (v2): both comparisons are blocked.
  edge = _recall_runs((0.95, 0.9, 0.92), (0.1, 0.05, 0.12), (0.94, 0.9, 0.91), at_edge=1.0)
  v, _, evals = rule.decide(th, edge, (0, 1, 2))
  assert v == "inconclusive" and [e["blocked"] for e in evals] == [True, True, False, False,
                                                                    False]
  # The stdlib half is an extension with its own edge control; no recall control is in it.
  text = CLAIMS["dynamic-sparsity"].extensions[0].thresholds
  assert [t.name for t in text if t.control] == [dynamic_sparsity.TEXT_EDGE]


def test_dynamic_sparsity_budget_is_equal_and_labels_come_from_sizes():
  for z in (dynamic_sparsity.QUICK, dynamic_sparsity.FULL):
    assert z.recall_window == z.recall_block * (1 + z.recall_top_k)
    assert z.recall_len == 2 * z.recall_pairs + 1 + 2 * z.recall_queries
    assert z.recall_len > z.recall_window  # some keys lie beyond the window
  assert f"budget {dynamic_sparsity.FULL.recall_window} keys" in CLAIMS[
      "dynamic-sparsity"].hypothesis


def test_keys_read_counts_moba_selection_and_causal_full():
  tokens = np.asarray(jax.random.randint(jax.random.key(4), (1, 16), 0, 64))
  full = sparsity.keys_read(transformer.init(TINY, jax.random.key(0)), TINY, tokens)
  assert full["keys_read"] == pytest.approx(8.5) and full["sparsity"] == pytest.approx(0.0)
  cfg = TINY.replace(attention="moba", block_size=4, top_k_blocks=1)
  got = sparsity.keys_read(transformer.init(cfg, jax.random.key(0)), cfg, tokens)
  # Own block (t mod 4 + 1 keys) plus one whole past block from the second block on.
  t = np.arange(16)
  want = (t % 4 + 1 + 4 * (t >= 4)).mean()
  assert got["keys_read"] == pytest.approx(want)
  assert got["sparsity"] == pytest.approx(1 - want / 8.5)


@pytest.mark.parametrize("z", [dynamic_sparsity.QUICK, dynamic_sparsity.FULL,
                               dynamic_sparsity.at_length(dynamic_sparsity.FULL, 64)])
def test_recall_source_is_pure_and_answers_are_the_values_of_their_keys(z):
  src = dynamic_sparsity.recall_source(z)
  a, b = src.batch(0, 3, 4), src.batch(0, 3, 4)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert a.tokens.shape == (4, z.recall_len)  # the model reads all but the last
  n = z.recall_pairs
  for row, wrow in zip(a.tokens, a.weights, strict=True):
    assert wrow.sum() == z.recall_queries
    for col in np.flatnonzero(wrow):
      query, answer = row[col], row[col + 1]
      where = np.flatnonzero(row[:2 * n:2] == query)
      assert len(where) == 1 and row[2 * where[0] + 1] == answer


def test_val_loss_and_exact_match_against_numpy():
  src = data_lib.source("task:copy", 33)
  cfg = TINY.replace(vocab_size=data_lib.VOCAB_SIZE, max_len=40)
  params = transformer.init(cfg, jax.random.key(5))
  got = sparsity.val_loss(params, cfg, src, 0, n_batches=2, batch_size=3)
  want = []
  for step in range(2):
    b = src.batch(0, step, 3, "val")
    logits = np.asarray(transformer.Transformer(cfg).apply({"params": params}, b.tokens[:, :-1]),
                        np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, b.tokens[:, 1:, None], -1)[..., 0]
    want.append((nll * b.weights).sum() / b.weights.sum())
  assert got == pytest.approx(np.mean(want), rel=1e-5)
  em = attention_arms.exact_match_of(params, cfg, src, 0, n_batches=1, batch_size=3)
  assert em == 0.0  # an untrained model copies nothing


def test_sizes_are_frozen_dataclasses():
  for mod in (psd_attention, sliding_window, dynamic_sparsity):
    with pytest.raises(dataclasses.FrozenInstanceError):
      mod.FULL.learning_rates = (1.0,)
