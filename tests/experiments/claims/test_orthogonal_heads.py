"""The orthogonal-heads claim: its theorem, the strength and arm tuning, its thresholds, and the
pull and per-head Muon on Llama (RoPE, GQA) against float64 references."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import analysis
import optim
import transformer
from experiments import models
from experiments.claims import orthogonal_heads
from experiments.lab import heads_training, tuning
from experiments.verdict.arithmetic.rule import clause_verdicts, extension_verdicts, verdict
from experiments.verdict.declare.axes import scale_models
from experiments.verdict.running import history
from tests.conftest import random_params

# ------------------------------------------------------------------ orthogonal heads


def _causal_softmax(s):
  T = s.shape[-1]
  s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_orthogonal_heads_can_share_one_pattern_so_provably_non_redundant_cannot_follow():
  """`orthogonal-heads`' theorem in float64: W_Q and W_K head blocks with mutually orthogonal
  column spaces (penalty R = 0) compute identical attention patterns on a stream confined to
  span(e_1, e_2); a generic stream separates them, so the construction is not vacuous."""
  rng = np.random.default_rng(11)
  e, c = np.eye(8), 1 / np.sqrt(2)
  w_q = c * np.stack([e[0] + e[2], e[1] + e[3], e[0] - e[2], e[1] - e[3]], 1)  # (D, H·Dh)
  w_k = c * np.stack([e[0] + e[4], e[1] + e[5], e[0] - e[4], e[1] - e[5]], 1)
  for w in (w_q, w_k):
    Q0, Q1 = np.linalg.qr(w[:, :2])[0], np.linalg.qr(w[:, 2:])[0]
    assert np.linalg.svd(Q0.T @ Q1, compute_uv=False).max() < 1e-15  # principal cosines 0
    with jax.enable_x64(True):
      R, _ = optim.head_gram_overlap(jnp.asarray(w, jnp.float64), n=2)
    assert float(R) == 0.0

  def patterns(X):
    return [_causal_softmax((X @ w_q[:, 2 * h:2 * h + 2]) @ (X @ w_k[:, 2 * h:2 * h + 2]).T
                            / np.sqrt(2)) for h in (0, 1)]

  for _ in range(5):
    X = np.zeros((12, 8))
    X[:, :2] = 3 * rng.standard_normal((12, 2))
    A0, A1 = patterns(X)
    np.testing.assert_allclose(A0, A1, rtol=1e-12, atol=1e-15)
    assert np.abs(A0 - np.tril(np.ones_like(A0)) / np.arange(1, 13)[:, None]).max() > 0.1
  A0, A1 = patterns(3 * rng.standard_normal((12, 8)))
  assert np.abs(A0 - A1).max() > 0.1


def test_choose_strength_takes_the_largest_that_is_free():
  rec = lambda loss: {"losses": [9.0, loss], "index": 1}
  choose = lambda by, adamw: heads_training.choose_strength(by, adamw,
                                                           orthogonal_heads.LOSS_MARGIN)
  assert choose({0.05: rec(2.50), 0.5: rec(2.519), 5.0: rec(2.53)}, 2.50) == 0.5
  assert choose({0.05: rec(2.49), 0.5: rec(2.48), 5.0: rec(2.47)}, 2.50) == 5.0
  assert choose({0.05: rec(2.60), 0.5: rec(2.70), 5.0: None}, 2.50) == 0.05
  with pytest.raises(ValueError, match="diverged"):
    choose({0.05: None}, 2.5)


def test_tune_arms_tunes_each_arm_and_every_strength_then_chooses(monkeypatch):
  """Every arm and every strength is tuned on the tuning seeds; a strength whose every rate
  diverged is recorded as None; the chosen strength's record becomes `orth`'s, last."""
  cfg = heads_training.model_config("quick", 4)
  losses = {"adamw": 2.50, "muon-per-head": 2.40, 0.05: 2.50, 0.5: 2.515, 5.0: None}
  seen = []

  def fake_tune(cfg_, make_tx, grid, *, seeds, steps, extend, **kw):
    key = make_tx if isinstance(make_tx, str) else make_tx.strength
    seen.append((key, tuple(grid), seeds, steps, extend))
    if losses[key] is None:
      raise ValueError("every rate diverged")
    return {"losses": [losses[key]], "index": 0, "learning_rate": 1e-3, "at_edge": False}

  monkeypatch.setattr(tuning, "tune_on_seeds", fake_tune)
  monkeypatch.setattr(heads_training, "orth_arm",
                      lambda c, s: types.SimpleNamespace(strength=s))
  z = dataclasses.replace(orthogonal_heads.FULL, steps=orthogonal_heads.FULL.budget_steps())
  tuned, by, strength = heads_training.tune_arms(
      cfg, {"adamw": "adamw", "muon-per-head": "muon-per-head"}, z,
      seeds=orthogonal_heads.TUNING_SEEDS, margin=orthogonal_heads.LOSS_MARGIN, kw={},
      log=lambda m: None)
  assert [k for k, *_ in seen] == ["adamw", "muon-per-head", 0.05, 0.5, 5.0]
  assert all(tuple(rest) == (z.grid, orthogonal_heads.TUNING_SEEDS, z.steps, z.extend)
             for _, *rest in seen)
  assert strength == 0.5 and by[5.0] is None and list(tuned) == ["adamw", "muon-per-head", "orth"]
  assert tuned["orth"] is by[0.5]
  tuned, by, strength = heads_training.tune_arms(cfg, {"adamw": None}, orthogonal_heads.QUICK,
                                                 seeds=(100,), margin=0.02, kw={})
  assert (strength, by, list(tuned)) == (0.5, {}, ["adamw", "orth"])
  assert tuned["orth"]["learning_rate"] == orthogonal_heads.QUICK.grid[0]


@pytest.mark.parametrize("losses, added, chosen", [
    # v2's case: 0.05 within the tolerance, 0.5 not; the bottom edge gets 0.005, 0.05 inside.
    ({0.05: 2.30, 0.5: 2.36, 5.0: 2.50, 0.005: 2.30}, [0.005], 0.05),
    # Every strength free: the top edge grows a decade twice, and 500 is still at the edge.
    ({0.05: 2.30, 0.5: 2.30, 5.0: 2.30, 50.0: 2.31, 500.0: 2.31}, [50.0, 500.0], 500.0),
    # None free: the smallest, extended below; 0.005 is free, then bracketed by 0.0005.
    ({0.05: 2.40, 0.5: 2.45, 5.0: 2.50, 0.005: 2.31, 0.0005: 2.30}, [0.005, 0.0005], 0.005),
    ({0.05: 2.30, 0.5: 2.31, 5.0: 2.40}, [], 0.5),  # chosen inside: nothing added
])
def test_the_strength_grid_follows_the_edge_rule(monkeypatch, losses, added, chosen):
  seen = []

  def fake_tune(cfg_, make_tx, grid, **kw):
    key = make_tx if isinstance(make_tx, str) else make_tx.strength
    seen.append(key)
    return {"losses": [2.30 if key == "adamw" else losses[key]], "index": 0,
            "learning_rate": 1e-3, "at_edge": False}

  monkeypatch.setattr(tuning, "tune_on_seeds", fake_tune)
  monkeypatch.setattr(heads_training, "orth_arm", lambda c, s: types.SimpleNamespace(strength=s))
  z = dataclasses.replace(orthogonal_heads.FULL, steps=8)
  assert z.extend_strength == 2
  _, by, strength = heads_training.tune_arms(
      heads_training.model_config("quick", 4), {"adamw": "adamw"}, z, seeds=(110, 111),
      margin=orthogonal_heads.LOSS_MARGIN, kw={}, log=lambda m: None)
  assert seen[4:] == added and strength == pytest.approx(chosen)
  assert list(by) == sorted(by)  # the notes and the figure read the grid in order
  inside = heads_training.strength_beyond_edge(list(by), strength) is None
  assert inside == (chosen != 500.0)


def _heads_runs(delta, **orth_metrics):
  seeds = (0, 1, 2, 3, 4)
  jitter = (-0.01, 0.0, 0.01, -0.005, 0.005)
  base = {"pattern_similarity": 0.3, "max_cos": 0.8, "val_loss": 2.5, "prunable_fraction": 0.5,
          "ended_diverged": 0.0, "any_ended_diverged": 0.0, "rates_at_grid_edge": 0.0,
          "rate_at_grid_edge": 0.0, "strength_at_grid_edge": 0.0}
  runs = {"adamw": {s: dict(base) for s in seeds},
          "orth": {s: {**base, "pattern_similarity": 0.3 + delta + j, "max_cos": 0.5,
                       **orth_metrics} for s, j in zip(seeds, jitter, strict=True)},
          "muon-per-head": {s: {**base, "pattern_similarity": 0.1 + j}
                            for s, j in zip(seeds, jitter, strict=True)},
          "construction": {s: heads_training.counterexample(s) for s in seeds}}
  return runs, seeds


def test_orthogonal_heads_reads_two_clauses_one_settled_by_proof():
  claim = orthogonal_heads.CLAIM
  primary = [t for t in claim.thresholds if not t.control]
  # The pattern similarity first: the primary effect the scale axis fits (`Claim.primary`).
  assert [(t.arm, t.baseline, t.metric) for t in primary] == [
      ("orth", "adamw", "pattern_similarity"), ("construction", None, "identical")]
  assert primary[0].margin == orthogonal_heads.PATTERN_MARGIN and primary[0].unit
  assert claim.primary is primary[0]
  assert claim.theorem and claim.clauses[0].proof and claim.clauses[1].proof is None
  assert orthogonal_heads.FULL.grid == (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)  # frozen
  assert not set(claim.seeds) & set(claim.tuning_seeds)
  clause = lambda r: clause_verdicts(claim, *r, indicative=False)[1]["verdict"]
  assert clause(_heads_runs(-0.15)) == "supported"
  assert clause(_heads_runs(-0.02)) == "refuted"  # lower, but inside the margin
  assert clause(_heads_runs(+0.05)) == "refuted"  # more alike
  assert clause(_heads_runs(-0.05)) == "inconclusive"  # straddles the margin
  # The pull did not make the heads more orthogonal in one seed: nothing can be read.
  runs, seeds = _heads_runs(-0.15)
  runs["orth"][3]["max_cos"] = 0.85
  assert clause((runs, seeds)) == "inconclusive"
  assert clause(_heads_runs(-0.15, rates_at_grid_edge=1.0)) == "inconclusive"
  assert clause(_heads_runs(-0.15, any_ended_diverged=1.0)) == "inconclusive"
  assert clause(_heads_runs(-0.15, strength_at_grid_edge=1.0)) == "inconclusive"
  # 'provably': the verified construction refutes it whatever training shows, and no control
  # of the training blocks it; the headline is the conjunction.
  for runs in (_heads_runs(-0.15), _heads_runs(-0.15, rates_at_grid_edge=1.0)):
    first = clause_verdicts(claim, *runs, indicative=False)[0]
    assert (first["verdict"], first["proof"]) == ("refuted", True)
    assert verdict(claim, *runs, indicative=False)[0] == "refuted"
  runs, seeds = _heads_runs(-0.15)
  runs["construction"] = {s: {**m, "identical": 0.0} for s, m in runs["construction"].items()}
  assert verdict(claim, runs, seeds, indicative=False)[0] == "supported"  # had it failed


def test_counterexample_matches_an_independent_float64_reference():
  """`heads.counterexample` against scipy's principal angles and the test above's patterns."""
  for seed in range(4):
    got = heads_training.counterexample(seed, T=12)
    assert got["identical"] == 1.0 and got["score_gap"] <= 1e-12
    e, c = np.eye(8), 1 / np.sqrt(2)
    for key, j in (("max_cos_q", 2), ("max_cos_k", 4)):
      a = c * np.stack([e[0] + e[j], e[1] + e[j + 1]], 1)
      b = c * np.stack([e[0] - e[j], e[1] - e[j + 1]], 1)
      ref = np.cos(scipy.linalg.subspace_angles(a, b)).max()
      assert got[key] == pytest.approx(ref, abs=1e-15) and got[key] < 1e-15
  # A larger stream changes nothing; a different seed draws a different stream.
  assert heads_training.counterexample(0, T=64)["identical"] == 1.0


def test_v3_reads_on_seeds_and_tuning_seeds_no_kept_version_used():
  claim = orthogonal_heads.CLAIM
  assert (claim.version, claim.seeds, claim.tuning_seeds) == (3, (10, 11, 12, 13, 14), (110, 111))
  assert orthogonal_heads.FULL.split == "test"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)


def test_orthogonal_heads_extensions_never_change_the_headline():
  runs, seeds = _heads_runs(-0.15, val_loss=2.6, prunable_fraction=0.7)
  assert clause_verdicts(orthogonal_heads.CLAIM, runs, seeds,
                         indicative=False)[1]["verdict"] == "supported"
  ext = {e["name"]: e["verdict"] for e in extension_verdicts(orthogonal_heads.CLAIM, runs,
                                                             seeds, indicative=False)}
  # 0.1 nats worse: not free; 0.2 more heads prunable: not non-redundant in function;
  # per-head Muon's heads 0.2 less alike: supported.
  assert ext == {"for free": "refuted", "non-redundant in function": "refuted",
                 "per-head Muon": "supported"}
  runs, seeds = _heads_runs(-0.15, val_loss=2.51, prunable_fraction=0.3)
  ext = {e["name"]: e["verdict"] for e in extension_verdicts(orthogonal_heads.CLAIM, runs,
                                                             seeds, indicative=False)}
  assert ext["for free"] == "supported" and ext["non-redundant in function"] == "supported"
  runs["muon-per-head"][2]["rate_at_grid_edge"] = 1.0  # its rate at an edge: unread
  ext = {e["name"]: e["verdict"] for e in extension_verdicts(orthogonal_heads.CLAIM, runs,
                                                             seeds, indicative=False)}
  assert ext["per-head Muon"] == "inconclusive"


# ------------------------------------- orthogonal heads on Llama: RoPE, GQA, SwiGLU, RMSNorm

LLAMA = transformer.preset("llama-tiny", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=96, max_len=16)


GQA = lambda h: h // (LLAMA.n_heads // LLAMA.n_kv_heads)  # the model's grouping: h // (H/K)


WRONG = lambda h: h % LLAMA.n_kv_heads  # interleaved: a plausible, wrong grouping


def _llama_params(seed=0):
  """Tiny-Llama parameters with `w_q`, `w_k` ×10, so that the heads attend far from uniformly."""
  params = random_params(LLAMA, seed)
  attn = params["blocks"]["attn"]
  attn = {**attn, **{k: jax.device_put(10 * np.asarray(attn[k])) for k in ("w_q", "w_k")}}
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


def _rope64(x_BTNDh, theta):
  """Rotate-half RoPE in float64 at positions 0..T-1 (feature i paired with i + Dh/2)."""
  T, dh = x_BTNDh.shape[1], x_BTNDh.shape[-1]
  angle = np.arange(T)[:, None] * theta ** (-np.arange(0, dh, 2) / dh)[None]  # (T, Dh/2)
  cos = np.cos(np.concatenate([angle, angle], -1))[None, :, None]
  sin = np.sin(np.concatenate([angle, angle], -1))[None, :, None]
  x1, x2 = np.split(x_BTNDh, 2, -1)
  return x_BTNDh * cos + np.concatenate([-x2, x1], -1) * sin


def _llama_maps64(params, tokens_BT, kv_head):
  """Every layer's attention maps `(L, B, H, T, T)` of the tiny Llama, a float64 numpy forward
  pass (RMSNorm, RoPE, SwiGLU); query head `h` reads key/value head `kv_head(h)`."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  cfg, (B, T) = LLAMA, tokens_BT.shape
  H, K, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
  rms = lambda x, s: x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * s
  x_BTD, maps, kv = p["embed"]["embedding"][tokens_BT], [], [kv_head(h) for h in range(H)]
  for l in range(cfg.n_layers):
    a, f = ({k: w[l] for k, w in p["blocks"][m].items()} for m in ("attn", "ffn"))
    h_BTD = rms(x_BTD, p["blocks"]["norm_1"]["scale"][l])
    q = _rope64((h_BTD @ a["w_q"]).reshape(B, T, H, dh), cfg.rope_theta)
    k = _rope64((h_BTD @ a["w_k"]).reshape(B, T, K, dh), cfg.rope_theta)[:, :, kv]
    v = (h_BTD @ a["w_v"]).reshape(B, T, K, dh)[:, :, kv]
    A_BHTS = _causal_softmax(np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(dh))
    maps.append(A_BHTS)
    x_BTD = x_BTD + np.einsum("bhts,bshd->bthd", A_BHTS, v).reshape(B, T, H * dh) @ a["w_o"]
    h_BTD = rms(x_BTD, p["blocks"]["norm_2"]["scale"][l])
    gate = h_BTD @ f["w_gate"]
    x_BTD = x_BTD + (gate / (1 + np.exp(-gate)) * (h_BTD @ f["w_1"])) @ f["w_2"]
  return np.stack(maps)


