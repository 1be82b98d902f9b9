"""KV rank analysis: bases against SVD, allocation against brute force, causal rank policy."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from analysis import kv
from transformer import latent

GPT = transformer.gpt2_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)
LLAMA = transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                 d_ff=48, max_len=32)


def _params(cfg, seed=0):
  params = transformer.init(cfg, jax.random.key(seed))
  attn = dict(params["blocks"]["attn"])
  attn["w_q"], attn["w_k"] = attn["w_q"] * 8, attn["w_k"] * 8
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


def _tokens(cfg, B=6, T=17, seed=1):
  return np.asarray(jax.random.randint(jax.random.key(seed), (B, T), 0, cfg.vocab_size))


def test_pca_bases_are_right_singular_vectors_of_cached_keys():
  cfg = LLAMA
  params, tokens = _params(cfg), _tokens(cfg)
  mk, mv = kv.kv_moments(params, cfg, tokens, batch_size=4)
  kb, ke = kv.pca_bases(mk)
  k, v = kv.capture_kv(params, cfg, tokens)
  X = np.asarray(k[1][:, :, 0], np.float64).reshape(-1, cfg.d_head)  # layer 1, KV head 0
  _, s, vt = np.linalg.svd(X, full_matrices=False)
  np.testing.assert_allclose(ke[1, 0], s**2, rtol=1e-5)
  P = np.asarray(kb[1, 0], np.float64)
  np.testing.assert_allclose(np.abs(np.sum(P[:, :3] * vt[:3].T, 0)), 1, atol=1e-4)
  assert kv.energy_rank(ke).shape == (2, 2)


@pytest.mark.parametrize("cfg", [GPT, LLAMA], ids=["learned", "rope"])
def test_weight_bases_match_brute_force_moment(cfg):
  params = _params(cfg)
  kb, ke, vb, ve = kv.weight_bases(params, cfg, n_positions=4)
  w = np.asarray(params["blocks"]["attn"]["w_k"][0], np.float64)[:, :cfg.d_head]
  if cfg.use_bias:
    w = np.concatenate([w, np.asarray(params["blocks"]["attn"]["b_k"][0, None, :cfg.d_head])])
  if cfg.positions == "rope":
    M = 0
    for p in np.linspace(0, cfg.max_len - 1, 4).round():  # rotate each row as a key at p
      half = cfg.d_head // 2
      ang = p * cfg.rope_theta ** (-np.arange(half) * 2 / cfg.d_head)
      c, s = np.cos(ang), np.sin(ang)
      r = np.concatenate([w[:, :half] * c - w[:, half:] * s, w[:, half:] * c + w[:, :half] * s], 1)
      M = M + r.T @ r / 4
  else:
    M = w.T @ w
  np.testing.assert_allclose(ke[0, 0], np.linalg.eigvalsh(M)[::-1], rtol=1e-4, atol=1e-8)


def test_greedy_ranks_optimal_on_convex_costs():
  rng = np.random.default_rng(0)
  for _ in range(20):
    # Convex, decreasing cost of keeping rank r: cumulative sums of decreasing gains.
    gains = -np.sort(-rng.exponential(size=(3, 4)), axis=1)
    cost = np.concatenate([gains.sum(1, keepdims=True) - np.cumsum(
        np.concatenate([np.zeros((3, 1)), gains], 1), 1)], 1)
    budget = int(rng.integers(3, 12))
    r = kv.greedy_ranks(cost, budget)
    best = min((sum(cost[i, c[i]] for i in range(3)), c)
               for c in itertools.product(range(1, 5), repeat=3) if sum(c) <= budget)
    assert r.sum() <= budget
    np.testing.assert_allclose(sum(cost[i, r[i]] for i in range(3)), best[0], atol=1e-12)


def test_budget_and_allocations_hit_measured_ratio():
  cfg = GPT
  assert kv.coefficient_budget(cfg, 8, 16) == 2 * 2 * 4 * 8 // 8
  params, tokens = _params(cfg), _tokens(cfg)
  for alloc, bits, ratio in [("uniform", 16, 3), ("greedy", 16, 5), ("loss", 4, 16),
                             ("greedy", 2, 24)]:
    comp = kv.compress(params, cfg, tokens, ratio, alloc, bits, grid=3)
    cache = latent.init_cache(cfg, comp, 2, 16)
    _, cache = latent.forward(params, cfg, jnp.asarray(tokens[:2, :16]), comp, cache=cache)
    measured = latent.compression_ratio(cfg, cache)
    assert ratio <= measured <= ratio * 1.25, (alloc, bits, measured)


def test_loss_cost_entry_equals_direct_truncation():
  cfg = GPT
  params, tokens = _params(cfg), _tokens(cfg)
  mk, mv = kv.kv_moments(params, cfg, tokens[:, :-1])
  (kb, _), (vb, _) = kv.pca_bases(mk), kv.pca_bases(mv)
  full = ((8,) * 4,) * 2
  comp = latent.make_compression(kb, vb, full, full)
  cost = kv.loss_cost(params, cfg, comp, tokens, grid=None)
  # Head 5 = layer 1, KV head 1 of the keys, at rank 2: project its keys with numpy.
  P = np.asarray(kb[1, 1, :, :2], np.float64)

  def kv_fn(l, k, v):
    if l == 1:
      k = k.at[:, :, 1].set(jnp.asarray(np.asarray(k[:, :, 1], np.float64) @ P @ P.T,
                                        jnp.float32))
    return k, v

  def loss(**kw):
    logits = latent.forward(params, cfg, jnp.asarray(tokens[:, :-1]), **kw)
    logp = jax.nn.log_softmax(logits)
    return -float(np.take_along_axis(np.asarray(logp), tokens[:, 1:, None], -1).mean())

  np.testing.assert_allclose(cost[5, 2], loss(kv_fn=kv_fn) - loss(), atol=2e-5)
  np.testing.assert_allclose(cost[:, 8], 0, atol=2e-5)
  assert abs(cost[5, 1]) > 1e-4  # the cut matters (its sign is free on a random model)


def test_prefix_rank_reads_only_the_prefix_and_oracle_rule():
  cfg = GPT
  params, tokens = _params(cfg), _tokens(cfg, B=4, T=17)
  comp = kv.compress(params, cfg, tokens, 1, "uniform", 32)
  ranks = [1, 2, 4, 8]
  chosen = kv.prefix_rank(params, cfg, comp, tokens, 9, ranks, tol=0.01)
  perturbed = tokens.copy()
  perturbed[:, 9:] = (perturbed[:, 9:] + 17) % cfg.vocab_size
  np.testing.assert_array_equal(kv.prefix_rank(params, cfg, comp, perturbed, 9, ranks, 0.01),
                                chosen)
  # The oracle reads the whole sequence, so it may change; its rule is checked directly.
  table = kv.rank_losses(params, cfg, comp, tokens, ranks)
  np.testing.assert_allclose(table[-1], kv.sequence_losses(params, cfg, comp, tokens,
                                                           np.full(4, 8)), rtol=1e-6)
  oracle = kv.oracle_rank(table, ranks)
  for b in range(4):
    ok = [r for r, row in zip(ranks, table[:, b], strict=True) if row <= table[-1, b] * 1.01]
    assert oracle[b] == ok[0]
  assert kv.floats_per_token(cfg, oracle) == 2 * 2 * 4 * oracle.mean()


def test_calibrated_steps_error_falls_with_bits():
  cfg = GPT
  params, tokens = _params(cfg), _tokens(cfg)
  comp = kv.compress(params, cfg, tokens, 2, "uniform", 32)
  ref = latent.forward(params, cfg, jnp.asarray(tokens), comp)
  errs = []
  for bits in (8, 4, 2):
    ks, vs = kv.calibrate_steps(params, cfg, comp, tokens, bits)
    q = latent.make_compression(comp.key_basis, comp.value_basis, comp.key_ranks,
                                comp.value_ranks, bits, ks, vs)
    errs.append(float(jnp.abs(latent.forward(params, cfg, jnp.asarray(tokens), q) - ref).mean()))
  assert errs[0] < errs[1] < errs[2]


def test_bad_input_one_line_errors():
  cfg = GPT
  params = _params(cfg)
  with pytest.raises(ValueError, match="must be >= 1") as e:
    kv.coefficient_budget(cfg, 0.5)
  assert "\n" not in str(e.value)
  with pytest.raises(ValueError, match="fewer than one per head"):
    kv.coefficient_budget(cfg, 64, 4)
  with pytest.raises(ValueError, match="calibration tokens are missing"):
    kv.compress(params, cfg, None, 4, "greedy", 16)
  with pytest.raises(ValueError, match="head width"):
    kv.rank_losses(params, cfg, kv.compress(params, cfg, None, 1, "uniform", 32,
                                            source="weights"), _tokens(cfg), [9])
  with pytest.raises(ValueError, match="alloc"):
    kv.compress(params, cfg, _tokens(cfg), 4, "fisher", 16)


def test_ratio_that_needs_rank_above_head_width_is_one_line():
  with pytest.raises(ValueError, match="above the head width") as e:
    kv.coefficient_budget(GPT, 2, 4)  # 4-bit codes at ratio 2 would need rank 2·Dh
  assert "\n" not in str(e.value)
  full = 2 * GPT.n_layers * GPT.n_kv_heads * GPT.d_head
  assert full - 8 <= kv.coefficient_budget(GPT, 4, 4) <= full  # full rank less packing slack
