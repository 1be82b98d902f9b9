"""The lora claim: subspace overlap and update spectra against scipy, sizes and the trained regime,
seeds trained together, the primary and in-domain thresholds, the edge rule of its tuning."""

import dataclasses

import jax
import numpy as np
import optax
import pytest
import scipy.linalg
import scipy.stats

import transformer
from experiments import data, jsonio, models
from experiments.claims import CLAIMS
from experiments.claims import lora as lora_claim
from experiments.lab import lora as lora_lab
from experiments.train import sweep
from experiments.verdict import Spec
from experiments.verdict.arithmetic import rule
from experiments.verdict.arithmetic.rule import decide
from experiments.verdict.declare import axes
from experiments.verdict.running import folders, history
from tests.experiments.claims.rank_helpers import seed_runs
from transformer import lora

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


def test_lora_reads_the_trained_regime_and_its_scale_axis_spans_9x():
  assert (lora_claim.FULL.model, lora_claim.QUICK.model) == ("mini-20", "quick")
  claim = CLAIMS["lora"]
  assert claim.version == 4 and [str(r)[:4] for r in claim.revisions] == ["v2: ", "v3: ", "v4 ("]
  assert lora_claim.FULL.extend == 1  # v3: the edge rule
  assert claim.axis("scale").values == ("pico-20", "micro-20", "mini-20")
  assert axes.scale_models(claim, quick=False)[0] == "mini-20"  # verdict first
  assert axes.scale_models(claim, quick=True) == ()
  cards = {n: models.model_card(n) for n in claim.axis("scale").values}
  assert {n: (c["family"], c["d_model"], c["n_layers"], c["params"]) for n, c in cards.items()} == {
      "pico-20": ("gpt", 16, 2, 14_784), "micro-20": ("gpt", 32, 2, 41_856),
      "mini-20": ("gpt", 64, 2, 132_864)}
  assert cards["mini-20"]["params"] / cards["pico-20"]["params"] >= 8  # issue 50 item 4
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
  for name in (*models.CPU_SCALE["gpt"], *CLAIMS["lora"].axis("scale").values):
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
  runs = seed_runs({("lora-qv-r4", "excess_over_full"): excess,
                ("lora-qv-r4", "edge_lr"): (edge,) * 5, ("full", "edge_lr"): (0.0,) * 5,
                ("full", "gain"): (0.3,) * 5, ("lora-qv-r4", "dW_rank_excess"): (0.0,) * 5})
  assert decide(lora_claim.CLAIM.thresholds, runs, (0, 1, 2, 3, 4))[0] == expected
  parts = rule.clause_verdicts(lora_claim.CLAIM, runs, (0, 1, 2, 3, 4), indicative=False)
  assert [p["verdict"] for p in parts] == [expected, "supported"]  # the rank clause: no control
  assert [p["proof"] for p in parts] == [False, True]
  runs["lora-qv-r4"][2]["dW_rank_excess"] = 1.0  # one update above its rank: not verified
  assert rule.clause_verdicts(lora_claim.CLAIM, runs, (0, 1, 2, 3, 4),
                              indicative=False)[1]["verdict"] == "inconclusive"
  for s in range(5):  # every seed's: the proof is refuted, and the sentence with it
    runs["lora-qv-r4"][s]["dW_rank_excess"] = 1.0
  assert rule.verdict(lora_claim.CLAIM, runs, (0, 1, 2, 3, 4), indicative=False)[0] == "refuted"


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
       None, True, None),
      (lora_claim.RANK, "lora-qv-r4", "dW_rank_excess", "range", "<= 0", "> 0", False, None)]
  assert lora_claim.CLAIM.hypothesis.startswith("Fine-tuning a shared base model on text it "
                                                "never saw (IDLE's .txt documents)")
  names = [e.name for e in lora_claim.CLAIM.extensions]
  assert names == ["a larger adapter", "full fine-tuning's update is low rank",
                   "in-domain adaptation"]
  ext = lora_claim.CLAIM.extensions[2]
  assert all(t.metric.startswith(lora_claim.IN_DOMAIN) for t in ext.thresholds)
  # It mirrors the primary: the same arms, conditions, margin and controls, on its own metrics.
  assert [(t.arm, t.metric.removeprefix(lora_claim.IN_DOMAIN), t.stat, t.supports, t.refutes,
           t.control, t.margin) for t in ext.thresholds] == [g[1:] for g in got[:4]]


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
  return seed_runs({("lora-qv-r4", ind + "excess_over_full"): excess,
                ("lora-qv-r4", ind + "edge_lr"): (edge,) * 5,
                ("full", ind + "edge_lr"): (0.0,) * 5, ("full", ind + "gain"): gain,
                # The primary's setting, far outside its margin: it must not leak in.
                ("lora-qv-r4", "excess_over_full"): primary_excess,
                ("lora-qv-r4", "edge_lr"): (0.0,) * 5, ("full", "edge_lr"): (0.0,) * 5,
                ("full", "gain"): (0.3,) * 5, ("lora-qv-r4", "dW_rank_excess"): (0.0,) * 5})


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
  out = lora_lab.tune_rates([base], None, ("full",), z, lambda *_: None, (b"", b"", b""),
                            grid=(1e-3, 1e-2, 1e-1), tune_seeds=(100,))["full"]
  assert out["learning_rate"] == pytest.approx(chosen) and out["at_edge"] is edge
  assert len(runs) == (1 if best == 0.01 else 2) and len(runs[-1]) in (1, 3)
  assert out["grid"] == sorted(out["grid"]) and len(out["grid"]) == len(out["losses"])