def _pattern_similarity64(A_BHTS):
  """Mean pairwise correlation of the heads' maps over the causal entries, each query row
  centred on its own mean (the claim's metric), written out in float64."""
  B, H, T, S = A_BHTS.shape
  valid = np.tril(np.ones((T, S), bool))
  mean = (A_BHTS * valid).sum(-1, keepdims=True) / valid.sum(-1)[:, None]
  c_HN = np.where(valid, A_BHTS - mean, 0.0).transpose(1, 0, 2, 3).reshape(H, -1)
  rho = (c_HN @ c_HN.T) / np.outer(np.linalg.norm(c_HN, axis=1), np.linalg.norm(c_HN, axis=1))
  return float((rho.sum() - np.trace(rho)) / (H * (H - 1)))


def _max_pair_cosine64(W_LDN, n):
  """Per layer, the largest principal cosine between two of the `n` column blocks, `(L,)`."""
  out = []
  for W in W_LDN:
    Q = [np.linalg.qr(b)[0] for b in np.split(W, n, axis=1)]
    out.append(max(np.linalg.svd(Q[i].T @ Q[j], compute_uv=False)[0]
                   for i in range(n) for j in range(i + 1, n)))
  return np.asarray(out)


def test_orthogonal_heads_trains_every_size_at_the_regime_with_the_shapes_own_heads():
  """v2: each size of the scale axis trains on at least 20 tokens per parameter (the steps
  rescale with the size; at most one step over), with the recipe's own heads."""
  z = orthogonal_heads.FULL
  assert z.budget_steps() == models.RECIPES["micro-20"].steps == 409
  for name in orthogonal_heads.CLAIM.axis("scale").values:
    at = dataclasses.replace(z, model=name)
    ratio = at.train_tokens() / models.param_count(name)
    assert models.TOKENS_PER_PARAM <= ratio < models.TOKENS_PER_PARAM + 2048 / 1000
    assert heads_training.model_config(name, z.n_heads) == models.RECIPES[name].cfg
  assert dataclasses.replace(z, steps=7).train_tokens() == 7 * 16 * 128
  claim = orthogonal_heads.CLAIM
  assert claim.version == 3 and not claim.axis("budget").values
  assert claim.axis("scale").values == ("pico-20", "micro-20", "mini-20")  # 8x in parameters
  sizes = [models.param_count(n) for n in claim.axis("scale").values]
  assert sizes[-1] / sizes[0] >= 8


