"""Measurement functions of the claims psd-attention, sliding-window and dynamic-sparsity."""

import jax
import numpy as np
import pytest

import transformer
from experiments import data as data_lib
from experiments.claims import CLAIMS, dynamic_sparsity, psd_attention, sliding_window
from experiments.lab import attention_arms

TINY = transformer.Config(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_len=32,
                          positions="learned", init_std=0.1)


def test_claims_registered_and_built():
  for cid in ("psd-attention", "sliding-window", "dynamic-sparsity"):
    assert CLAIMS[cid].built and CLAIMS[cid].anchors


def test_price_is_paired_by_seed():
  arm = {0: {"loss": 2.2, "exact_match": 0.5}, 1: {"loss": 3.3, "exact_match": 1.0}}
  base = {0: {"loss": 2.0, "exact_match": 0.75}, 1: {"loss": 3.0, "exact_match": 0.5}}
  p = psd_attention.price(arm, base)
  assert p[0]["loss_ratio"] == pytest.approx(0.1) and p[1]["loss_ratio"] == pytest.approx(0.1)
  assert p[0]["em_diff"] == pytest.approx(-0.25) and p[1]["em_diff"] == pytest.approx(0.5)


@pytest.mark.parametrize("window", [3, 5])
def test_receptive_field_measures_layers_times_window_minus_one(window):
  cfg = TINY.replace(attention="local", window=window, block_size=4, positions="none")
  params = transformer.init(cfg, jax.random.key(0))
  rf = sliding_window.receptive_field(params, cfg, 16, jax.random.key(1))
  assert rf["expected"] == 2 * (window - 1) and rf["reach"] == rf["expected"]
  assert rf["rf_exact"] == 1.0


def test_receptive_field_catches_attention_that_is_not_a_window():
  # The dense masked window reaches exactly L(w−1) too; full attention reaches everything.
  cfg = TINY.replace(positions="none")
  params = transformer.init(cfg, jax.random.key(0))
  dense = sliding_window.receptive_field(params, cfg.replace(window=3), 16, jax.random.key(1))
  assert dense["rf_exact"] == 1.0 and dense["reach"] == 4.0
  full = sliding_window.receptive_field(params, cfg, 16, jax.random.key(1), window=3)
  assert full["rf_exact"] == 0.0 and full["reach"] == 15.0


def test_window_mass_against_numpy():
  params = transformer.init(TINY, jax.random.key(2))
  tokens = np.asarray(jax.random.randint(jax.random.key(3), (2, 20), 0, 64))
  got = sliding_window.window_mass(params, TINY, tokens, 4)
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


def test_keys_read_counts_moba_selection_and_causal_full():
  tokens = np.asarray(jax.random.randint(jax.random.key(4), (1, 16), 0, 64))
  full = dynamic_sparsity.keys_read(transformer.init(TINY, jax.random.key(0)), TINY, tokens)
  assert full["keys_read"] == pytest.approx(8.5) and full["sparsity"] == pytest.approx(0.0)
  cfg = TINY.replace(attention="moba", block_size=4, top_k_blocks=1)
  got = dynamic_sparsity.keys_read(transformer.init(cfg, jax.random.key(0)), cfg, tokens)
  # Own block (t mod 4 + 1 keys) plus one whole past block from the second block on.
  t = np.arange(16)
  want = (t % 4 + 1 + 4 * (t >= 4)).mean()
  assert got["keys_read"] == pytest.approx(want)
  assert got["sparsity"] == pytest.approx(1 - want / 8.5)


def test_recall_source_is_pure_and_far():
  src = dynamic_sparsity.RecallSource()
  a, b = src.batch(0, 3, 4), src.batch(0, 3, 4)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert a.tokens.shape == (4, 2 * dynamic_sparsity.N_PAIRS + 1 + 2 * dynamic_sparsity.N_QUERIES)
  # Each scored answer follows its query, whose key sits somewhere in the context.
  for row, wrow in zip(a.tokens, a.weights, strict=True):
    for col in np.flatnonzero(wrow):
      query, answer = row[col], row[col + 1]
      where = np.flatnonzero(row[:2 * dynamic_sparsity.N_PAIRS:2] == query)
      assert len(where) == 1 and row[2 * where[0] + 1] == answer


def test_val_loss_and_exact_match_against_numpy():
  params = transformer.init(TINY, jax.random.key(5))
  src = data_lib.source("task:copy", 33)
  cfg = TINY.replace(vocab_size=data_lib.VOCAB_SIZE, max_len=40)
  params = transformer.init(cfg, jax.random.key(5))
  got = dynamic_sparsity.val_loss(params, cfg, src, 0, n_batches=2, batch_size=3)
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
