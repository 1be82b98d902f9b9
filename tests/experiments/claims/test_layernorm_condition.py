"""The layernorm-condition claim: its theorem in float64, the pre-registration, its sizes and run,
the frozen thresholds on synthetic runs, and the input conditions it measures against numpy."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from experiments import models
from experiments.claims import CLAIMS
from experiments.claims import layernorm_condition as lc
from experiments.lab import norm_training, stability
from experiments.verdict import Revision
from experiments.verdict.arithmetic import rule
from experiments.verdict.declare import axes
from experiments.verdict.render import findings
from experiments.verdict.running import folders

# ------------------------------------------------ layernorm-condition: the theorem, float64


def _layernorm(x):
  x = x - x.mean(-1, keepdims=True)
  return x / np.sqrt((x * x).mean(-1, keepdims=True))


def _rmsnorm(x):
  return x / np.sqrt((x * x).mean(-1, keepdims=True))


NORM_FNS = {"layernorm": _layernorm, "rmsnorm": _rmsnorm}


def _kappa_eff_centred(Z):
  """Independent float64 reference of `analysis.effective_condition(Z, center=True)`."""
  Zc = Z - Z.mean(0)
  s = np.linalg.svd(Zc, compute_uv=False)
  kept = s > max(Z.shape) * np.finfo(np.float64).eps * s[0]
  return s[0] / s[kept][-1], int((~kept).sum())


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("N, D", [(64, 8), (512, 32)])
def test_norm_pins_every_row_to_norm_sqrt_d_float64(norm, N, D):
  """`layernorm-condition` theorem, part 1: the scale is pinned, whatever the input's scale."""
  rng = np.random.default_rng(N + D)
  f = NORM_FNS[norm]
  for _ in range(5):
    scale = 10.0 ** rng.uniform(-3, 3, (N, 1))
    X = scale * (rng.normal(size=(N, D)) + 3 * rng.normal(size=(1, D)))
    Z = f(X)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=-1), np.sqrt(D), rtol=1e-12)
    np.testing.assert_allclose(f(rng.uniform(0.01, 100) * X), Z, rtol=1e-10, atol=1e-12)
    if norm == "layernorm":
      np.testing.assert_allclose(Z.sum(-1), 0, atol=1e-10)
    s1 = np.linalg.svd(Z, compute_uv=False)[0]
    assert N * (1 - 1e-12) <= s1**2 <= N * D * (1 + 1e-12)
    g = rng.uniform(0.2, 3.0, D)  # a gain scales σ_1² by at most max g²
    assert np.linalg.svd(Z * g, compute_uv=False)[0] ** 2 <= N * D * g.max() ** 2 * (1 + 1e-12)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_norm_does_not_bound_the_condition_number_float64(norm):
  """Part 2: one strong feature among weak ones survives the norm; κ_eff grows like 1/ε."""
  rng = np.random.default_rng(7)
  N, D = 256, 16
  signs = rng.choice([-1.0, 1.0], size=(N, 1))
  W = rng.normal(size=(N, D - 1))
  kappas = {}
  for eps in (1e-2, 1e-4, 1e-6):
    Z = NORM_FNS[norm](np.concatenate([signs, eps * W], axis=1))
    np.testing.assert_allclose(np.linalg.norm(Z, axis=-1), np.sqrt(D), rtol=1e-12)
    kappas[eps], dropped = _kappa_eff_centred(Z)
    assert dropped == (1 if norm == "layernorm" else 0)  # LayerNorm's all-ones direction
  assert kappas[1e-6] > 1e5 > lc.KAPPA_BOUND
  # κ_eff · ε stays put: the growth is exactly the 1/ε the argument predicts.
  ratio = (kappas[1e-6] * 1e-6) / (kappas[1e-2] * 1e-2)
  assert 0.5 < ratio < 2
  np.testing.assert_allclose(kappas[1e-4] * 1e-4, kappas[1e-6] * 1e-6, rtol=1e-3)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_model_norm_computes_the_theorem_z(norm):
  from transformer.model import Norm

  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=1, n_heads=2, max_len=16,
                           norm=norm)
  x = np.asarray(jax.random.normal(jax.random.key(3), (2, 8, 16)) * 5 + 2, np.float32)
  params = {"scale": jnp.ones(16)}
  if norm == "layernorm":
    params["bias"] = jnp.zeros(16)
  y = np.asarray(Norm(cfg).apply({"params": params}, jnp.asarray(x)), np.float64)
  x64 = x.astype(np.float64)
  c = x64 - x64.mean(-1, keepdims=True) if norm == "layernorm" else x64
  ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + cfg.norm_eps)
  np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.sqrt(16), rtol=1e-4)