def test_orthogonal_heads_model_keeps_each_familys_grouping():
  """GPT sizes train the exact model of every earlier run (K = H = 8: saved sizes stay valid);
  Llama sizes keep RoPE, RMSNorm, SwiGLU (d_ff = 3d) and two query heads per key/value head."""
  for name in ("quick", *models.CPU_SCALE["gpt"]):
    assert (heads_training.model_config(name, 8)
            == models.RECIPES[name].cfg.replace(n_heads=8, n_kv_heads=8))
  for name in models.CPU_SCALE["llama"]:
    base, cfg = models.RECIPES[name].cfg, heads_training.model_config(name, 8)
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.kv_groups) == (8, 4, base.kv_groups) == (8, 4, 2)
    assert (cfg.d_head, cfg.d_ff) == (base.d_model // 8, 3 * base.d_model)
    assert (cfg.positions, cfg.norm, cfg.activation) == ("rope", "rmsnorm", "swiglu")
  sizes = scale_models(orthogonal_heads.CLAIM, quick=False)  # the verdict is read at the first
  assert sizes == ("micro-20", "pico-20", "mini-20") and orthogonal_heads.FULL.model == "micro-20"
  with pytest.raises(ValueError, match="multiple of 2"):
    heads_training.model_config("llama-small", 5)


def test_orthogonal_heads_redundancy_on_gqa_matches_a_float64_llama_with_repeated_kv_heads():
  """What the claim measures per seed (`analysis.redundancy_summary`) on a tiny Llama equals a
  float64 numpy forward pass that repeats KV head h // (H/K) for query head h; the interleaved
  grouping h % K gives a different pattern similarity, and W_K's H-way split other cosines."""
  params = _llama_params()
  tokens = np.random.default_rng(1).integers(0, LLAMA.vocab_size, (2, 13))
  red = analysis.redundancy_summary(params, LLAMA, tokens)
  maps = _llama_maps64(params, tokens[:, :-1], GQA)
  per_layer = [_pattern_similarity64(A) for A in maps]
  np.testing.assert_allclose(red["per_layer"]["pattern_similarity"], per_layer, atol=1e-6)
  assert red["pattern_similarity"] == pytest.approx(np.mean(per_layer), abs=1e-6)
  wrong = [_pattern_similarity64(A) for A in _llama_maps64(params, tokens[:, :-1], WRONG)]
  assert np.abs(np.subtract(wrong, per_layer)).max() > 0.03  # 0.053 at layer 0
  # Heads sharing a KV head: the sown maps are the reference's, not the interleaved ones.
  assert np.abs(maps - _llama_maps64(params, tokens[:, :-1], WRONG)).max() > 0.1
  attn = params["blocks"]["attn"]
  for name in ("k", "v"):
    W = np.asarray(attn[f"w_{name}"], np.float64)
    ref = _max_pair_cosine64(W, LLAMA.n_kv_heads)
    np.testing.assert_allclose(red["per_layer"][f"max_cos_{name}"], ref, atol=1e-5)
    assert np.abs(_max_pair_cosine64(W, LLAMA.n_heads) - ref).max() > 0.05
  np.testing.assert_allclose(red["per_layer"]["max_cos"],
                             _max_pair_cosine64(np.asarray(attn["w_q"], np.float64),
                                                LLAMA.n_heads), atol=1e-5)


def _first_update(make_tx, params, seed=2):
  """`(grads, updates)` of the first step of `make_tx(1e-3)` on random gradients, float64."""
  leaves, tree = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  grads = jax.tree.unflatten(tree, [jnp.asarray(rng.standard_normal(x.shape), x.dtype)
                                    for x in leaves])
  tx = make_tx(1e-3)
  updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
  f64 = lambda t: jax.tree.map(lambda a: np.asarray(a, np.float64), t)
  return f64(grads), f64(updates)


def _overlap_grad64(W_DN, n):
  """`∇R` of `R = ½ Σ_{h≠g} ‖W_hᵀ W_g‖²` over `n` column blocks, block by block:
  `∇_{W_h} R = 2 Σ_{g≠h} W_g W_gᵀ W_h`."""
  blocks = np.split(W_DN, n, axis=1)
  return np.concatenate([2 * sum(blocks[g] @ blocks[g].T @ blocks[h]
                                 for g in range(n) if g != h) for h in range(n)], axis=1)


def test_orthogonal_heads_pull_splits_llama_keys_and_values_into_kv_heads():
  """The claim's `orth` arm on a tiny Llama: the first update is AdamW's `−η g/(|g| + ε)` minus
  `λ∇R`, with `R` over the K key/value heads of `w_k`, `w_v`, the H query heads of `w_q` and
  `w_o`'s rows; SwiGLU's `w_gate`, `w_1`, `w_2` and the norms get AdamW's alone. Splitting
  `w_k` into H blocks (half a head each) gives another update."""
  lam, params = 0.5, _llama_params()
  g, u = _first_update(heads_training.orth_arm(LLAMA, lam), params)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  adam = jax.tree.map(lambda x: -1e-3 * x / (np.abs(x) + 1e-8), g)
  H, K = LLAMA.n_heads, LLAMA.n_kv_heads
  for name, n in (("w_q", H), ("w_k", K), ("w_v", K), ("w_o", H)):
    W = p["blocks"]["attn"][name]
    pull = np.stack([_overlap_grad64(w.T if name == "w_o" else w, n) for w in W])
    pull = np.swapaxes(pull, -1, -2) if name == "w_o" else pull
    ref = adam["blocks"]["attn"][name] - lam * pull
    got = u["blocks"]["attn"][name]
    np.testing.assert_allclose(got, ref, atol=1e-6 * np.abs(ref).max() + 1e-9)
    if name == "w_k":
      wrong = adam["blocks"]["attn"][name] - lam * np.stack([_overlap_grad64(w, H) for w in W])
      assert np.abs(got - wrong).max() > 100 * 1e-6 * np.abs(ref).max()
  for path in (("blocks", "ffn", "w_gate"), ("blocks", "ffn", "w_1"), ("blocks", "ffn", "w_2"),
               ("blocks", "norm_1", "scale"), ("unembed", "w_out")):
    got, ref = u, adam
    for k in path:
      got, ref = got[k], ref[k]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-12)


