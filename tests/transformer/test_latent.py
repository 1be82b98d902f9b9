"""The latent KV cache: exact at full rank, decode = its own forward, packed codes, bytes.

Compilation is what these tests cost: parameters, bases and tokens are drawn by numpy
(`random_params`), each model's reference logits are computed once (`_reference`), and every
forward pass runs under one `jit`, never op by op.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer
from tests.conftest import random_params
from transformer import latent

CONFIGS = {
    "gpt2": transformer.gpt2_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32),
    "llama-gqa": transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4,
                                          n_kv_heads=2, d_ff=48, max_len=32),
    "post-norm": transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=2,
                                    max_len=32, norm_position="post", window=5),
}


# One batch of token ids (< 64, every vocabulary here) for the tests that compare with the model.
TOKENS = np.random.default_rng(1).integers(0, 64, (2, 16), dtype=np.int32)


@functools.cache
def _params(cfg, seed=0):
  """Random params with W_Q, W_K scaled up so attention is far from uniform (tied keys: as
  drawn, since W_Q is then W_K too)."""
  params = random_params(cfg, seed)
  if cfg.qk_tied:
    return params
  attn = dict(params["blocks"]["attn"])
  attn["w_q"], attn["w_k"] = attn["w_q"] * 8, attn["w_k"] * 8
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


@functools.partial(jax.jit, static_argnums=1)
def _model(params, cfg, tokens):
  return transformer.Transformer(cfg).apply({"params": params}, tokens)


@functools.cache
def _reference(cfg):
  """The model's own logits of `TOKENS` (full forward, no cache): computed once per config."""
  return np.asarray(_model(_params(cfg), cfg, TOKENS))


def _fwd(cfg, **kw):
  """Jitted `latent.forward` of `cfg`, its logits as a numpy array."""
  f = jax.jit(lambda params, tokens, comp=None: latent.forward(params, cfg, tokens, comp, **kw))
  return lambda *args: np.asarray(f(*args))


def _random_bases(seed, cfg):
  """Random orthonormal bases (L, K, Dh, Dh): exactness must not depend on which basis."""
  a = np.random.default_rng(seed).normal(size=(cfg.n_layers, cfg.n_kv_heads, cfg.d_head,
                                               cfg.d_head))
  return jax.device_put(np.linalg.qr(a)[0].astype(np.float32))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_full_rank_reproduces_model_logits(name):
  cfg = CONFIGS[name]
  params, tokens, ref = _params(cfg), TOKENS, _reference(cfg)
  assert float(np.std(ref)) > 0.1
  np.testing.assert_allclose(np.asarray(jax.jit(latent.forward, static_argnums=1)(
      params, cfg, tokens)), ref, atol=1e-5)
  full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  comp = latent.make_compression(kb, vb, full, full)
  np.testing.assert_allclose(_fwd(cfg)(params, tokens, comp), ref, atol=1e-5)


def test_low_rank_equals_explicit_projection():
  """Rank r equals attention with K and V rebuilt explicitly: K ← K P Pᵀ, V ← V P_v P_vᵀ."""
  cfg = CONFIGS["llama-gqa"]
  params, tokens = _params(cfg), TOKENS
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  kr, vr = ((3, 5), (8, 1)), ((2, 2), (4, 6))
  comp = latent.make_compression(kb, vb, kr, vr)

  def project(l, k, v):
    def proj(x, basis, ranks):  # rebuild K and V explicitly: x_h P_h P_hᵀ per head
      return jnp.stack([x[:, :, h] @ basis[l, h, :, :r] @ basis[l, h, :, :r].T
                        for h, r in enumerate(ranks)], 2)
    return proj(k, kb, kr[l]), proj(v, vb, vr[l])

  want = _fwd(cfg, kv_fn=project)(params, tokens)
  got = _fwd(cfg)(params, tokens, comp)
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert float(np.abs(got - _reference(cfg)).max()) > 1e-2  # rank cuts do change the logits


@pytest.mark.parametrize("bits, pre_rope", [(32, False), (16, False), (8, False), (4, False),
                                            (2, False), (32, True), (4, True)])
