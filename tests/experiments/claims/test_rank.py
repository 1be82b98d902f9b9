"""The rank claims (kv-compression, adaptive-rank, lora): measurements, theorem, thresholds."""

import dataclasses
import itertools

import jax
import numpy as np
import optax
import pytest
import scipy.linalg
import scipy.stats

import transformer
from analysis import kv
from experiments import data, jsonio, models
from experiments.claims import CLAIMS, adaptive_rank, kv_compression
from experiments.claims import lora as lora_claim
from experiments.lab import kv_arms, kvcompress
from experiments.lab import lora as lora_lab
from experiments.train import sweep
from experiments.verdict import Spec, axes, folders
from experiments.verdict.rule import decide
from transformer import lora

# ----------------------------------------------------------------------------- adaptive-rank


def _brute_force(losses, ranks, budget):
  B = losses.shape[1]
  return min(sum(losses[ranks.index(r), b] for b, r in enumerate(combo))
             for combo in itertools.product(ranks, repeat=B) if np.mean(combo) <= budget)


@pytest.mark.parametrize("seed", range(4))
def test_allocate_against_brute_force_and_uniform(seed):
  """On non-convex curves: within budget, never worse than uniform, near the exact optimum."""
  rng = np.random.default_rng(seed)
  ranks = [1, 2, 4, 8]
  B = 5
  # Decreasing but non-convex curves (random drops), which broke the old greedy allocator.
  drops = rng.uniform(0, 1, (3, B)) * rng.choice([0.05, 1.0], (3, B))
  losses = 5 - np.concatenate([np.zeros((1, B)), np.cumsum(drops, 0)])
  for budget in (2, 4):
    chosen = adaptive_rank.allocate(losses, ranks, budget)
    got = sum(losses[ranks.index(r), b] for b, r in enumerate(chosen))
    assert chosen.mean() <= budget
    assert got <= losses[ranks.index(budget)].sum() + 1e-12  # uniform is feasible
    best = _brute_force(losses, ranks, budget)
    assert got >= best - 1e-12
    # At most one sequence's span off the optimum (one item of the LP relaxation rounded).
    assert got - best <= (losses[0] - losses[-1]).max() + 1e-12
    assert adaptive_rank.picked_loss(losses, ranks, chosen) == pytest.approx(got / B)
  with pytest.raises(ValueError, match="below the smallest rank"):
    adaptive_rank.allocate(losses, ranks, 0.5)


def test_allocate_finds_the_exact_optimum_on_convex_curves():
  ranks = [1, 2, 4, 8]
  # Sequence 0 gains a lot from rank, sequence 1 nothing: give 0 the budget 1 would waste.
  losses = np.array([[4.0, 1.0], [2.0, 1.0], [1.0, 1.0], [0.5, 1.0]])
  assert adaptive_rank.allocate(losses, ranks, 4).tolist() == [4, 4]  # uniform ties: uniform
  assert adaptive_rank.allocate(losses, ranks, 4.5).tolist() == [8, 1]
  assert _brute_force(losses, ranks, 4.5) == pytest.approx(0.5 + 1.0)


def test_needed_rank_and_measure_against_direct_computation():
  rng = np.random.default_rng(1)
  ranks = [1, 2, 4, 8]
  full = rng.uniform(1.0, 3.0, 40)
  excess = rng.uniform(0, 0.2, (1, 40)) * np.array([[8.0], [3.0], [0.5], [0.0]])
  losses = full + excess
  prefix = losses + rng.normal(0, 0.05, losses.shape)
  tol = 0.01 * full.mean()
  need = np.array([next(r for i, r in enumerate(ranks) if losses[i, b] <= full[b] + tol)
                   for b in range(40)])
  np.testing.assert_array_equal(adaptive_rank.needed_rank(losses, ranks), need)
  out = adaptive_rank.measure(losses, prefix, ranks, {"b": 2}, model_loss=full.mean())
  assert out["needs"]["spearman_loss_rank"] == pytest.approx(scipy.stats.spearmanr(full,
                                                                                   need)[0])
  assert out["needs"]["full_rank_error"] == pytest.approx(0, abs=1e-12)
  b = out["b"]
  policy = adaptive_rank.allocate(prefix, ranks, 2)
  want = (adaptive_rank.picked_loss(losses, ranks, policy) - losses[1].mean()) / full.mean()
  assert b["policy_vs_uniform"] == pytest.approx(want)
  assert b["oracle_vs_uniform"] <= 0 and b["policy_over_budget"] <= 0
  # A policy that reads the true curves is the oracle.
  same = adaptive_rank.measure(losses, losses, ranks, {"b": 2})["b"]
  assert same["policy_vs_uniform"] == pytest.approx(same["oracle_vs_uniform"])