def _newton_schulz64(G, steps=5, abc=(3.4445, -4.7750, 2.0315)):
  """Jordan's quintic Newton–Schulz iteration in float64 from `G / ‖G‖_F`."""
  a, b, c = abc
  X = G / (np.linalg.norm(G) + 1e-8)
  for _ in range(steps):
    A = X @ X.T
    X = a * X + (b * A + c * A @ A) @ X
  return X


def test_orthogonal_heads_per_head_muon_orthogonalises_each_llama_kv_head_block():
  """The claim's `muon-per-head` arm on a tiny Llama: the first update of `w_k`, `w_v` is
  `−η·0.2·√D·NS(g_k)` per key/value head block `(D, Dh)`, of `w_q` per query head, and SwiGLU's
  `w_gate` is orthogonalised whole (`−η·0.2·√F·NS(g)`); an H-way split of `w_k` differs."""
  params = _llama_params()
  g, u = _first_update(heads_training.muon_per_head_arm(LLAMA), params)
  D, F, H, K = LLAMA.d_model, LLAMA.d_ff, LLAMA.n_heads, LLAMA.n_kv_heads

  def per_block(G_LDN, n):
    return np.stack([np.concatenate([-1e-3 * 0.2 * np.sqrt(D) * _newton_schulz64(b)
                                     for b in np.split(G, n, axis=1)], axis=1) for G in G_LDN])

  for name, n in (("w_q", H), ("w_k", K), ("w_v", K)):
    ref = per_block(g["blocks"]["attn"][name], n)
    got = u["blocks"]["attn"][name]
    np.testing.assert_allclose(got, ref, atol=2e-3 * np.abs(ref).max())
    if name == "w_k":
      assert np.abs(got - per_block(g["blocks"]["attn"][name], H)).max() > 0.1 * np.abs(ref).max()
  ref = np.stack([-1e-3 * 0.2 * np.sqrt(F) * _newton_schulz64(G)
                  for G in g["blocks"]["ffn"]["w_gate"]])
  np.testing.assert_allclose(u["blocks"]["ffn"]["w_gate"], ref, atol=2e-3 * np.abs(ref).max())
