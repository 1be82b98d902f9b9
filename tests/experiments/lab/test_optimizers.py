"""The optimizer claims' arms against optax/optim references, and their measurements against
numpy/scipy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

import analysis
import optim
import transformer
from analysis.heads import head_ablation, pattern_similarity
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates

CFG = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)
LR = 3e-3
EVERY = 2  # the condition arm's refresh period in these tests
ARMS = {
    "adamw": O.adamw_arm(weight_decay=0.1),
    "muon": O.muon_arm(),
    "muon_per_head": O.muon_arm(n_heads=CFG.n_heads),
    "orthogonal_heads": O.orthogonal_heads_arm(strength=1e-2, n_heads=CFG.n_heads,
                                               weight_decay=0.1),
    "condition": O.condition_arm(every=EVERY),
    "frozen_condition": O.frozen_condition_arm(),
    "lr_cut": O.lr_cut_arm(factor=0.5),
}


@pytest.fixture(scope="module")
def params():
  return transformer.init(CFG, jax.random.key(0))


def _grads(params, seed):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [jax.random.normal(k, p.shape, p.dtype)
                                   for k, p in zip(keys, leaves, strict=True)])


def _run(tx, params, steps=3, apply=True):
  """Updates and states of `steps` steps on random gradients (the same for every `tx`)."""
  state, updates, states = jax.jit(tx.init)(params), [], []
  update = jax.jit(tx.update)
  for t in range(steps):
    u, state = update(_grads(params, t), state, params)
    updates.append(u)
    states.append(state)
    if apply:
      params = optax.apply_updates(params, u)
  return updates, states


@pytest.fixture(scope="module")
def direct(params):
  """`direct(name)`: `_run` of `ARMS[name](LR)` for 3 steps, computed once per module."""
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = _run(ARMS[name](LR), params, steps=EVERY + 1)
    return cache[name]

  return get


def _close(a, b, **kw):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, **kw), a, b)


# ---------------------------------------------------------------------- update statistics


def test_sv_entropy_known_values():
  rng = np.random.default_rng(0)
  Q = np.linalg.qr(rng.standard_normal((9, 5)))[0]
  with jax.enable_x64(True):
    assert float(updates.sv_entropy(jnp.asarray(3 * Q))) == pytest.approx(1.0, abs=1e-12)
    assert float(updates.sv_entropy(jnp.asarray(3 * Q.T))) == pytest.approx(1.0, abs=1e-12)
    rank1 = np.outer(rng.standard_normal(6), rng.standard_normal(4))
    assert float(updates.sv_entropy(jnp.asarray(rank1))) == pytest.approx(0.0, abs=1e-12)
    s = np.array([3.0, 2.0, 1.0])
    W = np.linalg.qr(rng.standard_normal((7, 3)))[0] * s @ np.linalg.qr(
        rng.standard_normal((3, 3)))[0]
    p = s**2 / np.sum(s**2)
    assert float(updates.sv_entropy(jnp.asarray(W))) == pytest.approx(
        -np.sum(p * np.log(p)) / np.log(3), rel=1e-12)
  assert float(updates.sv_entropy(jnp.asarray(Q, jnp.float32))) == pytest.approx(1.0, abs=1e-6)
  assert float(updates.sv_entropy(jnp.zeros((4, 4)))) == 0.0
  with pytest.raises(ValueError, match="min"):
    updates.sv_entropy(jnp.ones((5, 1)))


def test_update_statistics_matches_numpy_svd(params):
  stats = jax.jit(updates.update_statistics)(params)
  attn, ffn = params["blocks"]["attn"], params["blocks"]["ffn"]
  # Tree order: attn/{w_k, w_o, w_q, w_v}, then ffn/{w_1, w_2}; each contributes L matrices.
  mats = [np.asarray(m[l], np.float64) for m in (attn["w_k"], attn["w_o"], attn["w_q"],
                                                 attn["w_v"], ffn["w_1"], ffn["w_2"])
          for l in range(CFG.n_layers)]
  s = [np.linalg.svd(m, compute_uv=False) for m in mats]
  np.testing.assert_allclose(stats["condition_number"], [x[0] / x[-1] for x in s], rtol=1e-3)
  np.testing.assert_allclose(stats["condition_number_p90"],
                             [x[0] / x[int(np.ceil(0.9 * x.size)) - 1] for x in s], rtol=1e-4)
  p = [x**2 / np.sum(x**2) for x in s]
  np.testing.assert_allclose(stats["sv_entropy"],
                             [-np.sum(q * np.log(q)) / np.log(q.size) for q in p], rtol=1e-5)
  ffn_only = updates.update_statistics(params, optim.select(names=("w_1",)))
  np.testing.assert_allclose(ffn_only["sv_entropy"], stats["sv_entropy"][8:10], rtol=1e-6)
  with pytest.raises(ValueError, match="no leaf"):
    updates.update_statistics(params, optim.select(names=("nothing",)))


def test_muon_updates_are_near_orthogonal_and_adamw_updates_are_not(direct):
  muon = updates.update_statistics(direct("muon")[0][0])
  adamw = updates.update_statistics(direct("adamw")[0][0])
  assert np.all(np.asarray(muon["sv_entropy"]) > 0.97)
  assert np.all(np.asarray(muon["sv_entropy"]) > np.asarray(adamw["sv_entropy"]))
  assert np.all(np.asarray(muon["condition_number_p90"]) < 2.5)


# ------------------------------------------------------------------------- steps to a loss


def test_steps_to_loss():
  assert tuning.steps_to_loss([0, 100, 200], [5.0, 3.0, 2.0], 2.5) == 150.0
  assert tuning.steps_to_loss([0, 100, 200], [5.0, 3.0, 2.0], 3.0) == 100.0
  assert tuning.steps_to_loss([10, 20], [1.0, 0.5], 2.0) == 10.0
  assert tuning.steps_to_loss([0, 1, 2], [3.0, 2.9, 2.8], 2.0) is None
  assert tuning.steps_to_loss([0, 1, 2, 3], [3.0, np.nan, 1.0, 0.0], 2.0) == 2.0
  # First crossing, even if the curve goes back up.
  assert tuning.steps_to_loss([0, 10, 20, 30], [4.0, 2.0, 3.0, 1.0], 3.0) == 5.0
  # Budgets: final losses of separate runs.
  assert tuning.steps_to_loss([100, 200, 400], [3.6, 3.3, 3.1], 3.2) == pytest.approx(300.0)
  with pytest.raises(ValueError, match="increasing"):
    tuning.steps_to_loss([0, 0], [1.0, 2.0], 1.5)
  with pytest.raises(ValueError, match="equal-length"):
    tuning.steps_to_loss([0, 1], [1.0], 1.5)


# ------------------------------------------------------------------------------------- arms


def test_adamw_arm_is_optax_adamw(params, direct):
  decay = lambda p: jax.tree_util.tree_map_with_path(
      lambda path, x: getattr(path[-1], "key", "").startswith("w_")
      or getattr(path[-1], "key", "") == "embedding", p)
  ref = optax.adamw(LR, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, mask=decay)
  _close(direct("adamw")[0], _run(ref, params)[0], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name,n_heads", [("muon", None), ("muon_per_head", CFG.n_heads)])
def test_muon_arm_is_optim_muon(params, direct, name, n_heads):
  ref = optim.muon(LR, shape_scaling="rms", adam_learning_rate=LR, adam_b2=0.95,
                   adam_nesterov=False, n_heads=n_heads)
  _close(direct(name)[0], _run(ref, params)[0], rtol=1e-5, atol=1e-8)


def test_orthogonal_heads_arm_adds_the_overlap_gradient(params, direct):
  strength = 1e-2  # as in ARMS
  u_orth, u_adam = direct("orthogonal_heads")[0][0], direct("adamw")[0][0]
  for name, side in (("w_q", "columns"), ("w_k", "columns"), ("w_o", "rows")):
    W = params["blocks"]["attn"][name]
    expected = u_adam["blocks"]["attn"][name] - strength * optim.head_gram_overlap(W, CFG.n_heads,
                                                                             side)[1]
    np.testing.assert_allclose(u_orth["blocks"]["attn"][name], expected, rtol=1e-5, atol=1e-9)
  np.testing.assert_array_equal(u_orth["blocks"]["ffn"]["w_1"], u_adam["blocks"]["ffn"]["w_1"])
  with pytest.raises(ValueError, match="strength"):
    O.orthogonal_heads_arm(strength=-1.0, n_heads=4)


def test_frozen_condition_equals_condition_at_first_step_then_stays(direct):
  cond, cond_states = direct("condition")
  frozen, frozen_states = direct("frozen_condition")
  _close(cond[0], frozen[0], rtol=0, atol=0)  # the same computation on step 0
  m_cond = [np.asarray(O.condition_multipliers(s)) for s in cond_states]
  m_frozen = [np.asarray(O.condition_multipliers(s)) for s in frozen_states]
  np.testing.assert_array_equal(m_cond[0], m_frozen[0])
  for m in m_frozen[1:]:
    np.testing.assert_array_equal(m, m_frozen[0])  # never refreshed
  np.testing.assert_array_equal(m_cond[1], m_cond[0])  # held between refreshes
  assert np.max(np.abs(m_cond[EVERY] - m_cond[0])) > 1e-3  # refreshed after EVERY steps
  assert not np.allclose(cond[EVERY]["blocks"]["attn"]["w_q"],
                         frozen[EVERY]["blocks"]["attn"]["w_q"])


def test_condition_multipliers_match_svd_condition_numbers(params, direct):
  m = np.asarray(O.condition_multipliers(direct("condition")[1][0], alpha=0.5, kappa_ref=10.0))
  attn, ffn = params["blocks"]["attn"], params["blocks"]["ffn"]
  kappa = [np.linalg.cond(np.asarray(w[l], np.float64))
           for w in (attn["w_k"], attn["w_o"], attn["w_q"], attn["w_v"], ffn["w_1"], ffn["w_2"])
           for l in range(CFG.n_layers)]
  ref = np.minimum(1, (10 / np.array(kappa)) ** 0.5)
  # κ̂ ≤ κ (a Rayleigh quotient bounds σ_min from above): never a larger cut than the truth.
  np.testing.assert_allclose(m, ref, rtol=2e-2)
  assert np.all(m >= ref * (1 - 1e-5))
  assert m.min() < 0.9 and m.max() == 1.0  # square projections are cut, w_1/w_2 are not
  with pytest.raises(ValueError, match="ConditionState"):
    O.condition_multipliers(optax.adam(1e-3).init(params))


def test_lr_cut_arm_is_adamw_with_a_smaller_rate_on_hidden_matrices(params, direct):
  factor = 0.5  # as in ARMS
  labels = lambda p: jax.tree.map(lambda r: "cut" if r == "hidden" else "rest", optim.labels(p))
  ref = optax.partition({"cut": optax.adamw(factor * LR, b1=0.9, b2=0.95, weight_decay=0.0),
                         "rest": optax.adamw(LR, b1=0.9, b2=0.95, weight_decay=0.0)}, labels)
  _close(direct("lr_cut")[0], _run(ref, params)[0], rtol=1e-6, atol=1e-10)
  with pytest.raises(ValueError, match="factor"):
    O.lr_cut_arm(factor=0.0)


# frozen_condition_arm is condition_arm with another refresh period: the same code path.
@pytest.mark.parametrize("name", sorted(set(ARMS) - {"frozen_condition"}))
def test_arms_take_an_injected_rate(params, direct, name):
  injected = _run(optax.inject_hyperparams(ARMS[name])(learning_rate=LR), params, steps=2)[0]
  _close(direct(name)[0][:2], injected, rtol=1e-6, atol=1e-10)


def test_arms_take_a_schedule(params):
  schedule = optax.linear_schedule(LR, 0.5 * LR, 1)
  scheduled = _run(O.muon_arm(adam_ratio=0.5)(schedule), params, steps=2)[0]
  first = _run(O.muon_arm(adam_ratio=0.5)(LR), params, steps=1)[0][0]
  _close(scheduled[0], first, rtol=1e-6, atol=1e-10)
  ref = optim.muon(schedule, shape_scaling="rms", adam_b2=0.95, adam_nesterov=False,
                   adam_learning_rate=optax.linear_schedule(0.5 * LR, 0.25 * LR, 1))
  _close(scheduled, _run(ref, params, steps=2)[0], rtol=1e-5, atol=1e-8)


# ------------------------------------------------------------------------- head redundancy


def test_redundancy_summary_matches_references(params):
  tokens = jax.random.randint(jax.random.key(3), (2, 17), 0, CFG.vocab_size)
  out = analysis.redundancy_summary(params, CFG, tokens)
  L, H, dh = CFG.n_layers, CFG.n_heads, CFG.d_head
  w_q = np.asarray(params["blocks"]["attn"]["w_q"], np.float64)
  w_o = np.asarray(params["blocks"]["attn"]["w_o"], np.float64)

  def largest_cos(blocks):
    return max(np.cos(scipy.linalg.subspace_angles(blocks[a], blocks[b])).max()
               for a in range(H) for b in range(a + 1, H))

  ref_q = [largest_cos([w_q[l][:, h * dh:(h + 1) * dh] for h in range(H)]) for l in range(L)]
  ref_o = [largest_cos([w_o[l][h * dh:(h + 1) * dh].T for h in range(H)]) for l in range(L)]
  np.testing.assert_allclose(out["per_layer"]["max_cos"], ref_q, rtol=1e-4)
  np.testing.assert_allclose(out["per_layer"]["max_cos_o"], ref_o, rtol=1e-4)
  assert out["max_cos"] == pytest.approx(np.mean(ref_q), rel=1e-4)
  _, state = transformer.Transformer(CFG).apply({"params": params}, tokens[:, :-1],
                                                mutable=["intermediates"])
  weights = state["intermediates"]["blocks"]["attn"]["weights"][0]
  np.testing.assert_allclose(out["per_layer"]["pattern_similarity"],
                             pattern_similarity(weights), rtol=1e-5, atol=1e-6)
  ablation = head_ablation(params, CFG, tokens)
  assert out["n_prunable"] == int(ablation["n_prunable"])
  assert out["prunable_fraction"] == out["n_prunable"] / (L * H)
  assert set(out) >= {"max_cos_k", "max_cos_v", "base_loss"}


def test_redundancy_summary_sees_orthogonal_heads(params):
  """Heads given mutually orthogonal W_Q blocks score a largest principal cosine of 0."""
  rng = np.random.default_rng(0)
  Q = np.stack([np.linalg.qr(rng.standard_normal((32, 32)))[0] for _ in range(CFG.n_layers)])
  orth = jax.tree.map(lambda x: x, params)
  orth["blocks"]["attn"]["w_q"] = jnp.asarray(0.02 * Q, jnp.float32)
  tokens = jax.random.randint(jax.random.key(3), (2, 17), 0, CFG.vocab_size)
  out = analysis.redundancy_summary(orth, CFG, tokens)
  assert out["max_cos"] < 1e-4
  assert out["max_cos_k"] > 0.5  # random subspaces of width 8 in 32 overlap