def test_decode_with_latent_cache_equals_own_forward(bits, pre_rope):
  """Prefill + one-token steps = the same compression's full forward, also at low rank: with
  keys compressed before RoPE, each cached slot is rotated at its own position."""
  cfg = CONFIGS["llama-gqa"]
  params = _params(cfg)
  tokens = TOKENS[:, :12]
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  kr, vr = ((3, 5), (8, 1)), ((2, 3), (4, 6))
  step = lambda ranks: [np.full((sum(r),), 0.3, np.float32) for r in ranks]
  comp = latent.make_compression(kb, vb, kr, vr, bits, step(kr), step(vr), pre_rope=pre_rope)
  full = _fwd(cfg)(params, tokens, comp)
  fwd = jax.jit(lambda t, c: latent.forward(params, cfg, t, comp, cache=c))
  cache = latent.init_cache(cfg, comp, 2, 16)
  logits, cache = fwd(tokens[:, :5], cache)
  rows = [logits]
  for t in range(5, 12):
    logits, cache = fwd(tokens[:, t:t + 1], cache)
    rows.append(logits)
  np.testing.assert_allclose(np.concatenate(rows, 1), full, atol=1e-5 if bits == 32 else 1e-3)
  assert int(cache.index) == 12
  # Bytes: 16-bit K, V = 2·L·B·S·K·Dh·2; ours = Σ_l ceil(R_l·bits/8) (or R_l floats).
  widths = [latent.stored_width(sum(r), bits) for r in (*kr, *vr)]
  per = {32: 4, 16: 2}.get(bits, 1)
  assert latent.cache_bytes(cache) == 2 * 16 * sum(widths) * per
  np.testing.assert_allclose(latent.compression_ratio(cfg, cache),
                             (2 * 2 * 2 * 16 * 2 * 8 * 2) / (2 * 16 * sum(widths) * per))


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_pack_roundtrip_and_midrise_error(bits):
  c = np.random.default_rng(0).normal(size=(3, 5, 7)).astype(np.float32) * 2
  step = np.full((7,), 4.0 / 2 ** (bits - 1), np.float32)
  stored = jax.jit(latent.encode, static_argnums=(2, 3))(c, step, bits, jnp.float32)
  assert stored.dtype == jnp.uint8 and stored.shape[-1] == -(-7 * bits // 8)
  back = jax.jit(latent.decode, static_argnums=(2, 3, 4))(stored, step, bits, 7, jnp.float32)
  inside = np.abs(np.asarray(c)) < 4.0
  err = np.abs(np.asarray(back) - np.asarray(c))
  assert err[inside].max() <= float(step[0]) / 2 + 1e-6
  code = np.clip(np.floor(np.asarray(c) / float(step[0])), -2 ** (bits - 1), 2 ** (bits - 1) - 1)
  np.testing.assert_allclose(back, (code + 0.5) * float(step[0]), atol=1e-6)


@functools.partial(jax.jit, static_argnums=1)
def _dynamic_jit(params, cfg, tokens, comp, key_rank, value_rank):
  return latent.forward(params, cfg, tokens, comp, key_rank=key_rank, value_rank=value_rank)


def _dynamic(*args):
  """`latent.forward` at traced ranks (the dynamic-rank mode), as a numpy array."""
  return np.asarray(_dynamic_jit(*args))


def test_dynamic_rank_masks_equal_static_ranks_and_vary_per_sequence():
  cfg = CONFIGS["gpt2"]
  params, tokens = _params(cfg), TOKENS
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  kr = ((3, 5, 1, 8), (8, 2, 2, 6))
  vr = ((4, 4, 4, 4), (1, 2, 3, 8))
  comp = latent.make_compression(kb, vb, kr, vr)
  static = _fwd(cfg)(params, tokens, comp)
  dyn = _dynamic(params, cfg, tokens, comp, np.array(kr), np.array(vr))
  np.testing.assert_allclose(dyn, static, atol=1e-5)
  # Per sequence: sequence 0 at these ranks, sequence 1 at full rank (= the model).
  full = np.full((2, 4), 8)
  per_seq = _dynamic(params, cfg, tokens, comp, np.stack([kr, full]), np.stack([vr, full]))
  np.testing.assert_allclose(per_seq[0], static[0], atol=1e-5)
  np.testing.assert_allclose(per_seq[1], _reference(cfg)[1], atol=1e-5)


def test_dynamic_rank_masks_equal_static_ranks_with_keys_before_rope():
  cfg = CONFIGS["llama-gqa"]
  params, tokens = _params(cfg), TOKENS
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  kr, vr = ((3, 5), (8, 1)), ((2, 2), (4, 6))
  comp = latent.make_compression(kb, vb, kr, vr, pre_rope=True)
  static = _fwd(cfg)(params, tokens, comp)
  dyn = _dynamic(params, cfg, tokens, comp, np.array(kr), np.array(vr))
  np.testing.assert_allclose(dyn, static, atol=1e-5)
  post = _fwd(cfg)(params, tokens, latent.make_compression(kb, vb, kr, vr))
  assert float(np.abs(post - static).max()) > 1e-3  # the placement matters at low rank


def test_weight_compression_bases_are_svd_of_w_k():
  cfg = CONFIGS["gpt2"]
  params = _params(cfg)
  comp = latent.weight_compression(params, cfg, 3)
  w = np.asarray(params["blocks"]["attn"]["w_k"], np.float64)[1, :, 8:16]  # layer 1, head 1
  _, s, vt = np.linalg.svd(w)
  P = np.asarray(comp.key_basis, np.float64)[1, 1]
  np.testing.assert_allclose(np.abs(P[:, :3].T @ vt[:3].T), np.eye(3), atol=1e-4)
  np.testing.assert_allclose(P.T @ P, np.eye(8), atol=1e-5)


def test_bases_report_and_payoff():
  cfg = CONFIGS["gpt2"]
  comp = latent.weight_compression(_params(cfg), cfg, 2, bits=16)
  # 2 layers × 4 heads × (2 + 2) columns × 8 rows × 2 bytes.
  assert latent.basis_bytes(comp) == 2 * 4 * 4 * 8 * 2
  saved = 2 * 2 * 4 * 8 * 2 - 2 * 2 * 8 * 2  # per token: 16-bit K, V minus float16 coefficients
  assert latent.payoff_length(cfg, comp) == pytest.approx(512 / saved)


def test_bad_input_one_line_errors():
  cfg = CONFIGS["gpt2"]
  eye = np.broadcast_to(np.eye(8, dtype=np.float32), (2, 4, 8, 8))
  with pytest.raises(ValueError, match="head width"):
    latent.make_compression(eye, eye, ((9, 1, 1, 1), (1,) * 4), ((1,) * 4,) * 2)
  with pytest.raises(ValueError, match="calibrate_steps"):
    latent.make_compression(eye, eye, ((1,) * 4,) * 2, ((1,) * 4,) * 2, bits=4)
  with pytest.raises(ValueError, match="head width"):
    latent.weight_compression(_params(cfg), cfg, 9)


@pytest.mark.parametrize("name", [n for n, c in CONFIGS.items() if c.positions == "learned"])
@pytest.mark.parametrize("rank", ["full", 3])
def test_latent_model_is_exactly_causal(name, rank):
  """∂ logits_t / ∂ x_s = 0 exactly for s > t, through the latent cache (jacrev): the learned
  position rows are an additive input per position, so their Jacobian is the input's."""
  cfg = CONFIGS[name]
  params = _params(cfg)
  r = cfg.d_head if rank == "full" else rank
  ranks = ((r,) * cfg.n_kv_heads,) * cfg.n_layers
  comp = latent.make_compression(*(_random_bases(i, cfg) for i in (1, 2)), ranks, ranks, 32)
  T = 8
  tokens = TOKENS[:1, :T]

  def logits_of(pos_TD):
    table = params["pos_embed"]["embedding"].at[:T].set(pos_TD)
    p = {**params, "pos_embed": {"embedding": table}}
    logits, _ = latent.forward(p, cfg, tokens, comp, cache=latent.init_cache(cfg, comp, 1, T))
    return logits[0]

  pos_TD = np.asarray(params["pos_embed"]["embedding"])[:T]
  jac_TVTD = np.asarray(jax.jit(jax.jacrev(logits_of))(pos_TD))
  per_pair = np.abs(jac_TVTD).max(axis=(1, 3))  # (t, s)
  future = np.triu(np.ones((T, T), bool), 1)
  assert per_pair[future].max() == 0.0
  assert per_pair[~future].min() > 0  # the past does reach every position (the test can fail)


_SMALL = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_len=32)
VARIANTS = {
    "softmax-qk_tied": transformer.Config(**_SMALL, qk_tied=True),
    "rbf-qk_tied": transformer.Config(**_SMALL, attention="rbf", qk_tied=True),
    "local": transformer.Config(**_SMALL, attention="local", window=5, block_size=4),
    "bigbird": transformer.Config(**_SMALL, attention="bigbird", window=3, block_size=4,
                                  n_global=1, n_random=1),
    "moba": transformer.Config(**_SMALL, attention="moba", block_size=4, top_k_blocks=1),
    "llama-tiny-gqa": transformer.preset("llama-tiny", vocab_size=64, d_model=32, d_ff=64,
                                         max_len=32),
    "llama-tiny": transformer.preset("llama-tiny", max_len=32),
}


