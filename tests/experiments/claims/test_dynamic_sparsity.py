"""The dynamic-sparsity claim: the recall task at every length, sizes, the run, the recall control
and what it measures."""

import dataclasses
import math

import jax
import numpy as np
import pytest

import transformer
from experiments import data as data_lib
from experiments import models
from experiments.claims import CLAIMS, dynamic_sparsity
from experiments.lab import attention_arms, sparsity
from experiments.verdict import Spec
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare import axes
from experiments.verdict.declare.clause import conjunction
from tests.experiments.claims.attention_helpers import (
  SHAPE,
  TINY,
  check_shape,
  committed,
  init_params,
)

DS = dynamic_sparsity


def test_dynamic_sparsity_full_sizes_are_the_registered_ones():
  """v2: micro-20 at 20 tokens per parameter in both tasks (recall counts the tokens read),
  every arm tuned on 0.25..2 × the recipe's rate; v1's recall layout and key budget. v3: the
  edge rule up to three times, a flat arm not at an edge. v4: read on test, mini-20 on the
  scale axis."""
  z = DS.FULL
  assert (z.recall_filler, z.recall_len, z.recall_batch, z.text) == (0, 17, 32, True)
  assert (z.recall_window, z.recall_block, z.recall_top_k) == (4, 2, 1)
  n = models.param_count("micro-20")
  assert (z.recall_train_steps, z.budget_steps()) == (1635, 409)
  assert z.recall_train_steps * 32 * 16 >= 20 * n > (z.recall_train_steps - 1) * 32 * 16
  assert z.train_tokens() >= 20 * n and (z.batch_size, z.seq_len) == (16, 128)
  assert z.rates == pytest.approx((1.5e-3, 3e-3, 6e-3, 1.2e-2))
  assert (z.extend, z.flat_nats, z.split) == (3, 0.01, "test")  # v3's rules; v4: test
  assert DS.QUICK.rates == (3e-3,) and DS.QUICK.recall_train_steps == 30
  c = CLAIMS["dynamic-sparsity"]
  assert (c.version, c.axis("context").values, c.axis("context").at) == (4, (), DS.at_length)
  assert c.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20", "mini-20")
  assert axes.scale_models(c, quick=True) == ()
  pico = dataclasses.replace(z, model="pico-20")  # the scale axis keeps the ratio
  assert (pico.recall_train_steps, pico.budget_steps()) == (578, 145)
  assert pico.rates == pytest.approx((3e-3, 6e-3, 1.2e-2, 2.4e-2))
  mini = dataclasses.replace(z, model="mini-20")  # the grids the v4 docstring states
  assert mini.rates == pytest.approx((7.5e-4, 1.5e-3, 3e-3, 6e-3))
  assert mini.budget_steps() == models.RECIPES["mini-20"].steps
  assert mini.recall_train_steps * 32 * 16 >= 20 * models.param_count("mini-20")
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
    return {"learning_rate": grid[i], "index": i, "seeds": list(tuning_seeds),
            "grid": list(grid), "losses": val, "excluded": [False] * 4,
            "at_edge": i in (0, len(val) - 1), "flat": False}

  monkeypatch.setattr(sparsity, "tune_rate", fake_tune)
  monkeypatch.setattr(sparsity, "train_arm", lambda cfg, seeds, **kw: {"lr": 0.0})
  cfgs = DS.recall_configs(DS.FULL)
  for z, want in ((DS.FULL, ["recall full"]),
                  (dataclasses.replace(DS.FULL, flat_nats=0.0), ["recall full", "recall local"])):
    out = sparsity.tune_and_train(cfgs, z, (0,), tuning_seeds=(110, 111), log=lambda *_: None,
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


def _old_recall_configs(T, z):
  """The recall arms `recall_configs` built before the scale axis (`config_at` without a model)."""
  return {"full": attention_arms.config_at(T),
          "local": attention_arms.config_at(T, attention="local", window=z.recall_window,
                                            block_size=z.recall_block),
          "moba": attention_arms.config_at(T, attention="moba", block_size=z.recall_block,
                                           top_k_blocks=z.recall_top_k)}


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
  res = committed("dynamic-sparsity")
  if res.get("version", 1) == DS.CLAIM.version:  # registered before its results land
    assert DS.FULL.to_dict() == res["config"]["sizes"]
    assert micro.to_dict() == res["config"]["setup"]["model_config"]


@pytest.mark.parametrize("size", list(SHAPE))
def test_dynamic_sparsity_other_sizes_build_the_declared_shape(size):
  for z in (dataclasses.replace(DS.FULL, model=size),
            DS.at_length(dataclasses.replace(DS.FULL, model=size), 256)):
    rec = DS.recall_configs(z)
    for cfg in rec.values():
      check_shape(cfg, size, z.recall_len - 1)
    assert (rec["full"].attention, rec["full"].window) == ("softmax", None)
    assert (rec["local"].attention, rec["local"].window, rec["local"].block_size) == (
        "local", 4, 2)
    assert (rec["moba"].attention, rec["moba"].block_size, rec["moba"].top_k_blocks) == (
        "moba", 2, 1)
  text = DS.text_configs(dataclasses.replace(DS.FULL, model=size))
  for cfg in text.values():
    check_shape(cfg, size, 128)
  assert (text["moba"].attention, text["moba"].block_size, text["moba"].top_k_blocks) == (
      "moba", 16, 1)


def test_dynamic_sparsity_run_trains_every_arm_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `llama-micro`: every recall and stdlib arm is tuned apart on seeds 110, 111 (on
  `val`; the edge rule up to three times) and trains at its shape and its own rate, read on
  `test`; the keys read are counted on those models, and an arm whose rate stays at an edge
  counts in its task's edge control."""
  seen = []

  def fake_train(cfg, seeds, *, data, steps, batch_size, seq_len, learning_rates, **kw):
    assert kw["split"] == "test"
    task = "recall" if isinstance(data, sparsity.RecallSource) else "stdlib"
    seen.append((task, cfg, tuple(seeds), tuple(learning_rates), steps, seq_len))
    return {"per_seed": {s: {"loss": 2.0, "diverged": 0.0, "exact_match": 0.5,
                             "accuracy": 0.7 if cfg.attention != "local" else 0.3}
                         for s in seeds}, "lr": learning_rates[0],
            "params": init_params(cfg, seeds)}

  def fake_tune(cfg, *, tuning_seeds, grid, extend, data, steps, batch_size, seq_len):
    assert "exact_match" not in locals() and tuning_seeds == (110, 111) and extend == 3
    task = "recall" if isinstance(data, sparsity.RecallSource) else "stdlib"
    seen.append(("tune " + task, cfg, tuple(grid), steps, seq_len))
    lr = grid[-1] if cfg.attention == "local" else grid[1]  # local's stays at the top edge
    val = [2.5, 2.4, 2.3, 2.2]  # not flat: an edge counts
    return {"learning_rate": lr, "index": list(grid).index(lr), "seeds": [110, 111],
            "grid": list(grid), "losses": val, "excluded": [False] * 4,
            "at_edge": lr == grid[-1], "flat": False}

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
  assert out["notes"][0].startswith("Models: the `llama-micro-20` shape from scratch (llama: d "
                                    "32, L 2, H 4 on 2 key/value heads, rope positions;")
  assert "20.0 tokens read and 5.0 scored answers per parameter" in out["notes"][1]
  assert "Still at an edge: recall local." in out["notes"][-1]
  v, _, evals = rule.decide(CLAIMS["dynamic-sparsity"].thresholds, out["runs"], (0, 1))
  assert v == "inconclusive" and [e["blocked"] for e in evals][:2] == [True, True]
  assert out["split"] == "test"


SEEDS = (10, 11, 12, 13, 14)


def _v4_runs(moba, local, full=(0.7, 0.68, 0.69, 0.71, 0.7), edge=0.0):
  return {"full": {s: {"recall_acc": f} for s, f in zip(SEEDS, full, strict=True)},
          "local": {s: {"recall_acc": v} for s, v in zip(SEEDS, local, strict=True)},
          "moba": {s: {"recall_acc": m, "recall_rates_at_edge": edge}
                   for s, m in zip(SEEDS, moba, strict=True)}}


LOW = (0.35, 0.33, 0.36, 0.34, 0.35)  # the window fails recall (full − 35 points)


@pytest.mark.parametrize("runs, want", [
    (_v4_runs((0.68, 0.66, 0.7, 0.69, 0.67), LOW), ("supported", "supported")),
    (_v4_runs((0.4, 0.38, 0.39, 0.41, 0.4), LOW), ("refuted", "refuted")),
    (_v4_runs((0.6, 0.5, 0.55, 0.65, 0.5), LOW), ("supported", "inconclusive")),
    (_v4_runs((0.68, 0.66, 0.7, 0.69, 0.67), LOW, edge=1.0), ("inconclusive", "inconclusive")),
    (_v4_runs((0.68, 0.66, 0.7, 0.69, 0.67), (0.66, 0.67, 0.68, 0.7, 0.69)),
     ("inconclusive", "supported")),  # the window does not fail: ① cannot be read
])
def test_dynamic_sparsity_v4_clauses_decide_synthetic_runs_as_registered(runs, want):
  """① adapts (moba − local beyond +10 points, needs the window to fail) and ② keeps what full
  reads (moba − full above −10), each on its own thresholds and controls; the headline is their
  conjunction."""
  c = DS.CLAIM
  assert [cl.thresholds for cl in c.clauses] == [(DS.ADAPTS,), (DS.READS,)]
  assert not any(cl.proof for cl in c.clauses)
  parts = rule.clause_verdicts(c, runs, SEEDS, indicative=False)
  assert tuple(p["verdict"] for p in parts) == want
  assert rule.verdict(c, runs, SEEDS, indicative=False)[0] == conjunction(want)


def test_dynamic_sparsity_v4_states_its_flat_arm_rule_before_the_run():
  """Its seeds are checked with every claim's (`test_history.py`); here: v4's revision states
  the flat-arm rule, v3's re-registration after a result, before any run of v4."""
  why = DS.CLAIM.revisions[-1].why
  assert "flat" in why and "before any run of v4" in why


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
