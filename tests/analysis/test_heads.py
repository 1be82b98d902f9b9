"""Head ablation against direct zeroing, pattern similarity against numpy, and the gap between
orthogonal weights and identical attention patterns."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

import transformer
from analysis import head_subspace_overlap, principal_angles
from analysis.heads import head_ablation, next_token_loss, pattern_similarity

CFG = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)


@functools.partial(jax.jit, static_argnums=1)
def _logits(params, cfg, tokens_BT):
  return transformer.Transformer(cfg).apply({"params": params}, tokens_BT)


def _reference_loss(params, cfg, tokens):
  """Loss in float64 numpy from the model's logits (an independent cross-entropy)."""
  logits = np.asarray(_logits(params, cfg, tokens[:, :-1]), np.float64)
  logp = logits - scipy.special.logsumexp(logits, -1, keepdims=True)
  y = np.asarray(tokens[:, 1:])
  return -np.take_along_axis(logp, y[..., None], -1).mean()


def _zero_heads(params, cfg, heads):
  """`params` with the `W_O` rows of each `(l, h)` in `heads` set to zero, by hand."""
  w_o = np.array(params["blocks"]["attn"]["w_o"])
  dh = cfg.d_head
  for l, h in heads:
    w_o[l, h * dh:(h + 1) * dh, :] = 0
  out = jax.tree.map(lambda x: x, params)
  out["blocks"]["attn"]["w_o"] = jnp.asarray(w_o)
  return out


@pytest.fixture(scope="module")
def model():
  """A model fitted for a few steps to a batch with a copy structure, so heads matter."""
  half = jax.random.randint(jax.random.key(1), (4, 9), 0, CFG.vocab_size)
  tokens = jnp.concatenate([half, half[:, 1:]], 1)  # (4, 17): the second half repeats the first
  params = transformer.init(CFG, jax.random.key(0))
  tx = optax.adam(1e-2)

  @jax.jit
  def step(params, opt_state):
    grads = jax.grad(next_token_loss)(params, CFG, tokens)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state

  opt_state = tx.init(params)
  for _ in range(40):
    params, opt_state = step(params, opt_state)
  return params, tokens


