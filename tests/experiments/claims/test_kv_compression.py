"""The kv-compression claim: its theorem (full rank exact, PCA optimal), sizes, the extensions and
controls it reads, and the goal arms measured as the claim measures them."""

import jax
import numpy as np
import pytest

import transformer
from analysis import kv
from experiments import models
from experiments.claims import kv_compression
from experiments.lab import kv_arms, kvcompress
from experiments.verdict.arithmetic import rule
from experiments.verdict.arithmetic.rule import decide
from experiments.verdict.declare.clause import conjunction
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running import history
from tests.experiments.claims.rank_helpers import seed_runs as _seed_runs

SEEDS = (10, 11, 12, 13, 14)  # v4's


def seed_runs(per_seed: dict) -> dict:
  return _seed_runs(per_seed, SEEDS)

# ----------------------------------------------------------------------------- kv-compression


@pytest.mark.parametrize("seed", range(3))
def test_kv_theorem_full_rank_exact_and_pca_optimal(seed):
  """The claim's theorem in float64: full rank is exact; PCA's error is the dropped energy and
  no rank-r orthogonal projection does better."""
  rng = np.random.default_rng(seed)
  dh, n, r = 12, 400, 4
  X = rng.normal(size=(n, dh)) @ rng.normal(size=(dh, dh)) * rng.uniform(0.1, 3, dh)
  M = X.T @ X
  w, V = np.linalg.eigh(M)
  w, V = w[::-1], V[:, ::-1]
  np.testing.assert_allclose(X @ V @ V.T, X, rtol=0, atol=1e-10 * np.abs(X).max())
  err = np.linalg.norm(X - X @ V[:, :r] @ V[:, :r].T) ** 2
  assert err == pytest.approx(w[r:].sum(), rel=1e-9)
  for _ in range(20):
    Q = np.linalg.qr(rng.normal(size=(dh, r)))[0]
    assert np.linalg.norm(X - X @ Q @ Q.T) ** 2 >= err * (1 - 1e-12)
  # The library's bases (float32) and energies (float64) are those eigenvectors and values.
  bases, energies = kv.pca_bases(M[None, None])
  np.testing.assert_allclose(energies[0, 0], w, rtol=1e-9)
  P = np.asarray(bases[0, 0], np.float64)[:, :r]
  np.testing.assert_allclose(P @ P.T, V[:, :r] @ V[:, :r].T, atol=1e-5)


def test_full_rank_error_with_calibration_bases_and_windows():
  cfg = transformer.preset("tiny", d_model=32, n_heads=2)
  params = transformer.init(cfg, jax.random.key(0))
  w = models.windows(0, 16, 3, "val")
  assert w.shape == (3, 17) and np.array_equal(w, models.windows(0, 16, 3, "val"))
  cal = kvcompress.calibrate(params, cfg, models.windows(0, 16, 3, "train"), loss_aware=False)
  assert kv_arms.full_rank_error(params, cfg, w[:, :-1], cal) < 1e-4
  assert kv_arms.full_rank_error(params, cfg, w[:, :-1]) < 1e-4


def test_kv_sizes_refuse_missing_threshold_arms():
  with pytest.raises(ValueError, match="must include"):
    kv_compression.KvCompressionSizes(**{**kv_compression.QUICK.to_dict(),
                                         "context_lengths": (16, 32, 64),
                                         "allocs": ("uniform",)})
  with pytest.raises(ValueError, match="must include"):
    kv_compression.KvCompressionSizes(**{**kv_compression.QUICK.to_dict(),
                                         "context_lengths": (16, 32, 64), "kivi_bits": (4,)})


@pytest.mark.parametrize("field, value", [("fit_steps", 0), ("fit_len", 0), ("fit_batch", 0),
                                          ("fit_windows", 0), ("fit_learning_rate", 0.0),
                                          ("fit_learning_rate", None)])
def test_kv_sizes_refuse_an_empty_fit(field, value):
  with pytest.raises(ValueError, match=f"{field}={value}"):
    kv_compression.KvCompressionSizes(**{**kv_compression.QUICK.to_dict(),
                                         "context_lengths": (16, 32, 64), field: value})