def test_in_domain_text_v4_tests_on_test_files_and_tunes_on_val_files():
  ft, tune, test, files = lora_lab.in_domain_text("test")
  stdlib = data.load_corpus("stdlib")
  assert set(files["test"]) <= set(stdlib.test_files)
  assert set(files["tune"]) | set(files["fine-tune"]) == set(stdlib.val_files)
  assert not set(files["tune"]) & set(files["fine-tune"])
  total = sum(data.file_size(f) for f in stdlib.val_files + stdlib.test_files)
  assert len(test) >= lora_lab.IN_DOMAIN_TEST * total
  assert len(tune) >= lora_lab.IN_DOMAIN_TUNE * total
  assert len(test) < 0.1 * total and len(tune) < 0.1 * total  # bounded cost, as v1-v3
  with pytest.raises(ValueError, match="split='val'"):
    lora_lab.in_domain_text("val")


def test_update_rank_excess_against_an_svd_count():
  """The rank clause's measurement: the float64 rank of each layer's A B minus R, against the
  count of singular values above a float64 tolerance, on the update the model computes."""
  rng = np.random.default_rng(4)
  ab = {"w_q": {"A": rng.normal(size=(2, 16, 4)), "B": rng.normal(size=(2, 4, 12))},
        "w_v": {"A": rng.normal(size=(2, 16, 4)), "B": np.zeros((2, 4, 12))}}
  assert lora_lab.update_rank_excess(ab) == 0.0
  for a, b in zip(ab["w_q"]["A"], ab["w_q"]["B"], strict=True):
    sv = np.linalg.svd(a @ b, compute_uv=False)
    assert int((sv > 1e-10 * sv[0]).sum()) == 4
  # The adapters measured are the update the model computes: merge(base) − base = (α/R) A B.
  cfg = transformer.preset("tiny", d_model=32, n_heads=2)
  base = transformer.init(cfg, jax.random.key(0))
  adapters = jax.tree.map(lambda x: x + 0.1 * rng.normal(size=x.shape).astype(np.float32),
                          lora.init(base, 4, jax.random.key(1)))  # B ≠ 0, rank 4
  got = lora.merge(base, adapters, 4.0)["blocks"]["attn"]["w_q"]
  d = np.asarray(got, np.float64) - np.asarray(base["blocks"]["attn"]["w_q"], np.float64)
  ref = np.einsum("lir,lro->lio", np.asarray(adapters["w_q"]["A"], np.float64),
                  np.asarray(adapters["w_q"]["B"], np.float64))
  np.testing.assert_allclose(d, ref, atol=1e-5)
  assert lora_lab.update_rank_excess(adapters) == 0.0
  five = {"w_q": {"A": rng.normal(size=(1, 16, 5)), "B": rng.normal(size=(1, 5, 12))}}
  assert lora_lab.update_rank_excess(five) == 0.0  # rank 5 of R = 5
  five["w_q"]["B"][0, 4] = 0.0  # a column of A unused: rank 4, below R
  assert lora_lab.update_rank_excess(five) == -1.0


def test_tune_rates_on_two_seeds_reads_the_mean(monkeypatch):
  """v4: both tuning seeds' bases train together; a rate's loss is their mean (numpy), each
  seed's kept, and a rate non-finite on one seed is out of the choice."""
  class Result:
    def __init__(self, rates):
      self.params = np.asarray([[r, -r] for r in rates])  # seed 1's runs carry -rate
      self.diverged = np.zeros((len(rates), 2), bool)

  def train_arm(bases, cfg, src, seeds, rates, arm, **kw):
    assert seeds == (110, 111) and len(bases) == 2
    return Result(rates)

  def loss(p, cfg, text, T):
    if np.ndim(p) == 0 and p in (0.0, 1.0):
      return 5.0
    r = abs(float(p))
    shift = 0.1 if p > 0 else -0.05
    return float("nan") if (p < 0 and r == 1e-1) else (np.log10(r) + 2) ** 2 + shift

  monkeypatch.setattr(lora_lab, "train_arm", train_arm)
  monkeypatch.setattr(lora_lab, "text_loss", loss)
  monkeypatch.setattr(lora_lab.data, "TextSource", lambda *a: None)
  monkeypatch.setattr(lora_lab.data, "Corpus", lambda *a: None)
  z = dataclasses.replace(lora_claim.FULL, extend=0)
  out = lora_lab.tune_rates([np.float64(0.0), np.float64(1.0)], None, ("full",), z,
                            lambda *_: None, (b"", b"", b""), grid=(1e-3, 1e-2, 1e-1),
                            tune_seeds=(110, 111))["full"]
  by_seed = np.asarray(out["losses_by_seed"], np.float64)
  assert out["seeds"] == [110, 111] and by_seed.shape == (3, 2)
  np.testing.assert_allclose(out["losses"][:2], by_seed[:2].mean(axis=1), rtol=1e-12)
  assert out["excluded"] == [False, False, True] and out["learning_rate"] == 1e-2
  assert out["base_tune_loss"] == 5.0


def test_lora_v4_reads_on_seeds_and_tuning_seeds_no_kept_version_used():
  claim = CLAIMS["lora"]
  assert claim.seeds == (10, 11, 12, 13, 14) and claim.tuning_seeds == (110, 111)
  assert lora_claim.FULL.split == "test" and claim.revisions[-1].kind == "protocol"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)  # the runner's --keep rule passes
