"""The explicit-matrix model: embedding, causality, stacking, sown intermediates, one matrix."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer

GPT = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)
LLAMA = transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4,
                                 n_kv_heads=2, d_ff=48, max_len=32)


@functools.cache
def setup(cfg):
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, cfg.vocab_size)
  return params, tokens


def forward(cfg, params, tokens, **kw):
  return jax.jit(transformer.Transformer(cfg).apply)({"params": params}, tokens, **kw)


def test_embedding_lookup_is_one_hot_matmul():
  params, tokens = setup(GPT)
  E = params["embed"]["embedding"]
  looked_up = transformer.model.Embed(GPT, GPT.vocab_size).apply(
      {"params": params["embed"]}, tokens)
  one_hot = jax.nn.one_hot(tokens, GPT.vocab_size, dtype=jnp.float32)
  with jax.default_matmul_precision("highest"):
    np.testing.assert_array_equal(looked_up, one_hot @ E)


@pytest.mark.parametrize("cfg", [GPT, LLAMA], ids=["gpt", "llama"])
def test_causality(cfg):
  params, tokens = setup(cfg)
  t = 9
  changed = tokens.at[:, t].set((tokens[:, t] + 1) % cfg.vocab_size)
  base, moved = forward(cfg, params, tokens), forward(cfg, params, changed)
  np.testing.assert_array_equal(base[:, :t], moved[:, :t])
  assert np.abs(base[:, t:] - moved[:, t:]).max() > 1e-4
  bidir = cfg.replace(causal=False)
  base, moved = forward(bidir, params, tokens), forward(bidir, params, changed)
  assert np.abs(base[:, :t] - moved[:, :t]).max() > 1e-4


def test_sliding_window_limits_reach():
  cfg = GPT.replace(window=4, n_layers=1)
  params = transformer.init(cfg, jax.random.key(0))
  _, tokens = setup(GPT)
  changed = tokens.at[:, 3].set((tokens[:, 3] + 1) % cfg.vocab_size)
  diff = np.abs(forward(cfg, params, tokens) - forward(cfg, params, changed)).max(axis=(0, 2))
  # One layer of window 4: position 3 reaches positions 3..6 and nothing else.
  assert (diff[3:7] > 1e-5).all() and (diff[7:] == 0).all() and (diff[:3] == 0).all()


def test_padding_mask_hides_padded_keys():
  params, tokens = setup(GPT)
  valid = jnp.ones((2, 16), bool).at[:, 5].set(False)
  changed = tokens.at[:, 5].set((tokens[:, 5] + 7) % GPT.vocab_size)
  a = forward(GPT, params, tokens, padding_mask=valid)
  b = forward(GPT, params, changed, padding_mask=valid)
  keep = np.r_[0:5, 6:16]
  np.testing.assert_allclose(a[:, keep], b[:, keep], atol=1e-6)


def test_learned_positions_refuse_sequences_longer_than_max_len():
  params, _ = setup(GPT)
  with pytest.raises(ValueError, match="33 tokens exceed max_len=32"):
    forward(GPT, params, jnp.zeros((1, 33), jnp.int32))


def test_tied_and_untied_heads():
  gpt_params, tokens = setup(GPT)
  assert "unembed" not in gpt_params
  h = _final_hidden(GPT, gpt_params, tokens)
  np.testing.assert_allclose(forward(GPT, gpt_params, tokens),
                             h @ gpt_params["embed"]["embedding"].T, atol=1e-5)
  llama_params, tokens = setup(LLAMA)
  assert llama_params["unembed"]["w_out"].shape == (LLAMA.d_model, LLAMA.vocab_size)
  h = _final_hidden(LLAMA, llama_params, tokens)
  np.testing.assert_allclose(forward(LLAMA, llama_params, tokens),
                             h @ llama_params["unembed"]["w_out"], atol=1e-5)


def _final_hidden(cfg, params, tokens):
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  resid = state["intermediates"]["blocks"]["resid_post"][0][-1]
  return transformer.model.Norm(cfg).apply({"params": params["norm_f"]}, resid)


@pytest.mark.parametrize("cfg", [GPT, LLAMA, GPT.replace(norm_position="post")],
                         ids=["gpt", "llama", "post-norm"])
def test_scan_equals_block_fn_layer_by_layer(cfg):
  params = transformer.init(cfg, jax.random.key(0))
  _, tokens = setup(GPT)
  _, state = transformer.Transformer(cfg).apply({"params": params}, tokens,
                                                mutable=["intermediates"])
  inter = state["intermediates"]["blocks"]
  x = inter["resid_pre"][0][0]
  f = jax.jit(transformer.block_fn(cfg))
  for l in range(cfg.n_layers):
    x = f(transformer.layer(params, l), x)
    np.testing.assert_allclose(x, inter["resid_post"][0][l], atol=1e-5)


def test_remat_equals_plain_forward_and_gradient():
  params, tokens = setup(GPT)

  def loss(cfg, p):
    return transformer.Transformer(cfg).apply({"params": p}, tokens).mean()

  g_plain = jax.jit(jax.grad(functools.partial(loss, GPT)))(params)
  g_remat = jax.jit(jax.grad(functools.partial(loss, GPT.replace(remat=True))))(params)
  chex.assert_trees_all_close(g_plain, g_remat, atol=1e-6)


def unrolled_logits(cfg, params, tokens):
  """The model written as a Python loop of `block_fn` layers: no scan, no remat."""
  embed = transformer.model.Embed(cfg, cfg.vocab_size)
  x = embed.apply({"params": params["embed"]}, tokens)
  if cfg.positions == "learned":
    x = x + params["pos_embed"]["embedding"][None, : tokens.shape[1]]
  f = transformer.block_fn(cfg)
  for l in range(cfg.n_layers):
    x = f(transformer.layer(params, l), x)
  x = transformer.model.Norm(cfg).apply({"params": params["norm_f"]}, x)
  if cfg.tie_embeddings:
    return x @ params["embed"]["embedding"].T
  return x @ params["unembed"]["w_out"]


@pytest.mark.parametrize("cfg", [GPT, GPT.replace(remat=True), LLAMA],
                         ids=["gpt", "gpt-remat", "llama"])
def test_scanned_gradient_equals_unrolled_gradient(cfg):
  # The scan with its remat policy (recompute scores, softmax, norms, activation) against
  # autodiff of a plain loop that stores everything.
  params = transformer.init(cfg, jax.random.key(0))
  _, tokens = setup(GPT)
  targets = jnp.roll(tokens, -1, axis=1)

  def loss(logits_fn, p):
    logits = logits_fn(p).astype(jnp.float32)
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1).mean()

  scanned = functools.partial(loss, lambda p: transformer.Transformer(cfg).apply(
      {"params": p}, tokens))
  unrolled = functools.partial(loss, lambda p: unrolled_logits(cfg, p, tokens))
  l_scan, g_scan = jax.jit(jax.value_and_grad(scanned))(params)
  l_loop, g_loop = jax.jit(jax.value_and_grad(unrolled))(params)
  np.testing.assert_allclose(l_scan, l_loop, rtol=1e-6)
  chex.assert_trees_all_close(g_scan, g_loop, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("remat", [False, True], ids=["policy", "remat"])
def test_backward_keeps_matmul_outputs_and_recomputes_scores(remat):
  # The residuals the backward pass reads are the leaves of the VJP closure. Stacked over the
  # layer scan, a (B, H, T, S) score or weight matrix would be (L, B, H, T, T).
  cfg = GPT.replace(remat=remat)
  params, tokens = setup(GPT)
  B, T = tokens.shape
  L, H, D, F = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_ff
  _, vjp = jax.vjp(lambda p: transformer.Transformer(cfg).apply({"params": p}, tokens).sum(),
                   params)
  shapes = [leaf.shape for leaf in jax.tree.leaves(vjp)]
  assert (L, B, H, T, T) not in shapes
  assert ((L, B, T, F) in shapes) == (not remat)  # the output of `w_1`
  assert ((L, B, T, 3 * D) in shapes) == (not remat)  # X [W_Q | W_K | W_V]
  # The block input and the output of `w_o`; with remat only the input.
  assert shapes.count((L, B, T, D)) == (1 if remat else 2)
  # `A V` and its unnormalized `E V` (heads split).
  assert shapes.count((L, B, T, H, D // H)) == (0 if remat else 2)


@pytest.mark.parametrize("remat", [False, True], ids=["policy", "remat"])
def test_forward_pass_gives_attention_a_python_offset(remat, monkeypatch):
  # The block-sparse fast paths run only for a Python-int offset 0; a traced one (as a remat
  # of the whole context would make it) silently falls back to the dense form.
  offsets = []
  local = transformer.ATTENTION["local"]

  @functools.wraps(local)
  def spy(*args, offset=0, **kw):
    offsets.append(offset)
    return local(*args, offset=offset, **kw)

  monkeypatch.setitem(transformer.ATTENTION, "local", spy)
  cfg = GPT.replace(attention="local", window=4, block_size=4, remat=remat)
  params, tokens = setup(GPT)
  jax.grad(lambda p: transformer.Transformer(cfg).apply({"params": p}, tokens).sum())(params)
  assert offsets and all(type(o) is int and o == 0 for o in offsets)


def test_sown_intermediates_are_the_catalog_products():
  params, tokens = setup(LLAMA)
  _, state = transformer.Transformer(LLAMA).apply({"params": params}, tokens,
                                                  mutable=["intermediates"])
  attn = state["intermediates"]["blocks"]["attn"]
  q, k = attn["q"][0], attn["k"][0]  # (L, B, T, H, dh), (L, B, T, Hkv, dh)
  L, B, T, H, dh = q.shape
  assert k.shape == (L, B, T, LLAMA.n_kv_heads, dh)
  k_rep = jnp.repeat(k, LLAMA.kv_groups, axis=3)
  scores = jnp.einsum("lbthd,lbshd->lbhts", q, k_rep) / np.sqrt(dh)
  causal = np.tril(np.ones((T, T), bool))
  np.testing.assert_allclose(np.where(causal, attn["scores"][0], 0), np.where(causal, scores, 0),
                             atol=1e-5)
  weights = attn["weights"][0]
  np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
  assert float(jnp.abs(jnp.where(causal, 0, weights)).max()) == 0.0
  hidden = state["intermediates"]["blocks"]["ffn"]["ffn_hidden"][0]
  assert hidden.shape == (L, B, T, LLAMA.d_ff)


def test_bf16_compute_tracks_float32():
  params, tokens = setup(GPT)
  bf16 = GPT.replace(dtype="bfloat16")
  out = forward(bf16, params, tokens)
  assert out.dtype == jnp.float32 and bool(jnp.isfinite(out).all())
  ref = forward(GPT, params, tokens)
  assert float(jnp.abs(out - ref).max()) < 0.05 * float(jnp.abs(ref).max()) + 0.05
  g = jax.grad(lambda p: transformer.Transformer(bf16).apply({"params": p}, tokens).mean())(params)
  assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(g))


# The preface's "why not one giant matrix?": without non-linearities the train collapses.
LINEAR = transformer.Config(vocab_size=48, d_model=32, n_layers=3, n_heads=4, max_len=8,
                            norm="none", activation="identity", positions="none",
                            use_bias=False, tie_embeddings=False, init_std=0.1)


def _one_matrix(cfg, params):
  """`M = E Π_l (I + W_V W_O)(I + W_1 W_2) W_out`, from the catalog's matrices (float64)."""
  p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
  M = p["embed"]["embedding"]
  eye = np.eye(cfg.d_model)
  for l in range(cfg.n_layers):
    blk = transformer.layer(p, l)
    M = M @ (eye + blk["attn"]["w_v"] @ blk["attn"]["w_o"])
    M = M @ (eye + blk["ffn"]["w_1"] @ blk["ffn"]["w_2"])
  return M @ p["unembed"]["w_out"]


