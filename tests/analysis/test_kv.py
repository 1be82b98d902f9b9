"""KV rank analysis: bases against SVD, allocation against brute force, causal rank policy."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from analysis import kv
from transformer import latent
from transformer.model import KVInputs
from transformer.names import split_heads

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


def _rope_np(x, pos, theta):
  """RoPE in float64 NumPy (rotate-half: feature `i` pairs with `i + Dh/2`), `x (..., Dh)` at
  positions `pos` broadcast against `x`'s leading axes."""
  half = x.shape[-1] // 2
  ang = np.asarray(pos, np.float64)[..., None] * theta ** (-np.arange(half) * 2 / x.shape[-1])
  c, s = np.cos(ang), np.sin(ang)
  return np.concatenate([x[..., :half] * c - x[..., half:] * s,
                         x[..., half:] * c + x[..., :half] * s], -1)


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
      r = _rope_np(w, p, cfg.rope_theta)
      M = M + r.T @ r / 4
  else:
    M = w.T @ w
  np.testing.assert_allclose(ke[0, 0], np.linalg.eigvalsh(M)[::-1], rtol=1e-4, atol=1e-8)
  # Before RoPE the moment is the plain `W_Kᵀ W_K`, whatever the positions.
  ke_raw = kv.weight_bases(params, cfg, n_positions=4, pre_rope=True)[1]
  np.testing.assert_allclose(ke_raw[0, 0], np.linalg.eigvalsh(w.T @ w)[::-1], rtol=1e-4,
                             atol=1e-8)


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


def _sharp_llama(seed=0):
  """A random RoPE model whose outputs depend on its attention (sharp scores, large values
  and logits), so the KV cache's compression moves its predictions."""
  params = transformer.init(LLAMA, jax.random.key(seed))
  attn = dict(params["blocks"]["attn"])
  attn["w_q"], attn["w_k"] = attn["w_q"] * 8, attn["w_k"] * 8
  attn["w_v"], attn["w_o"] = attn["w_v"] * 4, attn["w_o"] * 4
  return {**params, "blocks": {**params["blocks"], "attn": attn},
          "unembed": {"w_out": params["unembed"]["w_out"] * 8}}


def _low_rank_keys(cfg, rank=2, seed=0):
  """`_sharp_llama` with raw keys near a `rank`-dimensional subspace per head (as a trained
  model's concentrate)."""
  params = _sharp_llama(seed)
  rng = np.random.default_rng(seed)
  L, D, K, dh = cfg.n_layers, cfg.d_model, cfg.n_kv_heads, cfg.d_head
  w = np.einsum("ldkr,lkre->ldke", rng.normal(size=(L, D, K, rank)),
                rng.normal(size=(L, K, rank, dh))).reshape(L, D, K * dh)
  w = 0.3 * w + 0.02 * rng.normal(size=(L, D, K * dh))
  attn = {**params["blocks"]["attn"], "w_k": jnp.asarray(w, jnp.float32)}
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