@pytest.mark.parametrize("rise, fit_s, expected", [
    ((0.004, 0.005, 0.006, 0.005, 0.004), (100,) * 5, "supported"),
    ((0.012, 0.013, 0.011, 0.014, 0.012), (100,) * 5, "refuted"),
    ((0.004, 0.005, 0.006, 0.005, 0.004), (100, 100, 700, 100, 100), "inconclusive"),  # > 10 min
])
def test_kv_calibrated_16x_extension_reads_rise_ratio_and_fit_time(rise, fit_s, expected):
  ext = next(e for e in kv_compression.CLAIM.extensions if e.name.startswith("16×"))
  runs = seed_runs({("r16-cal", "loss_rise"): rise, ("r16-cal", "kv_compression"): (16.0,) * 5,
                ("r16-cal", "fit_s"): fit_s, ("r16-cal", "edge_lr"): (0.0,) * 5})
  assert decide(ext.thresholds, runs, SEEDS)[0] == expected
  runs["r16-cal"][13]["kv_compression"] = 15.5  # below the target: the ratio control fails
  assert decide(ext.thresholds, runs, SEEDS)[0] == "inconclusive"


def test_kv_at_length_reads_the_long_model_at_t():
  full = kv_compression.FULL
  assert (full.model, full.seq_len, full.short_len, full.split) == (
      "llama-mini-long-20", 1024, 128, "test")  # v4: read at the longest committed length
  assert kv_compression.at_length(full, 1024) == full  # the axis reuses the registered run
  z = kv_compression.at_length(full, 128)
  assert (z.model, z.seq_len, z.short_len, z.n_short) == ("llama-mini-long-20", 128, 64, 64)
  assert models.RECIPES[z.model].seq_len >= full.seq_len
  assert z.context_lengths == (16, 32, 64, 128)
  assert z.n_eval * z.seq_len == full.n_eval * full.seq_len  # tokens measured kept
  assert z.n_calibration * z.seq_len == full.n_calibration * full.seq_len
  assert kv_compression.at_length(full, 512).short_len == 128  # the clause's T = 128 kept
  assert kv_compression.at_length(full, 512).n_eval == 16
  # the fit keeps its short windows at every T: calibrate short, deploy long
  assert (z.fit_len, z.fit_windows, z.fit_batch, z.fit_steps) == (
      full.fit_len, full.fit_windows, full.fit_batch, full.fit_steps)
  assert kv_compression.CLAIM.axis("context").values == (128, 256, 512, 1024)
  assert [a.name for a in kv_compression.CLAIM.axes] == ["context"]
  with pytest.raises(ValueError, match="T=2048.*trained at T = 1024"):
    kv_compression.at_length(full, 2048)
  with pytest.raises(ValueError, match=r"T=8.*within \[16, 1024\]"):
    kv_compression.at_length(full, 8)
  with pytest.raises(ValueError, match="T=128.*smoke test"):
    kv_compression.at_length(kv_compression.QUICK, 128)
  q = kv_compression.at_length(kv_compression.QUICK, 64)
  assert q == kv_compression.QUICK  # the quick model at its training length: QUICK itself
  assert max(q.context_lengths) <= q.seq_len <= models.RECIPES[q.model].cfg.max_len
  assert q.cost_windows <= q.n_calibration and q.exact_windows <= q.n_eval


def _primary_runs(rise, short_rise, ratio=8.0, err=1e-7):
  return seed_runs({("r8-loss", "loss_rise"): rise, ("r8-loss", "kv_compression"): (ratio,) * 5,
                    ("short-r8-loss", "loss_rise"): short_rise,
                    ("exact", "max_logit_error_rel"): (err,) * 5})