def test_linear_train_collapses_to_one_matrix():
  params = transformer.init(LINEAR, jax.random.key(3))
  tokens_V1 = jnp.arange(LINEAR.vocab_size)[:, None]  # every token, as a 1-token sequence
  M = _one_matrix(LINEAR, params)
  with jax.default_matmul_precision("highest"):
    logits = forward(LINEAR, params, tokens_V1)[:, 0]
  np.testing.assert_allclose(logits, np.eye(LINEAR.vocab_size) @ M, atol=1e-5)
  # Switch one non-linearity back on and the single matrix no longer explains the model.
  for change in (dict(activation="gelu"), dict(norm="rmsnorm")):
    cfg = LINEAR.replace(**change)
    params_nl = transformer.init(cfg, jax.random.key(3))  # same matrices, plus norm scales
    np.testing.assert_array_equal(_one_matrix(cfg, params_nl), M)
    with jax.default_matmul_precision("highest"):
      logits = forward(cfg, params_nl, tokens_V1)[:, 0]
    assert np.abs(logits - M).max() > 1e-2, change


def test_block_jacobian_shape_and_jacrev_agreement():
  cfg = GPT
  params, _ = setup(cfg)
  T, d = 8, cfg.d_model
  x = jax.random.normal(jax.random.key(2), (T, d))
  f = transformer.block_fn(cfg)
  J = jax.jit(jax.jacfwd(f, argnums=1))(transformer.layer(params, 0), x).reshape(T * d, T * d)
  J_rev = jax.jit(jax.jacrev(f, argnums=1))(transformer.layer(params, 0), x).reshape(T * d, T * d)
  assert J.shape == (T * d, T * d)
  np.testing.assert_allclose(J, J_rev, atol=1e-5)
  # Causal: block (i, j) with j > i is exactly zero; the diagonal blocks are not.
  blocks = np.abs(np.asarray(J).reshape(T, d, T, d)).sum(axis=(1, 3))
  assert (np.triu(blocks, 1) == 0).all() and (np.diag(blocks) > 0).all()


def test_block_fn_parts_sum_to_the_block():
  params, _ = setup(GPT)
  x = jax.random.normal(jax.random.key(4), (2, 8, GPT.d_model))
  p = transformer.layer(params, 1)
  mid = x + transformer.block_fn(GPT, "attn")(p, x)
  y = mid + transformer.block_fn(GPT, "ffn")(p, mid)
  np.testing.assert_allclose(y, transformer.block_fn(GPT)(p, x), atol=1e-5)
  with pytest.raises(ValueError, match="part='mlp'"):
    transformer.block_fn(GPT, "mlp")
