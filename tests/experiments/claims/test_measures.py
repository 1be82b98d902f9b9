"""What the first two claims measure, against independent float64 references; the model cache."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.claims import causal_mask, softmax_kernel
from experiments.models import trained
from experiments.train import sweep


def _masked_scores(s_TT):
  T = s_TT.shape[-1]
  return np.where(np.tril(np.ones((T, T), bool)), s_TT, np.finfo(np.float32).min).astype(
      np.float32)


def _softmax64(s_TT):
  T = s_TT.shape[-1]
  s = np.where(np.tril(np.ones((T, T), bool)), s_TT.astype(np.float64), -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("gap, deficient, zero_diag", [(0.0, False, False), (60.0, True, False),
                                                       (120.0, True, True)])
def test_head_ranks_exact_vs_float32(gap, deficient, zero_diag):
  # Every query after the first puts score `gap` on key 0 and 0 elsewhere: A_ii ≈ e^-gap.
  T = 8
  s = np.random.default_rng(0).normal(size=(T, T)) * 0.1
  s[1:, 0] += gap
  scores = _masked_scores(s)
  weights = np.asarray(jax.nn.softmax(jnp.asarray(scores), -1))
  r = causal_mask.head_ranks(scores[None], weights[None])
  A64 = _softmax64(s.astype(np.float32))
  assert r["full_rank"].tolist() == [True]  # exact arithmetic: every A_ii > 0
  np.testing.assert_allclose(r["log10_min_diag"][0], np.log10(np.diag(A64).min()), rtol=1e-6)
  assert r["deficient_f32"].tolist() == [deficient]
  assert r["zero_diag_f32"].tolist() == [zero_diag]
  sv = np.linalg.svd(weights.astype(np.float64), compute_uv=False)
  with np.errstate(divide="ignore"):  # an exactly singular float32 matrix: κ = inf
    np.testing.assert_allclose(r["log10_cond_f32"][0], np.log10(sv[0] / sv[-1]), rtol=1e-6)


def test_kernel_certificate_tied_is_psd_untied_is_not():
  rng = np.random.default_rng(1)
  q = rng.normal(size=(1, 1, 12, 2, 4)).astype(np.float32)  # (L, B, T, H, dh)
  k = rng.normal(size=(1, 1, 12, 2, 4)).astype(np.float32)
  tied = softmax_kernel.kernel_certificate(q, q, 0.5, causal=False)
  untied = softmax_kernel.kernel_certificate(q, k, 0.5, causal=False)
  assert tied["is_kernel"].all() and not untied["is_symmetric"].any()
  # Independent reference for one head: exp(q kᵀ · scale) in float64, symmetric part.
  K64 = np.exp(0.5 * q[0, 0, :, 1].astype(np.float64) @ k[0, 0, :, 1].T.astype(np.float64))
  S = (K64 + K64.T) / 2
  lam = np.linalg.eigvalsh(S)
  np.testing.assert_allclose(untied["min_eig_rel"][0, 1], lam[0] / np.abs(lam).max(), rtol=1e-4)
  neg = -lam[lam < 0].sum() / np.abs(lam).sum()
  np.testing.assert_allclose(untied["negative_mass"][0, 1], neg, rtol=1e-4, atol=1e-9)
  assert tied["negative_mass"].max() <= 1e-3  # PSD up to float32 rounding of κ
  causal = softmax_kernel.kernel_certificate(q, q, 0.5, causal=True)
  assert not causal["is_symmetric"].any()  # a lower-triangular kernel is never symmetric
  metrics = softmax_kernel.kernel_metrics(untied)
  assert metrics["frac_kernel"] == 0.0 and 0.0 <= metrics["frac_psd"] <= 1.0


def test_kernel_certificate_stays_exact_when_tied_scores_pass_float32s_range():
  """Trained tied heads score up to ~110 on `mini-20`; exp overflows float32 above ~88, and a
  clamp at 80 (softmax-kernel v2's instrument) breaks exp∘G's definiteness: with scores
  G = [[100, 85], [85, 72.25]] (q = 10, 8.5) the clamped [[e⁸⁰, e⁸⁰], [e⁸⁰, e^72.25]] has a
  negative determinant. The float64 kernel shifted by the largest score stays exactly PSD."""
  q = np.array([10.0, 8.5], np.float32).reshape(1, 1, 2, 1, 1)  # (L, B, T, H, dh)
  tied = softmax_kernel.kernel_certificate(q, q, 1.0, causal=False)
  assert tied["max_score"] == 100.0 and tied["is_kernel"].all()
  shifted = np.exp(np.array([[0.0, -15.0], [-15.0, -27.75]]))
  lam = np.linalg.eigvalsh(shifted)
  assert lam[0] > 0  # exp∘G / e¹⁰⁰ is positive definite, as the Schur product theorem says
  assert tied["min_eig_rel"][0, 0] == pytest.approx(lam[0] / lam[1], rel=1e-9)
  clamped = np.exp(np.minimum([[100.0, 85.0], [85.0, 72.25]], 80.0))
  assert np.linalg.det(clamped / np.exp(80.0)) < 0  # what v2's clamp measured instead


def test_kernel_certificate_gqa_reads_key_head_h_over_groups():
  # 4 query heads on 2 key heads: query head h must read key head h // 2 (the model's grouping).
  rng = np.random.default_rng(2)
  q = rng.normal(size=(2, 1, 10, 4, 4)).astype(np.float32)  # (L, B, T, H, dh)
  k = rng.normal(size=(2, 1, 10, 2, 4)).astype(np.float32)  # (L, B, T, K, dh)
  got = softmax_kernel.kernel_certificate(q, k, 0.5, causal=False)
  for l in range(2):
    for h in range(4):
      K64 = np.exp(0.5 * q[l, 0, :, h].astype(np.float64) @ k[l, 0, :, h // 2].T.astype(
          np.float64))
      lam = np.linalg.eigvalsh((K64 + K64.T) / 2)
      neg = -lam[lam < 0].sum() / np.abs(lam).sum()
      np.testing.assert_allclose(got["negative_mass"][l, h], neg, rtol=1e-4, atol=1e-9)
  # The other grouping (h % K) gives other kernels: the test can tell them apart.
  K64 = np.exp(0.5 * q[0, 0, :, 1].astype(np.float64) @ k[0, 0, :, 1].T.astype(np.float64))
  lam = np.linalg.eigvalsh((K64 + K64.T) / 2)
  assert abs(got["negative_mass"][0, 1] - (-lam[lam < 0].sum() / np.abs(lam).sum())) > 1e-3
  with pytest.raises(ValueError, match="number of heads K dividing H"):
    softmax_kernel.kernel_certificate(q, k[:, :, :, :1].repeat(3, axis=3), 0.5, causal=False)


def test_tying_keys_to_queries_makes_k_equal_q():
  cfg = transformer.preset("tiny", d_model=16, n_layers=2, n_heads=2, max_len=16)
  params, tied_cfg = softmax_kernel.tie_keys_to_queries(transformer.init(cfg, jax.random.key(0)),
                                                        cfg)
  assert tied_cfg == cfg
  inter = models.intermediates(params, cfg, np.arange(8)[None])["blocks"]["attn"]
  np.testing.assert_array_equal(inter["q"], inter["k"])


def test_tying_keys_to_queries_under_gqa_and_rope():
  # Llama: RoPE, 4 query heads on 2 KV heads. The tied model has a key head per query head,
  # k = q after the rotation, and query head h keeps the values of KV head h // 2.
  cfg = transformer.preset("llama-tiny", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=48, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tied, tied_cfg = softmax_kernel.tie_keys_to_queries(params, cfg)
  assert (tied_cfg.n_kv_heads, tied_cfg.n_heads) == (4, 4)
  tokens = np.arange(8)[None]
  got = models.intermediates(tied, tied_cfg, tokens)["blocks"]["attn"]
  np.testing.assert_array_equal(got["q"], got["k"])
  was = models.intermediates(params, cfg, tokens)["blocks"]["attn"]
  np.testing.assert_array_equal(got["q"][0], was["q"][0])  # layer 0 reads the same input
  for h in range(4):
    np.testing.assert_allclose(got["v"][0, :, :, h], was["v"][0, :, :, h // 2], rtol=1e-6)
  assert float(softmax_kernel.kernel_certificate(got["q"], got["k"], cfg.d_head**-0.5,
                                                 causal=False)["negative_mass"].max()) <= 1e-3


def test_contract_measurement_quick(monkeypatch):
  """The claim's aggregation over the registry; each variant's own check is in test_contracts."""
  for name in set(transformer.ATTENTION) - {"softmax"}:
    monkeypatch.delitem(transformer.ATTENTION, name)
  # A registered variant that peeks at the future is counted as not causal.
  monkeypatch.setitem(transformer.ATTENTION, "peeking", causal_mask.mask_blind_softmax)
  out = causal_mask.contract(seed=0, small=True)
  assert out["variants_causal"] == 0.5 and out["n_variants"] == 2
  assert out["control_caught"] == 1.0


@pytest.fixture
def tiny_recipe(monkeypatch):
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16)
  monkeypatch.setitem(models.RECIPES, "quick",
                      models.Recipe(cfg, steps=3, batch_size=2, seq_len=8, warmup_steps=1))
  calls = []
  real = sweep.train_many
  monkeypatch.setattr(sweep, "train_many",
                      lambda *a, **kw: calls.append(kw["seeds"]) or real(*a, **kw))
  trained._load.cache_clear()
  yield calls
  trained._load.cache_clear()


def test_base_model_trains_once_then_loads(tmp_path, tiny_recipe):
  root = str(tmp_path)
  params, cfg = models.base_model("quick", 3, root=root)
  trained._load.cache_clear()  # a fresh process: must come from disk
  again, _ = models.base_model("quick", 3, root=root)
  assert tiny_recipe == [(3,)]
  jax.tree.map(np.testing.assert_array_equal, params, again)
  # Equal to training the same recipe directly: the cache holds the trained model.
  tc = models.RECIPES["quick"].train_config(3)
  direct = sweep.train_many(cfg, sweep.train_like(tc), seeds=(3,), learning_rates=(3e-3,),
                               steps=3, data="stdlib", batch_size=2, seq_len=8, eval_every=3,
                               eval_batches=0)
  np.testing.assert_allclose(again["blocks"]["attn"]["w_q"],
                             direct.params["blocks"]["attn"]["w_q"][0, 0], atol=1e-6)
  info = models.base_model_info("quick", 3, root=root)
  assert info["seed"] == 3 and os.path.isdir(info["path"]) and not info["diverged"]
  assert not [n for n in os.listdir(os.path.dirname(info["path"])) if ".tmp-" in n]


def test_half_written_cache_is_ignored_and_missing_seeds_train_together(tmp_path, tiny_recipe):
  root = str(tmp_path)
  crashed = models.cache_dir("quick", 1, root)
  os.makedirs(crashed + ".tmp-999")  # a crash mid-write leaves only a temporary folder
  os.makedirs(crashed)  # ... or a folder without meta.json
  models.base_models("quick", (0, 1), root=root)
  assert tiny_recipe == [(0, 1)]
  assert os.path.exists(os.path.join(crashed, "meta.json"))
  assert os.path.exists(os.path.join(crashed, "params.npz"))