@pytest.mark.parametrize("rise, expected", [
    ((0.004, 0.005, 0.006, 0.005, 0.004), "supported"),
    ((0.012, 0.013, 0.011, 0.014, 0.012), "refuted"),
    ((0.0078, 0.0128, 0.0103, 0.0090, 0.0116), "inconclusive"),  # straddles 1%
])
def test_kv_clause_one_is_the_one_percent_tolerance_at_t_1024(rise, expected):
  claim = kv_compression.CLAIM
  runs = _primary_runs(rise, rise)  # no growth: clause 2 supported
  parts = rule.clause_verdicts(claim, runs, SEEDS, indicative=False)
  assert [p["verdict"] for p in parts] == [expected, "supported"]
  assert rule.verdict(claim, runs, SEEDS, indicative=False)[0] == expected
  runs["r8-loss"][10]["kv_compression"] = 7.9  # below the target: the ratio control fails
  assert decide(claim.thresholds, runs, SEEDS)[0] == "inconclusive"


@pytest.mark.parametrize("growth, expected", [
    ((0.001, 0.002, 0.0, 0.001, 0.002), "supported"),
    ((0.02, 0.025, 0.03, 0.022, 0.028), "refuted"),  # v3's context rows: +0.025 from 128
    ((0.001, 0.009, 0.0, 0.008, 0.002), "inconclusive"),  # straddles 0.5%
])
def test_kv_clause_two_reads_the_growth_from_t_128_to_t_1024(growth, expected):
  claim = kv_compression.CLAIM
  short = (0.004, 0.005, 0.004, 0.003, 0.004)
  runs = _primary_runs(tuple(a + b for a, b in zip(short, growth, strict=True)), short)
  parts = rule.clause_verdicts(claim, runs, SEEDS, indicative=False)
  assert parts[1]["verdict"] == expected and "T = 1024" in parts[0]["text"]
  assert rule.verdict(claim, runs, SEEDS, indicative=False)[0] == conjunction(
      [p["verdict"] for p in parts])


def test_kv_v4_reads_on_seeds_and_tuning_seeds_no_kept_version_used():
  claim = kv_compression.CLAIM
  assert claim.version == 4 and claim.seeds == SEEDS and claim.tuning_seeds == (110, 111)
  assert isinstance(claim.revisions[-1], Revision) and claim.revisions[-1].kind == "protocol"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)  # the runner's --keep rule passes


def test_kv_tunes_the_fit_on_two_seeds_on_val(monkeypatch):
  """v4's tuner: each tuning seed's own model, its `val` windows (never `test`), the mean 16×
  loss rise per rate (checked against numpy), each seed's kept."""
  import dataclasses
  cfg = transformer.preset("tiny").replace(max_len=64)
  nets = {s: transformer.init(cfg, jax.random.key(s)) for s in (110, 111)}
  monkeypatch.setattr(kv_arms.models, "base_models",
                      lambda name, seeds: [(nets[s], cfg) for s in seeds])
  splits = []
  windows = models.windows
  monkeypatch.setattr(kv_arms.models, "windows",
                      lambda seed, T, n, split: splits.append(split) or windows(seed, T, n, split))
  z = dataclasses.replace(kv_compression.QUICK, n_calibration=4, cost_windows=4, n_eval=2,
                          loss_grid=2, fit_windows=4, fit_steps=2, fit_learning_rate=None,
                          fit_rates=(1e-3, 3e-3, 1e-2, 3e-2))
  t = kv_arms.tune_fit_rate(z, (110, 111), extend=0, log=lambda m: None)
  assert t["seeds"] == [110, 111] and "test" not in splits and "val" in splits
  by_seed = np.asarray(t["losses_by_seed"], np.float64)
  assert by_seed.shape == (4, 2)
  np.testing.assert_allclose(t["losses"], by_seed.mean(axis=1), rtol=1e-12)
  assert t["learning_rate"] == t["grid"][int(np.argmin(by_seed.mean(axis=1)))]