@pytest.mark.parametrize("name, pre_rope", [(n, False) for n in VARIANTS] + [
    ("llama-tiny-gqa", True), ("llama-tiny", True)])
def test_full_rank_latent_decode_equals_model_forward(name, pre_rope):
  """Through the model's own attention: at full rank (random orthonormal bases, float32), the
  latent cache's prefill + one-token steps give the model's full-forward logits, for every
  compressible variant, tied keys and grouped-query heads, and for RoPE models with keys
  compressed before the rotation (rebuilt and rotated at each slot's position)."""
  cfg = VARIANTS[name]
  assert cfg.attention in latent.COMPRESSIBLE
  params, tokens, ref = _params(cfg), TOKENS, _reference(cfg)
  assert float(np.std(ref)) > 1e-3
  full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
  comp = latent.make_compression(_random_bases(2, cfg), _random_bases(3, cfg), full, full,
                                 pre_rope=pre_rope)
  fwd = jax.jit(lambda t, c: latent.forward(params, cfg, t, comp, cache=c))
  logits, cache = fwd(tokens[:, :9], latent.init_cache(cfg, comp, 2, 16))
  rows = [logits]
  for t in range(9, 16):
    logits, cache = fwd(tokens[:, t:t + 1], cache)
    rows.append(logits)
  np.testing.assert_allclose(np.concatenate(rows, 1), ref, atol=1e-5)