def test_keys_before_rope_reconstruct_scores_better_than_after_against_numpy_svd():
  """Raw keys near a rank-2 subspace per head: RoPE turns each pair of dimensions at its own
  frequency, so the rotated keys spread over more directions. At the same ratio (rank 2 of 8),
  the scores the attention reads through the latent cache equal a float64 NumPy reference
  (the leading right singular vectors of the calibration keys, raw or rotated) and are closer
  to the exact scores when the keys are compressed before RoPE."""
  cfg = LLAMA
  L, K, dh, groups = cfg.n_layers, cfg.n_kv_heads, cfg.d_head, cfg.kv_groups
  params, tokens = _low_rank_keys(cfg), _tokens(cfg, B=8)
  x = jnp.asarray(tokens[:, :-1])
  B, T = x.shape
  pos = np.broadcast_to(np.arange(T), (B, T))
  _, state = transformer.Transformer(cfg).apply({"params": params}, x, mutable=["intermediates"])
  attn = state["intermediates"]["blocks"]["attn"]
  sown = {n: np.asarray(a[0], np.float64) for n, a in attn.items()}
  # The reference keys from the model's input to attention and `W_K`, in float64.
  w_k = split_heads(np.asarray(params["blocks"]["attn"]["w_k"], np.float64), K, "columns")
  k_raw = np.einsum("lbtd,lkde->lbtke", sown["attn_in"], w_k)
  k_rot = _rope_np(k_raw, pos[None, :, :, None], cfg.rope_theta)
  np.testing.assert_allclose(k_rot, sown["k"], atol=1e-4)

  def scores(q_BTHX, k_BSKX):
    return np.einsum("bthx,bshx->bhts", q_BTHX, np.repeat(k_BSKX, groups, axis=2))

  comps = {pre: kv.compress(params, cfg, tokens, 2, "uniform", 32, pre_rope=pre)
           for pre in (True, False)}
  error = {}
  for pre, comp in comps.items():
    assert comp.pre_rope == pre and comp.key_ranks == ((2, 2), (2, 2))
    num = den = 0.0
    for l in range(L):
      keys = k_raw[l] if pre else k_rot[l]
      ref = np.empty_like(keys)
      for h in range(K):
        vt = np.linalg.svd(keys[:, :, h].reshape(-1, dh), full_matrices=False)[2][:2]
        ref[:, :, h] = keys[:, :, h] @ vt.T @ vt
      if pre:
        ref = _rope_np(ref, pos[:, :, None], cfg.rope_theta)
      inputs = KVInputs(*(jnp.asarray(a, jnp.float32) for a in (
          sown["q"][l], sown["k"][l], sown["v"][l], k_raw[l])), jnp.asarray(pos))
      q_X, k_X, _, _, _ = latent.latent_kv(comp, l, cfg)(inputs, None, 0)
      got = scores(np.asarray(q_X, np.float64), np.asarray(k_X, np.float64))
      want = scores(sown["q"][l], ref)
      exact = scores(sown["q"][l], k_rot[l])
      np.testing.assert_allclose(got, want, atol=2e-3 * np.abs(exact).max())
      num, den = num + ((want - exact) ** 2).sum(), den + (exact ** 2).sum()
    error[pre] = np.sqrt(num / den)
  assert error[True] < 0.2 * error[False], error
  # What the model does with them (values kept whole): its next-token distribution moves less.
  full = ((dh,) * K,) * L
  kl = {pre: float(kv.output_kl(params, cfg, latent.make_compression(
      c.key_basis, c.value_basis, c.key_ranks, full, pre_rope=pre), x))
        for pre, c in comps.items()}
  assert kl[True] < 0.1 * kl[False], kl


def test_compress_places_keys_before_rope_by_default_for_rope_models():
  for cfg, want in ((LLAMA, True), (GPT, False)):
    params, tokens = _params(cfg), _tokens(cfg)
    comp = kv.compress(params, cfg, tokens, 4, "greedy", 4)
    assert comp.pre_rope == want
    # The quantization steps are measured on the coefficients of the keys it stores.
    mk, _ = kv.kv_moments(params, cfg, tokens[:, :-1], pre_rope=want)
    np.testing.assert_allclose(np.abs(comp.key_basis), np.abs(kv.pca_bases(mk)[0]), atol=1e-4)
    k = np.asarray(kv.capture_kv(params, cfg, tokens[:, :-1], pre_rope=want)[0][0], np.float64)
    c = k.reshape(-1, cfg.n_kv_heads * cfg.d_head) @ np.asarray(
        latent.block_basis(comp.key_basis[0], comp.key_ranks[0]), np.float64)
    assert np.all(comp.key_step[0] <= np.abs(c).max(0) / 8 + 1e-6)  # 4 bits: 8 steps a side
    assert np.all(comp.key_step[0] >= 0.3 * np.abs(c).max(0) / 8 - 1e-6)


def test_calibrated_projections_match_the_model_better_on_held_out_windows():
  cfg = LLAMA
  params = _sharp_llama()
  cal, held = _tokens(cfg, B=16, seed=1), _tokens(cfg, B=16, seed=2)
  comp = kv.compress(params, cfg, cal, 4, "uniform", 16)
  fitted = kv.calibrate(params, cfg, comp, cal, 40, learning_rate=1e-2)
  kl = jax.jit(kv.output_kl, static_argnums=1)
  before, after = (float(kl(params, cfg, c, jnp.asarray(held[:, :-1]))) for c in (comp, fitted))
  assert before > 0.1  # the compression does move this model
  assert after < 0.9 * before, (before, after)
  assert (fitted.key_ranks, fitted.value_ranks, fitted.bits, fitted.pre_rope) == (
      comp.key_ranks, comp.value_ranks, comp.bits, comp.pre_rope)
  # Only the columns within the ranks move; the others are the SVD basis as it was.
  moved = np.abs(np.asarray(fitted.key_up) - np.asarray(comp.key_basis)).max(axis=2)  # (L, K, Dh)
  assert moved[:, :, :2].min() > 1e-3 and moved[:, :, 2:].max() == 0
  assert kv.calibrate(params, cfg, comp, cal, 0) is comp
  with pytest.raises(ValueError, match="steps=-1"):
    kv.calibrate(params, cfg, comp, cal, -1)