def test_kv_goals_on_measures_the_goal_arms_as_the_claim_does():
  """The prose addendum's recipe is the claim's: on the claim's own windows, `goals_on` gives
  `measure_seed`'s numbers for every goal arm, fitted arms included."""
  import dataclasses
  cfg = transformer.preset("tiny").replace(max_len=64)
  params = transformer.init(cfg, jax.random.key(3))
  z = dataclasses.replace(kv_compression.QUICK, n_calibration=4, cost_windows=4, n_eval=4,
                          exact_windows=2, loss_grid=2, fit_windows=4, fit_steps=3)
  quiet = lambda m: None  # noqa: E731
  want, _ = kv_arms.measure_seed(params, cfg, 0, z, log=quiet)
  ev = models.windows(0, z.seq_len, z.n_eval, kv_arms.eval_split(z))  # the claim's windows
  got = kv_arms.goals_on(params, cfg, 0, z, ev, log=quiet)
  assert set(got) == {a for a, _, _ in kv_arms.GOAL_ARMS}
  for arm in got:
    for k in ("loss_rise", "kv_compression", "loss", "loss_full"):
      np.testing.assert_allclose(got[arm][k], want[arm][k], rtol=1e-5, atol=1e-7,
                                 err_msg=f"{arm} {k}")
  assert {a for a in got if "fit_s" in got[a]} == {"r16-cal", "r32q4-cal"}
  # the fit moved the projections: the fitted arm is not its SVD start
  assert got["r16-cal"]["loss"] != got["r16-loss"]["loss"]


def test_kv_fitted_extensions_need_their_rate_inside_the_grid():
  """v2: a fit rate still at an edge of its extended grid blocks both fitted extensions."""
  for name, arm in (("16×", "r16-cal"), ("32× with 4-bit coefficients after", "r32q4-cal")):
    ext = next(e for e in kv_compression.CLAIM.extensions if e.name.startswith(name))
    runs = seed_runs({(arm, "loss_rise"): (0.004, 0.005, 0.006, 0.005, 0.004),
                  (arm, "kv_compression"): (33.0,) * 5, (arm, "fit_s"): (100,) * 5,
                  (arm, "edge_lr"): (0.0,) * 5})
    assert decide(ext.thresholds, runs, SEEDS)[0] == "supported"
    for s in SEEDS:
      runs[arm][s]["edge_lr"] = 1.0
    assert decide(ext.thresholds, runs, SEEDS)[0] == "inconclusive"
  assert kv_compression.FULL.fit_learning_rate is None and len(kv_compression.FULL.fit_rates) >= 4


def test_kv_a_model_too_narrow_for_16x_still_measures_the_primary():
  """A model with one coefficient per head at 8× (`llama-micro-20`'s case) has no 16× cache:
  the 16× and fitted arms are skipped, the 8× primary is measured, and nothing is tuned."""
  import dataclasses
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=64)
  params = transformer.init(cfg, jax.random.key(5))
  z = dataclasses.replace(kv_compression.QUICK, n_calibration=4, cost_windows=4, n_eval=4,
                          exact_windows=2, loss_grid=2, fit_windows=4, fit_steps=3)
  runs, _ = kv_arms.measure_seed(params, cfg, 0, z, log=lambda m: None)
  assert {"r8-loss", "r8-uniform"} <= set(runs)
  assert not {"r16-loss", "r16-cal", "r32q4-loss", "r32q4-cal"} & set(runs)
  assert runs["r8-loss"]["kv_compression"] == pytest.approx(8.0)
  assert kv_arms.tune_fit_rate(dataclasses.replace(z, model="llama-micro-20"), 100,
                               log=lambda m: None) is None


def test_kv_exactness_control_is_relative_to_the_logit_scale():
  """v3: an error of 1.1e-4 on logits of size 30 is float32 rounding (3.7e-6 of the scale) and
  passes; the same relative error on the primary's instrument at 1e-4 would be broken."""
  runs = _primary_runs((0.2,) * 5, (0.2,) * 5, err=1.1e-4 / 30)
  assert decide(kv_compression.CLAIM.thresholds, runs, SEEDS)[0] == "refuted"
  runs["exact"][11]["max_logit_error_rel"] = 1e-4  # a broken latent model: nothing is read
  assert decide(kv_compression.CLAIM.thresholds, runs, SEEDS)[0] == "inconclusive"
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(2))
  w = jax.random.randint(jax.random.key(3), (2, 12), 0, 256)
  err = kv_arms.full_rank_error(params, cfg, w)
  logits = transformer.Transformer(cfg).apply({"params": params}, w)
  assert kv_arms.full_rank_error(params, cfg, w, relative=True) == pytest.approx(
      err / max(float(abs(logits).max()), 1.0))