def test_low_rank_rbf_equals_explicit_projection():
  """`rbf` in the basis: `‖q − k̂‖²` and `‖qP − c‖²` differ by `‖q‖² − ‖qP‖²`, constant along a
  row, so the weights and outputs equal the model's with `K ← K P Pᵀ`, `V ← V P_v P_vᵀ`."""
  cfg = VARIANTS["rbf-qk_tied"]
  params, tokens = _params(cfg), TOKENS
  kb, vb = _random_bases(2, cfg), _random_bases(3, cfg)
  kr, vr = ((3, 9), (16, 1)), ((2, 5), (4, 16))
  comp = latent.make_compression(kb, vb, kr, vr)

  def project(l, k, v):
    def proj(x, basis, ranks):
      return jnp.stack([x[:, :, h] @ basis[l, h, :, :r] @ basis[l, h, :, :r].T
                        for h, r in enumerate(ranks)], 2)
    return proj(k, kb, kr[l]), proj(v, vb, vr[l])

  np.testing.assert_allclose(_fwd(cfg)(params, tokens, comp),
                             _fwd(cfg, kv_fn=project)(params, tokens), atol=1e-5)


def test_refuses_a_variant_it_cannot_compress_by_name():
  cfg = transformer.Config(**_SMALL, attention="linear")
  params, tokens = _params(cfg), TOKENS[:1, :4]
  eye = np.broadcast_to(np.eye(16, dtype=np.float32), (2, 2, 16, 16))
  comp = latent.make_compression(eye, eye, ((16, 16),) * 2, ((16, 16),) * 2)
  for call in (lambda: latent.init_cache(cfg, comp, 1, 8),
               lambda: latent.forward(params, cfg, tokens, comp),
               lambda: latent.weight_compression(params, cfg, 4)):
    with pytest.raises(ValueError, match="attention='linear' cannot be compressed") as err:
      call()
    assert "\n" not in str(err.value)
  # The uncompressed mode (a transform of K and V) is not a compression: it runs.
  same = _fwd(cfg, kv_fn=lambda l, k, v: (k, v))(params, tokens)
  np.testing.assert_allclose(same, np.asarray(_model(params, cfg, tokens)), atol=1e-6)


