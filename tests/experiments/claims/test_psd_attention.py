"""The psd-attention claim: tied kernels are PSD (float64), the price paired by seed, sizes and the
run."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.claims import CLAIMS, psd_attention
from experiments.verdict import Spec
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare import axes
from experiments.verdict.declare.clause import conjunction
from tests.experiments.claims.attention_helpers import RNG, TINY, count_by_hand
from transformer.attention import linear_quadratic, rbf_attention, softmax_attention

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
                                                           (psd_attention.CHOSEN, False),
                                                           (psd_attention.CHOSEN, True)]
  # The copy control blocks only its own extension, never the headline.
  runs = {psd_attention.CHOSEN: {s: {"loss_ratio": 0.001, "em_diff": 0.0, "rates_at_edge": 0.0,
                                     "psd_exact": 1.0} for s in range(3)},
          "softmax": {s: {"exact_match": 0.0} for s in range(3)},
          **{a: {s: {"loss_ratio": 0.001} for s in range(3)} for a in psd_attention.TIED}}
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "supported"
  copy = next(e for e in c.extensions if "copy" in e.name)
  assert rule.decide(copy.thresholds, runs, (0, 1, 2))[0] == "inconclusive"


def test_psd_trains_every_size_at_20_tokens_per_parameter():
  """v2: registered at `micro-20`; `steps=None` trains each size of the scale axis (the
  runner replaces `model`) for its recipe's steps, so every size sees 20 tokens per parameter;
  the rate grid scales with the recipe's width rule and keeps ratio 2."""
  z = psd_attention.FULL
  assert (z.model, z.steps, z.batch_size, z.seq_len, z.extend) == ("micro-20", None, 16, 128, 2)
  assert z.split == "test" and dataclasses.replace(z, split="val") != z
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
  assert c.version == 3 and c.bits_metric == ("softmax", "loss")
  for arm, over in psd_attention.ARMS.items():  # quick keeps the `tiny` preset v1 trained
    assert psd_attention.arm_config("mini", arm) == transformer.preset("tiny", **over)


def test_psd_edge_control_blocks_the_price_clause_not_the_proof():
  c = CLAIMS["psd-attention"]
  runs = {psd_attention.CHOSEN: {s: {"loss_ratio": 0.001, "rates_at_edge": 0.0,
                                     "psd_exact": 1.0} for s in range(3)}}
  assert rule.decide(c.thresholds, runs, (0, 1, 2))[0] == "supported"
  for s in range(3):
    runs[psd_attention.CHOSEN][s]["rates_at_edge"] = 1.0
  parts = rule.clause_verdicts(c, runs, (0, 1, 2), indicative=False)
  assert [p["verdict"] for p in parts] == ["supported", "inconclusive"]


SEEDS = (10, 11, 12, 13, 14)


@pytest.mark.parametrize("psd, ratios, want", [
    ((1.0,) * 5, (0.01, 0.0, 0.02, 0.005, 0.012), ("supported", "supported")),
    ((1.0,) * 5, (0.04, 0.05, 0.045, 0.06, 0.05), ("supported", "refuted")),
    ((1.0,) * 5, (-0.01, 0.05, 0.0, 0.04, 0.03), ("supported", "inconclusive")),
    ((1.0, 1.0, 0.97, 1.0, 1.0), (0.01,) * 5, ("inconclusive", "supported")),
    ((0.5,) * 5, (0.01,) * 5, ("refuted", "supported")),
])
def test_psd_v3_clauses_decide_synthetic_runs_as_registered(psd, ratios, want):
  """① (proof) is read on the certificate alone, exactly: every matrix of every seed, else not
  supported (refuted (proof) when no seed certifies all); ② on the price's interval against 3%;
  the headline is their conjunction."""
  c = psd_attention.CLAIM
  assert [cl.proof is not None for cl in c.clauses] == [True, False]
  runs = {psd_attention.CHOSEN: {s: {"psd_exact": p, "loss_ratio": r, "rates_at_edge": 0.0}
                                 for s, p, r in zip(SEEDS, psd, ratios, strict=True)}}
  parts = rule.clause_verdicts(c, runs, SEEDS, indicative=False)
  assert tuple(p["verdict"] for p in parts) == want
  assert rule.verdict(c, runs, SEEDS, indicative=False)[0] == conjunction(want)


def test_psd_scale_axis_is_the_gpt_family_with_the_registered_size_first():
  c = CLAIMS["psd-attention"]
  assert c.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  assert axes.scale_models(c, quick=False) == ("micro-20", "pico-20", "mini-20")
  assert axes.scale_models(c, quick=True) == ()  # quick runs stay one size
  assert "Llama family is left out" in " ".join(psd_attention.__doc__.split())
  with pytest.raises(ValueError, match="qk_tied"):  # why: tied keys refuse K < H
    models.RECIPES["llama-mini-20"].cfg.replace(qk_tied=True)


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
    assert n == count_by_hand(d, L, 4, 256, 256, tied=cfg.qk_tied), arm
  assert axes.model_card(size)["params"] == count_by_hand(d, L, 4, 256, 256, tied=False)


def test_psd_run_trains_every_arm_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `mini-20`: every tuning and training call gets `mini-20`'s shape with the arm's
  attention, its recipe's steps and rate grid, and the setup records that shape."""
  seen = []

  def fake_tune(cfg, **kw):
    seen.append(("tune", cfg))
    assert (kw["steps"], kw["extend"], kw["tuning_seeds"]) == (1298, 2, (110, 111))
    assert "split" not in kw  # tuning reads val
    assert kw["grid"] == pytest.approx((7.5e-4, 1.5e-3, 3e-3, 6e-3))
    loss = {("softmax", False): 2.0, ("softmax", True): 2.3, ("rbf", True): 2.1,
            ("linear", True): 2.2}[cfg.attention, cfg.qk_tied]
    return {"learning_rate": 1e-3, "index": 0, "seeds": [110, 111], "grid": list(kw["grid"]),
            "losses": [loss], "at_edge": cfg.attention == "linear"}

  def fake_train(cfg, seeds, *, data, **kw):
    assert kw["steps"] == (1298 if data == "stdlib" else psd_attention.COPY_STEPS)
    assert kw["split"] == "test"  # the reported runs are read on the test split
    seen.append((data, cfg))
    return {"per_seed": {s: {"loss": 2.0 + 0.1 * cfg.qk_tied, "diverged": 0.0,
                             "exact_match": 0.9} for s in seeds},
            "params": {s: cfg for s in seeds}}

  def fake_kernels(params, cfg, z, seed):
    assert params is cfg and z.split == "test"
    return {"psd_exact": float(cfg.qk_tied), "min_eig_rel": 0.0, "asymmetry": 0.0}

  monkeypatch.setattr(psd_attention, "tune_rate", fake_tune)
  monkeypatch.setattr(psd_attention, "train_arm", fake_train)
  monkeypatch.setattr(psd_attention, "kernel_metrics", fake_kernels)
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
  assert out["runs"][psd_attention.CHOSEN][0]["psd_exact"] == 1.0 and out["split"] == "test"
  assert out["runs"]["softmax"][1]["psd_exact"] == 0.0
  # linear-tied sat at an edge: not the chosen arm, yet it fails the edge control.
  assert out["runs"][psd_attention.CHOSEN][0]["rates_at_edge"] == 1.0
  assert "Still at an edge: linear-tied" in out["notes"][-2]
  assert "`mini-20` shape from scratch (d 64, L 2, H 4, 132,864 parameters untied)" in out[
      "notes"][-1]