# ----------------------------------------------- layernorm-condition: the pre-registration


def test_kappa_bound_is_bf16_unit_roundoff_and_ceiling_is_the_rank_tolerance():
  assert lc.KAPPA_BOUND == 2.0**8  # bfloat16: 8 significant bits, unit roundoff 2⁻⁸
  # A float32 reading can reach at most 1/(max(N, D)·eps₃₂): numpy's matrix_rank tolerance,
  # at the registered run's N = B·T rows and D = d_model.
  N, D = lc.FULL.batch_size * lc.FULL.seq_len, models.config(lc.FULL.model).d_model
  assert (N, D) == (2048, 32) and lc.kappa_ceiling(N, D) == pytest.approx(4096)
  X = np.zeros((N, D), np.float32)
  X[:, 0] = 1.0
  signs = np.where(np.arange(N) % 2, 1.0, -1.0)  # orthogonal to column 0: σ_2/σ_1 = c
  X[:, 1] = signs * 1.05 / lc.kappa_ceiling(N, D)
  assert np.linalg.matrix_rank(X) == 2
  X[:, 1] = signs * 0.95 / lc.kappa_ceiling(N, D)
  assert np.linalg.matrix_rank(X) == 1
  assert lc.KAPPA_BOUND < lc.kappa_ceiling(N, D) / 10  # the bound is readable in float32


def test_ended_diverged_end_loss_and_stress_rate():
  V = 256
  final = np.array([2.5, np.log(V) + 1e-3, np.nan, np.inf, np.log(V) - 1e-3])
  assert norm_training.ended_diverged(final, V).tolist() == [False, True, True, True, False]
  np.testing.assert_allclose(norm_training.end_loss(final, V),
                             [2.5, np.log(V), np.log(V), np.log(V), np.log(V) - 1e-3])
  grid = (1e-3, 1e-2, 1e-1, 1.0)
  assert norm_training.stress_rate(grid, [False, True, False, True]) == (1e-2, True)
  assert norm_training.stress_rate(grid, [False] * 4) == (1.0, False)


def test_claim_preregistration():
  claim = CLAIMS["layernorm-condition"]
  assert claim.theorem and claim.seeds == (10, 11, 12, 13, 14)
  assert claim.tuning_seeds == (110, 111)  # two: v2's losses over the grid were nearly flat
  assert not set(claim.seeds) & set(claim.tuning_seeds)
  assert lc.FULL.float64 and lc.FULL.split == "test"
  for th in claim.thresholds + tuple(t for e in claim.extensions for t in e.thresholds):
    assert th.control or (th.margin is not None and th.unit)
  assert lc.FULL.tune and not lc.QUICK.tune and lc.FULL.grid[-1] >= 0.1
  assert len(lc.FULL.grid) >= 4 and lc.FULL.extend == 1  # issue 38: >= 4 rates, the edge rule
  assert claim.version == 3 and claim.revisions[0].startswith("v2: ")
  assert isinstance(claim.revisions[1], Revision) and claim.revisions[1].kind == "protocol"
  assert claim.bits_metric == ("layernorm", "end_loss_tuned")
  # Each tuned rate read by a threshold carries its edge control; the stress gaps read none.
  ext = {e.name: e for e in claim.extensions}
  for group in (claim.thresholds, ext["is it the norm?"].thresholds):
    controls = {th.arm for th in group if th.control and th.metric == "edge_lr"}
    tuned = {a for th in group if not th.control and "tuned" in th.metric
             for a in (th.arm, th.baseline) if a}
    assert tuned == controls
  assert all(th.needs == () for th in claim.thresholds if "stress" in th.metric)