def _runs(per_seed: dict, seeds=(0, 1, 2, 3, 4)) -> dict:
  """`{arm: {seed: {metric: value}}}` from `{(arm, metric): values per seed}`."""
  out: dict = {}
  for (arm, metric), values in per_seed.items():
    for s, v in zip(seeds, values, strict=True):
      out.setdefault(arm, {}).setdefault(s, {})[metric] = v
  return out


@pytest.mark.parametrize("diffs, expected", [
    ((-0.006, -0.005, -0.004, -0.005, -0.006), "supported"),
    ((0.001, 0.003, 0.002, 0.004, 0.003), "refuted"),    # the policy loses: no ratio hides it
    ((-0.0005, -0.001, 0.0, -0.0008, -0.0002), "refuted"),  # gains, but inside the margin
    ((-0.01, 0.004, -0.006, 0.002, -0.003), "inconclusive"),
])
def test_adaptive_rank_primary_is_a_difference_with_a_margin(diffs, expected):
  runs = _runs({("budget-quarter", "policy_vs_uniform"): diffs,
                ("budget-quarter", "policy_over_budget"): (0.0,) * 5,
                ("needs", "full_rank_error"): (1e-7,) * 5})
  assert decide(adaptive_rank.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected
  runs["needs"][2]["full_rank_error"] = 1e-3  # the instrument is broken: nothing can be read
  assert decide(adaptive_rank.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == "inconclusive"


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
  runs = _runs({("r16-cal", "loss_rise"): rise, ("r16-cal", "kv_compression"): (16.0,) * 5,
                ("r16-cal", "fit_s"): fit_s, ("r16-cal", "edge_lr"): (0.0,) * 5})
  assert decide(ext.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected
  runs["r16-cal"][3]["kv_compression"] = 15.5  # below the target: the ratio control fails
  assert decide(ext.thresholds, runs, (0, 1, 2, 3, 4))[0] == "inconclusive"


def test_kv_at_length_reads_the_long_model_at_t():
  full = kv_compression.FULL
  z = kv_compression.at_length(full, 1024)
  assert (z.model, z.seq_len, z.short_len) == ("llama-mini-long-20", 1024, 512)  # the regime's
  assert models.RECIPES[z.model].seq_len >= z.seq_len
  assert z.context_lengths == (16, 32, 64, 128, 256, 512, 1024)
  assert z.n_eval * z.seq_len == full.n_eval * full.seq_len  # tokens measured kept
  assert z.n_calibration * z.seq_len == full.n_calibration * full.seq_len
  assert z.cost_windows == 4  # 16 of 128 tokens would be 2 of 1024: the floor of 4 windows
  assert z.exact_windows <= z.n_eval and (z.allocs, z.kivi_bits) == (full.allocs, full.kivi_bits)
  assert kv_compression.at_length(full, 512).n_eval == 16
  # the fit keeps its short windows at every T: calibrate short, deploy long
  assert (z.fit_len, z.fit_windows, z.fit_batch, z.fit_steps) == (
      full.fit_len, full.fit_windows, full.fit_batch, full.fit_steps)
  assert kv_compression.CLAIM.context_lengths == ()  # v2: the long model is not at the regime
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


@pytest.mark.parametrize("rise, expected", [
    ((0.004, 0.005, 0.006, 0.005, 0.004), "supported"),
    ((0.012, 0.013, 0.011, 0.014, 0.012), "refuted"),
    ((0.0078, 0.0128, 0.0103, 0.0090, 0.0116), "inconclusive"),  # straddles 1%
])
def test_kv_primary_is_the_one_percent_tolerance(rise, expected):
  runs = _runs({("r8-loss", "loss_rise"): rise, ("r8-loss", "kv_compression"): (8.0,) * 5,
                ("exact", "max_logit_error_rel"): (1e-7,) * 5})
  assert decide(kv_compression.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected
  runs["r8-loss"][0]["kv_compression"] = 7.9  # below the target: the ratio control fails
  assert decide(kv_compression.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == "inconclusive"


# ----------------------------------------------------------------------------- lora


def test_subspace_overlap_against_scipy_principal_angles():
  rng = np.random.default_rng(2)
  a, b = rng.normal(size=(12, 10)), rng.normal(size=(12, 10))
  left, right = lora_lab.subspace_overlap(a, b, 3)
  ua, ub = np.linalg.svd(a)[0][:, :3], np.linalg.svd(b)[0][:, :3]
  va, vb = np.linalg.svd(a)[2][:3].T, np.linalg.svd(b)[2][:3].T
  assert left == pytest.approx(np.mean(np.cos(scipy.linalg.subspace_angles(ua, ub)) ** 2))
  assert right == pytest.approx(np.mean(np.cos(scipy.linalg.subspace_angles(va, vb)) ** 2))


def test_update_spectra_and_held_out_text():
  cfg = transformer.preset("tiny", d_model=32, n_heads=2)
  base = transformer.init(cfg, jax.random.key(0))
  tuned = jax.tree.map(lambda x: x * 1.5, base)
  spectra = lora_lab.update_spectra(base, tuned)
  w = np.asarray(base["blocks"]["attn"]["w_q"], np.float64)
  np.testing.assert_allclose(spectra["w_q"], 0.5 * np.linalg.svd(w, compute_uv=False),
                             rtol=1e-5, atol=1e-7)  # float32 differences
  ft, tune, test, files = lora_lab.held_out_text()
  assert len(ft) == pytest.approx(8 * len(test), rel=1e-3) and len(tune) > 0
  train_files = set(data.load_corpus("stdlib").train_files)
  assert files and not any(f.endswith(".py") or f in train_files for f in files)


def test_make_tx_takes_a_traced_learning_rate():
  """Under inject_hyperparams (a traced rate) it equals optax's own warm-up + cosine Adam."""
  lr, steps = 1e-2, 10
  ours = optax.inject_hyperparams(lora_lab.make_tx(steps))(learning_rate=lr)
  ref = optax.chain(optax.clip_by_global_norm(1.0),
                    optax.adam(optax.warmup_cosine_decay_schedule(0.0, lr, 1, steps)))
  params = {"w": jax.numpy.array([1.0, -2.0, 3.0])}
  s1, s2 = ours.init(params), ref.init(params)
  for i in range(4):
    g = {"w": jax.numpy.array([0.3, -0.1, 0.2]) * (i + 1)}
    u1, s1 = jax.jit(ours.update)(g, s1, params)
    u2, s2 = ref.update(g, s2, params)
    np.testing.assert_allclose(u1["w"], u2["w"], rtol=1e-5, atol=1e-9)
  assert np.abs(u1["w"]).max() > 0


@pytest.mark.parametrize("arms", [("lora-qv-r4",), ("lora-all-r16", "lora-qv-r8")])
def test_lora_sizes_refuse_arms_the_run_cannot_measure(arms):
  assert set(lora_claim.QUICK.arms) <= set(lora_claim.FULL.arms) == set(lora_lab.ARMS)
  assert lora_claim.FULL.tune and not lora_claim.QUICK.tune
  with pytest.raises(ValueError, match="lora-qv-r4"):
    lora_claim.LoraSizes(**{**lora_claim.QUICK.to_dict(), "arms": arms})


def test_lora_reads_the_trained_regime_and_its_scale_axis_is_micro_and_mini():
  assert (lora_claim.FULL.model, lora_claim.QUICK.model) == ("mini-20", "quick")
  claim = CLAIMS["lora"]
  assert claim.version == 3 and [r[:4] for r in claim.revisions] == ["v2: ", "v3: "]
  assert lora_claim.FULL.extend == 1  # v3: the edge rule
  assert claim.scale_models == ("micro-20", "mini-20")
  assert axes.scale_models(claim, quick=False) == ("mini-20", "micro-20")  # verdict first
  assert axes.scale_models(claim, quick=True) == ()
  cards = {n: models.model_card(n) for n in claim.scale_models}
  assert {n: (c["family"], c["d_model"], c["n_layers"], c["params"]) for n, c in cards.items()} == {
      "micro-20": ("gpt", 32, 2, 41_856), "mini-20": ("gpt", 64, 2, 132_864)}
  assert all(c["tokens_per_param"] >= models.TOKENS_PER_PARAM for c in cards.values())
  assert all(c["max_len"] >= lora_claim.FULL.seq_len for c in cards.values())
  res = jsonio.load_strict(f"{folders.RESULTS_DIR}/lora/results.json")
  if res.get("version", 1) == claim.version:  # the kept run is this registration's
    assert lora_claim.FULL.to_dict() == res["config"]["sizes"]


def test_lora_sizes_refuse_a_model_that_is_no_shared_base_model():
  with pytest.raises(ValueError, match=r"LoraSizes.model='nano' is not a shared base model"):
    dataclasses.replace(lora_claim.FULL, model="nano")  # a claim's shape: nothing trains it


def test_check_ranks_fits_every_scale_size_and_refuses_a_narrow_model(monkeypatch, tmp_path):
  arms = tuple(lora_lab.ARMS)
  for name in (*models.CPU_SCALE["gpt"], *CLAIMS["lora"].scale_models):
    lora_lab.check_ranks(models.config(name), arms, name)  # micro: every side >= 32
  # The boundary is lora.init's: rank == min(D_in, D_out) fits, one more does not.
  d16 = transformer.Config(vocab_size=256, d_model=16, n_layers=1, n_heads=2)
  lora_lab.check_ranks(d16, arms, "d16")
  jax.eval_shape(lambda: lora.init(transformer.init(d16, jax.random.key(0)), 16,
                                   jax.random.key(1), lora.ALL_HIDDEN))
  d8 = d16.replace(d_model=8)
  lora_lab.check_ranks(d8, ("lora-qv-r4",), "d8")
  with pytest.raises(ValueError, match=r"arm 'lora-qv-r16' has rank 16, above min\(D_in, "
                                       r"D_out\) = 8 of w_q \(8, 8\) at LoraSizes.model='d8'"):
    lora_lab.check_ranks(d8, arms, "d8")
  with pytest.raises(ValueError, match="rank=16 must be an integer in \\[1, 8\\]"):
    jax.eval_shape(lambda: lora.init(transformer.init(d8, jax.random.key(0)), 16,
                                     jax.random.key(1)))
  # `run` refuses before anything trains (base models are the first thing it would train).
  monkeypatch.setattr(models, "config", lambda name: d8)
  monkeypatch.setattr(models, "base_models", lambda *a, **k: pytest.fail("trained"))
  spec = Spec(quick=True, seeds=(0,), run_dir=str(tmp_path), sizes=lora_claim.QUICK,
              log=lambda *_: None)
  with pytest.raises(ValueError, match="arm 'lora-all-r16' has rank 16.*model='quick'"):
    lora_claim.run(spec)


def test_trainable_fraction_by_hand():
  cfg = models.RECIPES["small"].cfg
  d, f, L = cfg.d_model, cfg.d_ff, cfg.n_layers
  hidden = L * (4 * d * d + 2 * d * f)
  assert lora_lab.trainable_fraction(cfg, "lora-qv-r4") == pytest.approx(
      L * 2 * 4 * (d + d) / hidden)
  assert lora_lab.trainable_fraction(cfg, "lora-all-r16") == pytest.approx(
      L * 16 * (4 * (d + d) + 2 * (d + f)) / hidden)


def test_seed_indexed_picks_each_seeds_leaves_under_vmap():
  per_seed = [{"w": np.full(3, float(k))} for k in range(4)]
  init = lora_lab.seed_indexed((7, 100, 3, 0), per_seed)
  keys = jax.vmap(jax.random.key)(jax.numpy.asarray([3, 0, 7, 100]))
  idx, leaves = jax.jit(jax.vmap(init))(keys)
  assert idx.tolist() == [2, 3, 0, 1]
  np.testing.assert_array_equal(leaves["w"][:, 0], [2.0, 3.0, 0.0, 1.0])


def test_seeds_train_together_from_their_own_bases():
  """Two seeds with different bases in one program: the second equals that seed trained alone
  with its base closed over (the old form), and the base inside the trained leaves never moves."""
  cfg = transformer.preset("tiny", d_model=32, n_heads=2, n_layers=1, max_len=32)
  bases = [transformer.init(cfg, jax.random.key(k)) for k in (10, 11)]
  ft, tune, _, _ = lora_lab.held_out_text()
  src = data.TextSource(data.Corpus(ft, tune, (), ()), 16)
  got = lora_lab.train_arm(bases, cfg, src, (5, 9), (3e-3,), "lora-qv-r4", steps=3,
                             batch_size=2, seq_len=16)
  rank, targets = lora_lab.ARMS["lora-qv-r4"]
  ref = sweep.train_many(cfg, lora_lab.make_tx(3), seeds=(9,), learning_rates=(3e-3,),
                         steps=3, data=src, batch_size=2, seq_len=16,
                         params_fn=lora.params_fn(bases[1], alpha=float(rank)),
                         init_fn=lambda key: lora.init(bases[1], rank, key, targets),
                         eval_every=3, eval_batches=0)
  for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[0, 1], got.params)),
                  jax.tree.leaves(jax.tree.map(lambda x: x[0, 0], ref.params)), strict=True):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
  for j in range(2):
    moved = jax.tree.map(lambda x, y, j=j: float(np.abs(x[0, j] - y).max()),
                         got.trained["base"], bases[j])
    assert max(jax.tree.leaves(moved)) == 0.0
  trained_q = np.asarray(got.params["blocks"]["attn"]["w_q"][0, 1])
  assert np.abs(trained_q - np.asarray(bases[1]["blocks"]["attn"]["w_q"])).max() > 0


@pytest.mark.parametrize("excess, edge, expected", [
    ((0.002, 0.004, 0.003, 0.005, 0.001), 0.0, "supported"),
    ((0.03, 0.05, 0.04, 0.06, 0.035), 0.0, "refuted"),
    ((0.002, 0.004, 0.003, 0.005, 0.001), 1.0, "inconclusive"),  # the rate sat at the edge
])
def test_lora_primary_margin_and_controls(excess, edge, expected):
  runs = _runs({("lora-qv-r4", "excess_over_full"): excess,
                ("lora-qv-r4", "edge_lr"): (edge,) * 5, ("full", "edge_lr"): (0.0,) * 5,
                ("full", "gain"): (0.3,) * 5})
  assert decide(lora_claim.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected


def test_lora_primary_is_unchanged_by_the_in_domain_extension():
  """The headline reads the IDLE-docs setting only, with the thresholds it was registered with."""
  got = [(t.name, t.arm, t.metric, t.stat, t.supports, t.refutes, t.control, t.margin)
         for t in lora_claim.CLAIM.thresholds]
  assert got == [
      ("LoRA r4 on W_Q, W_V − full fine-tuning (test loss)", "lora-qv-r4", "excess_over_full",
       "ci", "< 0.01", "> 0.01", False, 0.01),
      ("full fine-tuning improves the test loss", "full", "gain", "range", "> 0", None, True,
       None),
      ("full fine-tuning's tuned rate inside the grid", "full", "edge_lr", "range", "== 0",
       None, True, None),
      ("lora-qv-r4's tuned rate inside the grid", "lora-qv-r4", "edge_lr", "range", "== 0",
       None, True, None)]
  assert lora_claim.CLAIM.hypothesis.startswith("Fine-tuning a shared base model on text it "
                                                "never saw (IDLE's .txt documents)")
  names = [e.name for e in lora_claim.CLAIM.extensions]
  assert names == ["a larger adapter", "full fine-tuning's update is low rank",
                   "in-domain adaptation"]
  ext = lora_claim.CLAIM.extensions[2]
  assert all(t.metric.startswith(lora_claim.IN_DOMAIN) for t in ext.thresholds)
  # It mirrors the primary: the same arms, conditions, margin and controls, on its own metrics.
  assert [(t.arm, t.metric.removeprefix(lora_claim.IN_DOMAIN), t.stat, t.supports, t.refutes,
           t.control, t.margin) for t in ext.thresholds] == [g[1:] for g in got]


def test_in_domain_text_is_held_out_and_split_by_file():
  ft, tune, test, files = lora_lab.in_domain_text()
  stdlib = data.load_corpus("stdlib")
  assert models.RECIPES["small"].train_config(0).val_fraction == 0.05  # the shared models' split
  assert models.RECIPES["small"].data == models.RECIPES["quick"].data == "stdlib"
  parts = [set(files[k]) for k in ("fine-tune", "tune", "test")]
  assert all(parts) and not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
  assert parts[0] | parts[1] | parts[2] == set(stdlib.val_files) | set(stdlib.test_files)
  assert not set(stdlib.train_files) & (parts[0] | parts[1] | parts[2])
  for text, key in ((ft, "fine-tune"), (tune, "tune"), (test, "test")):
    assert text.tobytes() == b"".join(data.file_bytes(f) for f in files[key])
  # No test or tuning file's bytes are a fine-tuning file's (a copy would be one file twice).
  fine = {data.file_bytes(f) for f in files["fine-tune"]}
  assert not any(data.file_bytes(f) in fine for f in files["test"] + files["tune"])
  total = len(ft) + len(tune) + len(test)
  assert lora_lab.IN_DOMAIN_TEST <= len(test) / total < 0.1
  assert lora_lab.IN_DOMAIN_TUNE * 0.5 < len(tune) / total < 0.1
  assert files == lora_lab.in_domain_text()[3]  # deterministic


def _in_domain_runs(excess, gain=(0.05,) * 5, edge=0.0, primary_excess=(0.2,) * 5):
  ind = lora_claim.IN_DOMAIN
  return _runs({("lora-qv-r4", ind + "excess_over_full"): excess,
                ("lora-qv-r4", ind + "edge_lr"): (edge,) * 5,
                ("full", ind + "edge_lr"): (0.0,) * 5, ("full", ind + "gain"): gain,
                # The primary's setting, far outside its margin: it must not leak in.
                ("lora-qv-r4", "excess_over_full"): primary_excess,
                ("lora-qv-r4", "edge_lr"): (0.0,) * 5, ("full", "edge_lr"): (0.0,) * 5,
                ("full", "gain"): (0.3,) * 5})


@pytest.mark.parametrize("excess, gain, edge, expected", [
    ((0.002, 0.004, 0.003, 0.005, 0.001), (0.05,) * 5, 0.0, "supported"),
    ((0.03, 0.05, 0.04, 0.06, 0.035), (0.05,) * 5, 0.0, "refuted"),
    ((0.004, 0.016, 0.009, 0.013, 0.006), (0.05,) * 5, 0.0, "inconclusive"),  # straddles 1%
    ((0.002, 0.004, 0.003, 0.005, 0.001), (0.05, 0.04, -0.01, 0.05, 0.05), 0.0,
     "inconclusive"),  # full fine-tuning did not gain on one seed: nothing can be read
    ((0.002, 0.004, 0.003, 0.005, 0.001), (0.05,) * 5, 1.0, "inconclusive"),  # rate at an edge
])
def test_lora_in_domain_extension_verdict(excess, gain, edge, expected):
  ext = lora_claim.CLAIM.extensions[2]
  runs = _in_domain_runs(excess, gain, edge)
  assert decide(ext.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected
  # The headline is read from the primary's metrics alone (here refuted, whatever in-domain says).
  assert decide(lora_claim.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == "refuted"


def test_lora_sizes_refuse_in_domain_arms_without_the_extensions_arm():
  assert lora_claim.QUICK.in_domain_arms == lora_claim.FULL.in_domain_arms == ("lora-qv-r4",)
  with pytest.raises(ValueError, match="in_domain_arms"):
    lora_claim.LoraSizes(**{**lora_claim.QUICK.to_dict(), "in_domain_arms": ("lora-all-r16",)})


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
  ev = models.windows(0, z.seq_len, z.n_eval, "val")
  got = kv_arms.goals_on(params, cfg, 0, z, ev, log=quiet)
  assert set(got) == {a for a, _, _ in kv_arms.GOAL_ARMS}
  for arm in got:
    for k in ("loss_rise", "kv_compression", "loss", "loss_full"):
      np.testing.assert_allclose(got[arm][k], want[arm][k], rtol=1e-5, atol=1e-7,
                                 err_msg=f"{arm} {k}")
  assert {a for a in got if "fit_s" in got[a]} == {"r16-cal", "r32q4-cal"}
  # the fit moved the projections: the fitted arm is not its SVD start
  assert got["r16-cal"]["loss"] != got["r16-loss"]["loss"]


def test_kv_goals_prose_windows_are_held_out_prose():
  from experiments.commands import kvgoals
  files = data.mixed_files()
  prose = [f for f in files["test"] if data.file_kind(f) == "prose"]
  assert prose and not set(prose) & (set(files["train"]) | set(files["val"]))
  raw = kvgoals.prose_bytes()
  assert len(raw) == sum(len(data.read_files((f,))) for f in prose)
  w = kvgoals.prose_windows(32, 5)
  assert w.shape == (5, 33)
  np.testing.assert_array_equal(w[0], raw[:33])  # evenly spaced from the first byte ...
  np.testing.assert_array_equal(w[-1], raw[-33:])  # ... to the last
  with pytest.raises(ValueError, match="T=0"):
    kvgoals.prose_windows(0, 5)


def test_kv_goals_summary_reads_each_goal_from_its_interval():
  from experiments.commands import kvgoals
  per = {s: {"r8-loss": {"loss_rise": r8, "kv_compression": 8.0},
             "r16-cal": {"loss_rise": r16, "kv_compression": 16.0},
             "r32q4-loss": {"loss_rise": 0.03, "kv_compression": 31.0}}
         for s, (r8, r16) in enumerate([(0.005, 0.009), (0.006, 0.012), (0.004, 0.010)])}
  s = kvgoals.summary(per)
  assert s["r8-loss"]["met"] is True and s["r8-loss"]["loss_rise_pct"] == pytest.approx(0.5)
  assert s["r16-cal"]["met"] is None  # mean 1.03%, interval straddles 1%
  assert s["r16-cal"]["margin_pct"] == pytest.approx(1 - 31 / 30)
  assert s["r32q4-loss"]["met"] is False  # the ratio 31 < 32, whatever the loss
  assert "r32q4-cal" not in s


@pytest.mark.parametrize("best, chosen, edge", [
    (0.2, 0.1, False),   # best past the top edge by less than a step: the extension brackets it
    (0.5, 1.0, True),    # still at the extended edge: the control fails
    (5e-4, 1e-3, False),  # below the bottom edge: extended downward, then bracketed
    (0.01, 0.01, False),  # inside the grid: nothing extends
])
def test_tune_rates_extends_a_grid_edge_once_by_one_step(monkeypatch, best, chosen, edge):
  """The registered edge rule: the tuning-text loss `(log10 η − log10 best)²` is least at
  `best`; a best rate at an edge of (1e-3, 1e-2, 1e-1) adds one rate a decade beyond it."""
  runs = []

  class Result:
    def __init__(self, rates):
      self.params = np.asarray(rates, np.float64).reshape(-1, 1)  # (rates, seeds): the rate
      self.diverged = np.zeros((len(rates), 1), bool)

  def train_arm(bases, cfg, src, seeds, rates, arm, **kw):
    runs.append(list(rates))
    return Result(rates)

  monkeypatch.setattr(lora_lab, "train_arm", train_arm)
  monkeypatch.setattr(lora_lab, "text_loss",
                      lambda p, cfg, text, T: 10.0 if np.ndim(p) == 0 and p == 0 else
                      float((np.log10(float(p)) - np.log10(best)) ** 2))
  monkeypatch.setattr(lora_lab.data, "TextSource", lambda *a: None)
  monkeypatch.setattr(lora_lab.data, "Corpus", lambda *a: None)
  z = dataclasses.replace(lora_claim.FULL, extend=1)
  base = np.float64(0.0)  # the base model's tuning loss: 10, above every run
  out = lora_lab.tune_rates(base, None, ("full",), z, lambda *_: None, (b"", b"", b""),
                            grid=(1e-3, 1e-2, 1e-1), tune_seed=100)["full"]
  assert out["learning_rate"] == pytest.approx(chosen) and out["edge"] is edge
  assert len(runs) == (1 if best == 0.01 else 2) and len(runs[-1]) in (1, 3)
  assert out["grid"] == sorted(out["grid"]) and len(out["grid"]) == len(out["val_loss"])


def test_kv_fitted_extensions_need_their_rate_inside_the_grid():
  """v2: a fit rate still at an edge of its extended grid blocks both fitted extensions."""
  for name, arm in (("16×", "r16-cal"), ("32× with 4-bit coefficients after", "r32q4-cal")):
    ext = next(e for e in kv_compression.CLAIM.extensions if e.name.startswith(name))
    runs = _runs({(arm, "loss_rise"): (0.004, 0.005, 0.006, 0.005, 0.004),
                  (arm, "kv_compression"): (33.0,) * 5, (arm, "fit_s"): (100,) * 5,
                  (arm, "edge_lr"): (0.0,) * 5})
    assert decide(ext.thresholds, runs, (0, 1, 2, 3, 4))[0] == "supported"
    for s in range(5):
      runs[arm][s]["edge_lr"] = 1.0
    assert decide(ext.thresholds, runs, (0, 1, 2, 3, 4))[0] == "inconclusive"
  assert kv_compression.FULL.fit_learning_rate is None and len(kv_compression.FULL.fit_rates) >= 4
  assert (kv_compression.FULL.model, kv_compression.CLAIM.version) == ("mini-20", 3)


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
  runs = _runs({("r8-loss", "loss_rise"): (0.2,) * 5, ("r8-loss", "kv_compression"): (8.0,) * 5,
                ("exact", "max_logit_error_rel"): (1.1e-4 / 30,) * 5})
  assert decide(kv_compression.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == "refuted"
  runs["exact"][1]["max_logit_error_rel"] = 1e-4  # a broken latent model: nothing is read
  assert decide(kv_compression.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == "inconclusive"
  cfg = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16)
  params = transformer.init(cfg, jax.random.key(2))
  w = jax.random.randint(jax.random.key(3), (2, 12), 0, 256)
  err = kv_arms.full_rank_error(params, cfg, w)
  logits = transformer.Transformer(cfg).apply({"params": params}, w)
  assert kv_arms.full_rank_error(params, cfg, w, relative=True) == pytest.approx(
      err / max(float(abs(logits).max()), 1.0))