def test_head_ablation_matches_direct_zeroing(model):
  params, tokens = model
  L, H = CFG.n_layers, CFG.n_heads
  base = _reference_loss(params, CFG, tokens)
  single = np.array([[_reference_loss(_zero_heads(params, CFG, [(l, h)]), CFG, tokens) - base
                      for h in range(H)] for l in range(L)])
  order = np.argsort(single.ravel(), kind="stable")
  heads = [(i // H, i % H) for i in order]
  curve = np.array([base] + [_reference_loss(_zero_heads(params, CFG, heads[:k]), CFG, tokens)
                             for k in range(1, L * H + 1)])
  # A tolerance halfway between two consecutive prefix rises, so the count is not a knife edge.
  rel = curve[1:] / base - 1
  tol = float(np.sort(rel)[3] + np.sort(rel)[4]) / 2
  within = rel <= tol
  expected = L * H if within.all() else int(np.argmin(within))

  out = head_ablation(params, CFG, tokens, tol=tol, parallel=3)
  assert abs(out["base_loss"] - base) < 1e-5
  np.testing.assert_allclose(out["rise_LH"], single, atol=2e-5)
  # The heads matter (together far more than alone), so the comparison means something.
  assert single.max() > 1e-3 and curve[-1] > 2 * base
  np.testing.assert_array_equal(out["order"], np.array(heads))
  np.testing.assert_allclose(out["loss_removed"], curve, atol=2e-5)
  assert int(out["n_prunable"]) == expected
  assert 0 < expected < L * H
  assert int(head_ablation(params, CFG, tokens, tol=1e3, parallel=3)["n_prunable"]) == L * H


def test_head_ablation_finds_dead_heads_first(model):
  params, tokens = model
  dead = [(0, 2), (1, 0), (1, 3)]
  out = head_ablation(_zero_heads(params, CFG, dead), CFG, tokens, tol=1e-6, parallel=3)
  live = np.ones((CFG.n_layers, CFG.n_heads), bool)
  live[tuple(np.array(dead).T)] = False
  np.testing.assert_array_equal(out["rise_LH"][~live], 0)  # nothing left to remove
  assert np.all(out["rise_LH"][live] > 0)  # the fitted model uses every other head
  assert sorted(map(tuple, out["order"][:3].tolist())) == sorted(dead)
  np.testing.assert_array_equal(out["loss_removed"][:4], out["loss_removed"][0])
  assert int(out["n_prunable"]) >= 3
  np.testing.assert_allclose(out["loss_removed"][0], next_token_loss(
      _zero_heads(params, CFG, dead), CFG, tokens), rtol=1e-5)


def test_head_ablation_rejects_bad_input(model):
  params, tokens = model
  with pytest.raises(ValueError, match="tokens"):
    head_ablation(params, CFG, tokens[0])
  with pytest.raises(ValueError, match="tol"):
    head_ablation(params, CFG, tokens, tol=-0.1)


def _numpy_similarity(w_LBHTS, valid_BTS, center):
  out = []
  for w in w_LBHTS:
    H = w.shape[1]
    if center == "row":
      n = valid_BTS.sum(-1)
      mean = (w * valid_BTS[:, None]).sum(-1) / np.maximum(n, 1)[:, None]
      dev = [(w[:, h] - mean[:, h][..., None])[valid_BTS] for h in range(H)]
      rho = np.array([[a @ b / np.sqrt((a @ a) * (b @ b)) for b in dev] for a in dev])
    else:
      rho = np.corrcoef(np.stack([w[:, h][valid_BTS] for h in range(H)]))
    out.append((rho.sum() - np.trace(rho)) / (H * (H - 1)))
  return np.array(out)


@pytest.mark.parametrize("center", ["row", "global"])
def test_pattern_similarity_matches_numpy(center):
  rng = np.random.default_rng(0)
  L, B, H, T = 2, 3, 4, 7
  causal = np.tril(np.ones((T, T), bool))
  scores = rng.standard_normal((L, B, H, T, T)) * 2
  w = np.where(causal, np.exp(scores), 0)
  w /= w.sum(-1, keepdims=True)
  w[:, :, 1] = 0.7 * w[:, :, 0] + 0.3 * w[:, :, 1]  # correlated pair, so the mean is not ~0
  ref = _numpy_similarity(w, np.broadcast_to(causal, (B, T, T)), center)
  got = pattern_similarity(jnp.asarray(w, jnp.float32), center=center)
  np.testing.assert_allclose(got, ref, atol=1e-5)
  assert np.all(np.abs(ref) > 0.05)
  # A padding mask (B, T, S): the last two keys of sequence 0 are padding.
  valid = np.broadcast_to(causal, (B, T, T)).copy()
  valid[0, :, -2:] = False
  valid[0, -2:, :] = False
  got = pattern_similarity(jnp.asarray(w[0], jnp.float32), jnp.asarray(valid), center=center)
  np.testing.assert_allclose(got, _numpy_similarity(w[:1], valid, center)[0], atol=1e-5)


def test_pattern_similarity_extremes():
  rng = np.random.default_rng(1)
  T = 6
  causal = np.tril(np.ones((T, T), bool))
  one = np.where(causal, np.exp(rng.standard_normal((2, 1, T, T))), 0)
  one /= one.sum(-1, keepdims=True)
  same = jnp.asarray(np.repeat(one, 3, axis=1), jnp.float32)  # three identical heads
  assert float(pattern_similarity(same)) == pytest.approx(1.0, abs=1e-5)
  uniform = causal / causal.sum(-1, keepdims=True)
  mixed = jnp.asarray(np.concatenate([one, np.broadcast_to(uniform, one.shape)], 1), jnp.float32)
  assert float(pattern_similarity(mixed)) == 0.0  # uniform heads have no departure to correlate
  # Global Pearson scores uniform attention as nearly identical to anything causal.
  assert float(pattern_similarity(mixed, center="global")) > 0.5
  with pytest.raises(ValueError, match="center"):
    pattern_similarity(same, center="col")
  with pytest.raises(ValueError, match="2 heads"):
    pattern_similarity(same[:, :1])


def test_orthogonal_heads_can_attend_identically():
  """Two heads with mutually orthogonal W_Q and W_K subspaces yet identical attention maps.

  The residual stream lives in span(e_1, e_2). Head 0 reads through columns `e_i + e_{i+2}`
  (queries) and `e_i + e_{i+4}` (keys), head 1 through `e_i − e_{i+2}` and `e_i − e_{i+4}`:
  orthogonal column spaces, and even `⟨W_QK^0, W_QK^1⟩_F = 0`, yet on the stream both
  projections agree, so the heads compute the same scores. "Provably non-redundant" holds for
  the weights, not for what the heads do.
  """
  cfg = transformer.Config(vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_head=2,
                           max_len=16, norm="none", positions="none")
  params = transformer.init(cfg, jax.random.key(0))
  e = np.eye(8, dtype=np.float32)
  w_q = np.stack([e[0] + e[2], e[1] + e[3], e[0] - e[2], e[1] - e[3]], 1) / np.sqrt(2)
  w_k = np.stack([e[0] + e[4], e[1] + e[5], e[0] - e[4], e[1] - e[5]], 1) / np.sqrt(2)
  rng = np.random.default_rng(0)
  embedding = np.zeros((16, 8), np.float32)
  embedding[:, :2] = 3 * rng.standard_normal((16, 2))
  params["embed"]["embedding"] = jnp.asarray(embedding)
  params["blocks"]["attn"]["w_q"] = jnp.asarray(w_q[None])
  params["blocks"]["attn"]["w_k"] = jnp.asarray(w_k[None])

  tokens = jnp.asarray(rng.integers(0, 16, (2, 10)))
  apply = jax.jit(functools.partial(transformer.Transformer(cfg).apply, mutable=["intermediates"]))
  _, state = apply({"params": params}, tokens)
  weights = state["intermediates"]["blocks"]["attn"]["weights"][0][0]  # (B, H, T, S)

  heads_q = jnp.stack([w_q[:, :2], w_q[:, 2:]])  # (H, d, dh)
  heads_k = jnp.stack([w_k[:, :2], w_k[:, 2:]])
  cos_q = np.cos(np.asarray(principal_angles(heads_q[0], heads_q[1])))
  cos_k = np.cos(np.asarray(principal_angles(heads_k[0], heads_k[1])))
  np.testing.assert_allclose(cos_q, 0, atol=1e-6)
  np.testing.assert_allclose(cos_k, 0, atol=1e-6)
  np.testing.assert_allclose(scipy.linalg.subspace_angles(w_q[:, :2], w_q[:, 2:]), np.pi / 2)
  assert float(head_subspace_overlap(heads_q)[0, 1]) == pytest.approx(0, abs=1e-6)
  qk = [w_q[:, 2 * h:2 * h + 2] @ w_k[:, 2 * h:2 * h + 2].T for h in range(2)]
  assert abs(np.sum(qk[0] * qk[1])) < 1e-6

  np.testing.assert_allclose(weights[:, 0], weights[:, 1], atol=1e-6)
  assert float(jnp.max(weights)) > 0.6  # not uniform: the maps have structure to share
  assert float(pattern_similarity(weights)) == pytest.approx(1.0, abs=1e-4)
  assert float(pattern_similarity(weights, center="global")) == pytest.approx(1.0, abs=1e-4)