def test_registered_size_trains_at_the_regime_and_matches_the_kept_run():
  """`micro-20`, from scratch at 20 tokens per parameter: the trained recipe's own steps, at
  every size of the scale axis (the runner swaps `model`, and the steps follow)."""
  from experiments import jsonio

  assert lc.FULL.model == "micro-20" and (lc.FULL.batch_size, lc.FULL.seq_len) == (16, 128)
  for name in models.TRAINED["gpt"]:
    z = dataclasses.replace(lc.FULL, model=name)
    r = models.RECIPES[name]
    assert (z.steps, z.batch_size, z.seq_len) == (r.steps, r.batch_size, r.seq_len)
    assert z.train_tokens() / models.model_card(name)["params"] >= models.TOKENS_PER_PARAM
    assert -(-z.steps // z.eval_every) in (lc.FULL.evals - 1, lc.FULL.evals)  # readings
    assert z.to_dict()["steps"] == r.steps
  assert lc.QUICK.steps == 58  # pico-20 at 2 tokens per parameter: 2 · 14,784 / (8 · 64)
  res = jsonio.load_strict(f"{folders.RESULTS_DIR}/layernorm-condition/results.json")
  if res.get("version", 1) == CLAIMS["layernorm-condition"].version:  # this registration's
    assert lc.FULL.to_dict() == res["config"]["sizes"]
    assert res["config"]["regime"]["tokens_per_param"] >= models.TOKENS_PER_PARAM
  with pytest.raises(ValueError, match="seq_len=64 exceeds the `nano` shape's max_len=32"):
    dataclasses.replace(lc.QUICK, model="nano")
  with pytest.raises(ValueError, match="evals=0 must be positive"):
    dataclasses.replace(lc.FULL, evals=0)


def test_scale_axis_starts_at_the_registered_micro_and_spans_the_trained_gpt_sizes():

  claim = CLAIMS["layernorm-condition"]
  assert axes.scale_models(claim, quick=False) == ("micro-20", "pico-20", "mini-20")
  assert axes.scale_models(claim, quick=True) == ()  # quick runs stay one size
  # The cards' parameter counts, from the matrix catalog: embedding (tied), learned positions,
  # per block w_q, w_k, w_v, w_o, w_1, w_2 with biases and two LayerNorms, a final LayerNorm.
  def by_hand(d, L, max_len):
    return 256 * d + max_len * d + L * (4 * d * d + 4 * d + 8 * d * d + 5 * d + 4 * d) + 2 * d

  cards = {n: axes.model_card(n) for n in models.TRAINED["gpt"]}
  assert {n: c["params"] for n, c in cards.items()} == {
      "pico-20": by_hand(16, 2, 256), "micro-20": by_hand(32, 2, 256),
      "mini-20": by_hand(64, 2, 256)}
  assert {c["family"] for c in cards.values()} == {"gpt"}
  assert cards["mini-20"]["params"] >= 8 * cards["pico-20"]["params"]


def test_run_trains_every_arm_at_the_size_it_is_given(monkeypatch, tmp_path):
  """`run` at `mini-20`: tuning and tracking get `mini-20`'s shape with each arm's norm, and
  its own steps; the stress rate comes from `none`'s extended grid."""
  from experiments.verdict import Spec

  seen = []

  def fake_tune(cfg, grid, **kw):
    seen.append(("tune", cfg, kw["steps"], kw["extend"], kw["seeds"]))
    grid = (*grid, 1.0) if cfg.norm == "none" else grid  # an extension beyond the top
    diverged = [cfg.norm == "none" and lr >= 1.0 for lr in grid]
    return {"learning_rate": grid[1], "index": 1, "grid": list(grid),
            "losses": [2.5] * len(grid), "excluded": diverged,
            "spiked": [False] * len(grid), "at_edge": cfg.norm == "rmsnorm"}

  def fake_track(cfg, seeds, rates, **kw):
    seen.append(("track", cfg, tuple(rates), kw["steps"], kw["eval_every"]))
    assert (kw["eval_split"], kw["float64"]) == ("test", True)
    E, R, S, L = 2, 2, len(seeds), cfg.n_layers
    kappa = np.full((E, R, S, L), 10.0)
    return {"kappa_ERSL": {n: kappa for n in norm_training.NORMED},
            "saturated_ERSL": np.zeros((E, R, S, L), bool),
            "val_RSE": np.full((R, S, E), 2.5),
            "steps_E": np.array([1, 2]), "n_dropped_ERSL": np.zeros((E, R, S, L)),
            "final_RS": np.full((R, S), 2.5), "ended_diverged_RS": np.zeros((R, S), bool),
            "spiked_RS": np.zeros((R, S), bool)}

  monkeypatch.setattr(norm_training, "tune_arm", fake_tune)
  monkeypatch.setattr(norm_training, "track", fake_track)
  z = dataclasses.replace(lc.FULL, model="mini-20")
  out = lc.run(Spec(quick=False, seeds=(0, 1), run_dir=str(tmp_path), sizes=z,
                    log=lambda *_: None))
  want = [models.RECIPES["mini-20"].cfg.replace(norm=n) for n in lc.NORMS]
  assert [e[1] for e in seen if e[0] == "tune"] == want
  assert [e[1] for e in seen if e[0] == "track"] == want
  assert {e[2:] for e in seen if e[0] == "tune"} == {(1298, 1, (110, 111))}
  assert {e[2:] for e in seen if e[0] == "track"} == {((3e-3, 1.0), 1298, 82)}
  assert out["setup"]["stress_rate"] == 1.0 and out["setup"]["stress_rate_from_divergence"]
  assert [out["runs"][n][0]["edge_lr"] for n in lc.NORMS] == [0.0, 1.0, 0.0]
  assert out["setup"]["model_config"]["d_model"] == 64 and out["split"] == "test"
  assert "the `mini-20` shape from scratch, D = 64, L = 2, H = 4" in out["notes"][-1]
  note = findings.note(out["notes"][0])  # the tuned-rate note, rendered from the records
  assert re.search(r"; rmsnorm 0\.003 \(loss 2\.5000; grid [^)]*, at an edge\)", note), note
  assert out["figures"][0]["name"] == "kappa.png"  # declared as data, drawn by the runner


def test_tune_arm_extends_a_winning_edge_once(monkeypatch):
  """The edge rule: a best rate at the top adds one rate a grid step above, once; the record
  says whether the tuned rate still sits at an edge."""
  from experiments.train import sweep

  calls = []

  def fake_train_many(cfg, make_tx, *, seeds, learning_rates, steps, **kw):
    calls.append(tuple(learning_rates))
    final = np.array([[[2.0 - np.log10(lr)]] for lr in learning_rates])  # larger is better
    return sweep.ManyResult(final, final, np.array([steps]), None, None,
                            np.zeros((len(learning_rates), 1), bool), seeds, learning_rates)

  monkeypatch.setattr(sweep, "train_many", fake_train_many)
  cfg = models.config("pico-20")
  kw = {"seeds": (110,), "steps": 3, "batch_size": 2, "seq_len": 8, "eval_batches": 1}
  t = norm_training.tune_arm(cfg, (1e-3, 1e-2, 1e-1), extend=1, **kw)
  assert calls == [(1e-3, 1e-2, 1e-1), (pytest.approx(1.0),)]
  assert t["grid"] == pytest.approx([1e-3, 1e-2, 1e-1, 1.0])
  assert t["learning_rate"] == pytest.approx(1.0) and t["at_edge"] and t["index"] == 3
  calls.clear()
  t = norm_training.tune_arm(cfg, (1e-3, 1e-2, 1e-1), extend=0, **kw)
  assert calls == [(1e-3, 1e-2, 1e-1)] and t["at_edge"] and t["learning_rate"] == 1e-1
  with pytest.raises(ValueError, match="two or more increasing rates"):
    norm_training.tune_arm(cfg, (1e-2,), **kw)


def test_tune_arm_reads_the_mean_over_tuning_seeds_and_excludes_a_rate_any_seed_lost(monkeypatch):
  """Two tuning seeds: the rate with the lowest mean final loss wins, among rates at which no
  seed ended diverged; the record keeps each seed's loss."""
  from experiments.train import sweep

  table = {1e-3: (2.60, 2.50), 1e-2: (2.40, 2.62), 1e-1: (2.30, np.nan)}  # means 2.55, 2.51

  def fake_train_many(cfg, make_tx, *, seeds, learning_rates, steps, **kw):
    assert seeds == (110, 111) and kw["eval_every"] == steps
    final = np.array([[[table[lr][i]] for i in range(2)] for lr in learning_rates])
    return sweep.ManyResult(final, final, np.array([steps]), None, None,
                            np.zeros((len(learning_rates), 2), bool), seeds, learning_rates)

  monkeypatch.setattr(sweep, "train_many", fake_train_many)
  t = norm_training.tune_arm(models.config("pico-20"), tuple(table), seeds=(110, 111), steps=3,
                             batch_size=2, seq_len=8, eval_batches=1)
  assert t["learning_rate"] == 1e-2 and not t["at_edge"] and t["seeds"] == [110, 111]
  assert t["losses"] == pytest.approx([2.55, 2.51, np.nan], nan_ok=True)
  assert t["excluded"] == [False, False, True] and t["losses_by_seed"][0] == [2.60, 2.50]
  assert norm_training.stress_rate(t["grid"], t["excluded"]) == (1e-1, True)


def test_float64_kappa_reads_past_the_float32_ceiling_against_numpy():
  """An input with one strong feature and weak ones 1e-5 as large: float32's κ_eff saturates
  at its ceiling (4,096 for N = 2,048), the float64 path reads the true ≈ 1e5 (numpy float64
  SVD of the same float32 entries), well inside its own ceiling."""
  rng = np.random.default_rng(0)
  N, D = 2048, 32
  X = np.zeros((2, N, D))  # (L, N, D): layer 0 ill-conditioned, layer 1 well
  X[0, :, 0] = np.where(np.arange(N) % 2, 1.0, -1.0)
  X[0, :, 1:] = 1e-5 * rng.standard_normal((N, D - 1))
  X[1] = rng.standard_normal((N, D))
  X = X.astype(np.float32)
  inter = {"blocks": {"attn": {"attn_in": (X[:, None],)}, "ffn": {"ffn_in": (X[:, None],)}}}
  f32 = norm_training.input_conditions(inter, names=("attn_in",))["attn_in"]
  f64 = norm_training.input_conditions(inter, names=("attn_in",), float64=True)["attn_in"]
  ref = []
  for layer in range(2):
    Xl = X[layer].astype(np.float64)
    sv = np.linalg.svd(Xl - Xl.mean(0), compute_uv=False)
    ref.append(sv[0] / sv[-1])
  assert ref[0] > 20 * lc.kappa_ceiling(N, D)  # truly far past the float32 ceiling
  assert f32["kappa"][0] <= 1.01 * lc.kappa_ceiling(N, D) and f32["n_dropped"][0] > 0
  np.testing.assert_allclose(f64["kappa"], ref, rtol=1e-6)
  assert f64["n_dropped"].tolist() == [0, 0]
  assert ref[0] < 0.25 * lc.kappa_ceiling(N, D, float64=True) and ref[0] < lc.KAPPA_CENSORED


def test_clauses_decide_synthetic_runs_and_a_censored_kappa_still_refutes():
  claim = CLAIMS["layernorm-condition"]
  seeds = tuple(range(5))
  assert [c.text for c in claim.clauses] == [
      "LayerNorm and RMSNorm keep condition numbers bounded", "stabilizing training"]
  stable = (5.5, 5.5, 5.5, 5.2, 5.5)
  parts = lambda runs: [p["verdict"] for p in rule.clause_verdicts(claim, runs, seeds,
                                                                   indicative=False)]
  ok = _synthetic_runs((120, 150, 90, 200, 130), (100,) * 5, (110,) * 5, stable)
  assert parts(ok) == ["supported", "supported"]
  # v2's shape: RMSNorm far above K in every seed; one seed's reading saturated (censored).
  high = _synthetic_runs((120, 150, 90, 200, 130), (4e3, 6e3, 5e3, 1e6, 8e3), (110,) * 5, stable)
  assert parts(high) == ["refuted", "supported"]
  assert rule.verdict(claim, high, seeds, indicative=False)[0] == "refuted"
  bounded = next(th for th in claim.thresholds if th.metric == "kappa_tuned")
  assert bounded.censored == f">= {lc.KAPPA_CENSORED:.6g}"
  flat = _synthetic_runs((120, 150, 90, 200, 130), (100,) * 5, (110,) * 5, (2.7,) * 5)
  assert parts(flat) == ["supported", "refuted"]


def _synthetic_runs(kappa_ln, kappa_rms, kappa_none, loss_none, loss_normed=2.6):
  runs = {}
  for arm, kappas in (("layernorm", kappa_ln), ("rmsnorm", kappa_rms), ("none", kappa_none)):
    runs[arm] = {s: {"kappa_tuned": k, "log10_kappa_tuned": np.log10(k), "kappa_stress": 10 * k,
                     "end_loss_stress": loss_none[s] if arm == "none" else loss_normed,
                     "edge_lr": 0.0} for s, k in enumerate(kappas)}
  return runs


@pytest.mark.parametrize("kappa_ln, loss_none, expected", [
    ((120, 150, 90, 200, 130), (5.5, 5.5, 5.5, 5.2, 5.5), "supported"),
    ((300, 400, 290, 1e3, 260), (5.5, 5.5, 5.5, 5.2, 5.5), "refuted"),   # above K every seed
    ((120, 300, 90, 200, 130), (5.5, 5.5, 5.5, 5.2, 5.5), "inconclusive"),  # K crossed once
    ((120, 150, 90, 200, 130), (2.7, 2.6, 2.75, 2.65, 2.7), "refuted"),  # inside 0.25 nats
])
def test_primary_verdict_from_the_frozen_thresholds(kappa_ln, loss_none, expected):

  claim = CLAIMS["layernorm-condition"]
  runs = _synthetic_runs(kappa_ln, (100,) * 5, (110, 160, 95, 210, 120), loss_none)
  v, _, evals = rule.decide(claim.thresholds, runs, tuple(range(5)))
  assert v == expected
  # The stress-rate gap is the paired difference none − layernorm, seed by seed.
  assert evals[2]["mean"] == pytest.approx(np.mean(np.array(loss_none) - 2.6))


def test_a_tuned_rate_at_the_grid_edge_blocks_the_bound_not_the_stress_gap():
  claim = CLAIMS["layernorm-condition"]
  seeds = tuple(range(5))
  stable = (5.5, 5.5, 5.5, 5.2, 5.5)
  runs = _synthetic_runs((120, 150, 90, 200, 130), (100,) * 5, (110,) * 5, stable)
  assert rule.decide(claim.thresholds, runs, seeds)[0] == "supported"
  for s in seeds:
    runs["rmsnorm"][s]["edge_lr"] = 1.0
  v, why, evals = rule.decide(claim.thresholds, runs, seeds)
  assert v == "inconclusive" and "rmsnorm's tuned rate inside the grid" in why
  assert [ev["blocked"] for ev in evals[:4]] == [False, True, False, False]
  close = _synthetic_runs((120, 150, 90, 200, 130), (100,) * 5, (110,) * 5,
                          (2.7, 2.6, 2.75, 2.65, 2.7))
  for s in seeds:
    close["layernorm"][s]["edge_lr"] = 1.0
  assert rule.decide(claim.thresholds, close, seeds)[0] == "refuted"  # read at the stress rate
  ext = {e.name: e for e in claim.extensions}["is it the norm?"]
  for s in seeds:
    runs["rmsnorm"][s]["edge_lr"] = 0.0
    runs["none"][s]["edge_lr"] = 1.0
  assert rule.decide(ext.thresholds, runs, seeds)[0] == "inconclusive"


def test_is_it_the_norm_extension_reads_decades():

  ext = {e.name: e for e in CLAIMS["layernorm-condition"].extensions}["is it the norm?"]
  same = _synthetic_runs((100,) * 5, (100,) * 5, (110, 120, 90, 100, 105), (5.5,) * 5)
  assert rule.decide(ext.thresholds, same, tuple(range(5)))[0] == "refuted"
  tenfold = _synthetic_runs((100,) * 5, (100,) * 5, (900, 1200, 1000, 1100, 950), (5.5,) * 5)
  assert rule.decide(ext.thresholds, tenfold, tuple(range(5)))[0] == "supported"


def test_seed_metrics_from_a_track():
  # Two evaluations, rates (tuned, stress), one seed, two layers.
  k_attn = np.array([[[[10.0, 20.0]], [[100.0, np.nan]]], [[[15.0, 5.0]], [[900.0, 50.0]]]])
  k_ffn = np.array([[[[12.0, 8.0]], [[300.0, 1.0]]], [[[30.0, 2.0]], [[np.nan, 40.0]]]])
  tr = {"kappa_ERSL": {"attn_in": k_attn, "ffn_in": k_ffn},
        "n_dropped_ERSL": np.array([[[[1, 1]], [[1, 3]]], [[[1, 1]], [[2, 1]]]]),
        "final_RS": np.array([[2.5], [np.inf]]), "ended_diverged_RS": np.array([[False], [True]]),
        "spiked_RS": np.array([[False], [False]])}
  m = norm_training.seed_metrics(tr, 0, 256)
  assert m["kappa_tuned"] == 30.0 and m["attn_in/kappa_tuned"] == 20.0
  assert m["kappa_tuned_final"] == 30.0 and m["log10_kappa_tuned"] == pytest.approx(np.log10(30))
  assert m["kappa_stress"] == 900.0 and m["kappa_stress_final"] == 900.0
  assert m["end_loss_tuned"] == 2.5 and m["end_loss_stress"] == pytest.approx(np.log(256))
  assert m["diverged_stress"] == 1.0 and m["n_dropped_stress"] == 3.0


def test_input_conditions_match_numpy_svd():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  out = norm_training.input_conditions(state["intermediates"])
  X = np.asarray(state["intermediates"]["blocks"]["attn"]["attn_in"][0], np.float64)
  for layer in range(cfg.n_layers):
    Xl = X[layer].reshape(-1, cfg.d_model)
    s = np.linalg.svd(Xl - Xl.mean(0), compute_uv=False)
    kept = s > 1e-4 * s[0]  # LayerNorm: one exact zero (the all-ones direction)
    assert (~kept).sum() == 1 == out["attn_in"]["n_dropped"][layer]
    np.testing.assert_allclose(out["attn_in"]["kappa"][layer], s[0] / s[kept][-1], rtol=1e-3)


def test_float64_layernorm_projects_out_its_structural_zero_against_numpy():
  """LayerNorm's rows satisfy `(X − b)·(1/scale) = 0` exactly, but float32 arithmetic leaves
  that direction near `eps₃₂·σ_1`, above the float64 tolerance. With the params, the float64
  path projects it out: one value dropped, κ_eff as a float64 numpy reference reads it."""
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(0))
  gains = jax.random.uniform(jax.random.key(3), (2, 16), minval=0.3, maxval=3.0)
  blocks = {**params["blocks"], "norm_1": {**params["blocks"]["norm_1"], "scale": gains},
            "norm_2": {**params["blocks"]["norm_2"], "scale": gains[::-1]}}
  params = {**params, "blocks": blocks}
  tokens = jax.random.randint(jax.random.key(1), (8, 16), 0, 32)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  inter = state["intermediates"]
  out = norm_training.input_conditions(inter, float64=True, params=params)
  for name, norm in (("attn_in", "norm_1"), ("ffn_in", "norm_2")):
    sub = "attn" if name == "attn_in" else "ffn"
    X = np.asarray(inter["blocks"][sub][name][0], np.float64)
    for layer in range(cfg.n_layers):
      Xl = X[layer].reshape(-1, cfg.d_model)
      v = 1.0 / np.asarray(params["blocks"][norm]["scale"][layer], np.float64)
      v /= np.linalg.norm(v)
      Xp = Xl - np.outer(Xl @ v, v)
      sv = np.linalg.svd(Xp - Xp.mean(0), compute_uv=False)
      assert sv[-1] < 1e-12 * sv[0]  # the structural zero, exact once projected
      assert out[name]["n_dropped"][layer] == 1
      np.testing.assert_allclose(out[name]["kappa"][layer], sv[0] / sv[-2], rtol=1e-6)
  with pytest.raises(ValueError, match="float64 path"):
    stability.input_conditions(jax.tree.map(lambda x: x[0], inter["blocks"],
                                            is_leaf=lambda x: isinstance(x, tuple)),
                               center=True, null={"attn_in": gains})


def test_input_conditions_rmsnorm_drops_nothing():
  cfg = transformer.Config(vocab_size=32, d_model=16, n_layers=1, n_heads=2, max_len=16,
                           norm="rmsnorm")
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 32)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  out = norm_training.input_conditions(state["intermediates"])
  assert out["attn_in"]["n_dropped"].tolist() == [0]
  assert out["ffn_in"]["n_dropped"].tolist() == [0]
  assert sorted(out) == ["attn_in", "ffn_in"]  # the claim reads only the normalized inputs
  with pytest.raises(ValueError, match="not projection inputs"):
    norm_training.input_conditions(state["intermediates"], names=("attn_out",))