def test_weight_compression_reads_w_q_when_keys_are_tied():
  cfg = VARIANTS["softmax-qk_tied"]
  params = _params(cfg)  # the initializer's tree (`random_params`)
  assert "w_k" not in params["blocks"]["attn"]
  comp = latent.weight_compression(params, cfg, 3)
  w = np.asarray(params["blocks"]["attn"]["w_q"], np.float64)[1, :, 16:32]  # layer 1, head 1
  vt = np.linalg.svd(w)[2]
  P = np.asarray(comp.key_basis, np.float64)[1, 1]
  np.testing.assert_allclose(np.abs(P[:, :3].T @ vt[:3].T), np.eye(3), atol=1e-4)


def _rope_projection(cfg, down, up, ranks, pre_rope):
  """Reference `kv_fn`: each head's keys rebuilt explicitly, `k ← k D Uᵀ`, before RoPE (turn
  the sown keys back, `R_{-p}`, project, rotate again) or after it."""
  def kv_fn(l, k, v):
    B, T = k.shape[:2]
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    x = transformer.rope(k, -pos, cfg.rope_theta) if pre_rope else k
    x = jnp.stack([x[:, :, h] @ down[l, h, :, :r] @ up[l, h, :, :r].T
                   for h, r in enumerate(ranks[l])], 2)
    return (transformer.rope(x, pos, cfg.rope_theta) if pre_rope else x), v
  return kv_fn


@pytest.mark.parametrize("pre_rope", [False, True])
def test_low_rank_with_up_projections_equals_explicit_rebuild(pre_rope):
  """Down and up projections apart (not orthonormal, as `analysis.kv.calibrate` fits them):
  the latent cache equals attention with `K ← K D_k U_kᵀ` (before or after RoPE) and
  `V ← V D_v U_vᵀ`, through a cache too."""
  cfg = CONFIGS["llama-gqa"]
  params, tokens = _params(cfg), TOKENS
  shape = (cfg.n_layers, cfg.n_kv_heads, cfg.d_head, cfg.d_head)
  kd, ku, vd, vu = (jax.device_put(np.random.default_rng(i).normal(size=shape).astype(
      np.float32) / 3) for i in range(4, 8))
  kr, vr = ((3, 5), (8, 1)), ((2, 2), (4, 6))
  comp = latent.make_compression(kd, vd, kr, vr, key_up=ku, value_up=vu, pre_rope=pre_rope)
  keys = _rope_projection(cfg, kd, ku, kr, pre_rope)

  def project(l, k, v):
    return keys(l, k, v)[0], jnp.stack([v[:, :, h] @ vd[l, h, :, :r] @ vu[l, h, :, :r].T
                                        for h, r in enumerate(vr[l])], 2)

  want = _fwd(cfg, kv_fn=project)(params, tokens)
  np.testing.assert_allclose(_fwd(cfg)(params, tokens, comp), want, atol=1e-5, rtol=1e-5)
  cache = latent.init_cache(cfg, comp, 2, 16)
  got, _ = jax.jit(lambda t, c: latent.forward(params, cfg, t, comp, cache=c))(tokens, cache)
  got = np.asarray(got)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
  # the projections do change the logits
  assert float(np.abs(got - _reference(cfg)).max()) > 1e-2
  # The up columns count in the bytes the compression adds.
  tied = latent.make_compression(kd, vd, kr, vr, pre_rope=pre_rope)
  assert latent.basis_bytes(comp) == 2 * latent.basis_bytes(tied)
  with pytest.raises(ValueError, match="key_up has shape"):
    latent.make_compression(kd, vd, kr, vr, key_up=ku[:1])
