"""KV-cache decoding reproduces the full forward pass; sampling respects top-k."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transformer

CONFIGS = {
    "gpt2": transformer.gpt2_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32),
    "llama-gqa": transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4,
                                          n_kv_heads=2, d_ff=48, max_len=32),
    "llama-mqa": transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4,
                                          n_kv_heads=1, d_ff=48, max_len=32, rope_theta=500.0),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cache_decoding_matches_full_forward(name):
  cfg = CONFIGS[name]
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, cfg.vocab_size)
  full = jax.jit(transformer.Transformer(cfg).apply)({"params": params}, tokens)
  cache = transformer.init_cache(cfg, 2, 16)
  logits, cache = transformer.prefill(params, cfg, tokens[:, :5], cache)
  rows = [logits]
  for t in range(5, 12):
    logits_BV, cache = transformer.decode_step(params, cfg, tokens[:, t], cache)
    rows.append(logits_BV[:, None])
  np.testing.assert_allclose(jnp.concatenate(rows, 1), full, atol=1e-5)
  assert int(cache.index) == 12


def test_greedy_generate_equals_repeated_full_forward():
  cfg = CONFIGS["llama-gqa"]
  params = transformer.init(cfg, jax.random.key(0))
  prompt = jnp.array([[3, 1, 4, 1, 5]])
  out = transformer.generate(params, cfg, prompt, max_new_tokens=6, temperature=0.0)
  apply = jax.jit(transformer.Transformer(cfg).apply)
  seq = prompt
  for _ in range(6):  # the naive reference: recompute everything each step
    nxt = jnp.argmax(apply({"params": params}, seq)[:, -1], axis=-1)
    seq = jnp.concatenate([seq, nxt[:, None]], axis=1)
  np.testing.assert_array_equal(out, seq)


def test_top_k_sampling_stays_in_top_k():
  logits = jax.random.normal(jax.random.key(0), (4, 50))
  top3 = np.asarray(jax.lax.top_k(logits, 3)[1])
  draws = jax.vmap(lambda r: transformer.sample(logits, r, 1.0, 3))(
      jax.random.split(jax.random.key(1), 200))
  for b in range(4):
    seen = set(np.asarray(draws[:, b]).tolist())
    assert seen <= set(top3[b].tolist()) and len(seen) == 3


def test_generate_rejects_overlong_request():
  cfg = CONFIGS["gpt2"]
  params = transformer.init(cfg, jax.random.key(0))
  with pytest.raises(ValueError, match="exceeds max_len=32"):
    transformer.generate(params, cfg, jnp.zeros((1, 30), jnp.int32), 5, key=jax.random.key(0))


def test_generate_validates_sampling_arguments():
  cfg = CONFIGS["gpt2"]
  params = transformer.init(cfg, jax.random.key(0))
  prompt = jnp.array([[1, 2, 3]])
  with pytest.raises(ValueError, match="temperature=-0.5"):
    transformer.generate(params, cfg, prompt, 2, key=jax.random.key(0), temperature=-0.5)
  for k in (0, -3):
    with pytest.raises(ValueError, match=f"top_k={k}"):
      transformer.generate(params, cfg, prompt, 2, key=jax.random.key(0), top_k=k)
  with pytest.raises(ValueError, match="key=None"):
    transformer.generate(params, cfg, prompt, 2, temperature=1.0)
  with pytest.raises(ValueError, match="max_new_tokens=0"):
    transformer.generate(params, cfg, prompt, 0, temperature=0)
  # Sampling with a key is reproducible and differs from greedy on a random model's flat logits.
  a = transformer.generate(params, cfg, prompt, max_new_tokens=8, key=jax.random.key(3))
  b = transformer.generate(params, cfg, prompt, max_new_tokens=8, key=jax.random.key(3))
  np.testing.assert_array_equal(a, b)
  assert a.shape == (1, 11)
  np.testing.assert_array_equal(a[:, :3], prompt)


def test_key_convention_old_calls_raise_a_type_error_naming_the_new_order():
  """One convention: the PRNG key is named `key` and comes last (`init(cfg, key)`,
  `lora.init(params, rank, key)`, `sample(logits, key)`); an optional key is the keyword
  `key=`. The old orders fail loudly, never silently with swapped arguments."""
  cfg = CONFIGS["gpt2"]
  key = jax.random.key(0)
  params = transformer.init(cfg, key)
  logits = jnp.array([[0.1, 2.0, -1.0]])
  calls = {
      "transformer.init(cfg, key)": lambda: transformer.init(key, cfg),
      "lora.init(params, rank, key)": lambda: transformer.lora.init(key, params, 4),
      "transformer.sample(logits_BV, key": lambda: transformer.sample(key, logits, 1.0),
      "generate(..., key=": lambda: transformer.generate(params, cfg, logits.astype(int), 1,
                                                          rng=key),
  }
  for new, call in calls.items():
    with pytest.raises(TypeError, match=re.escape(new)):
      call()
  with pytest.raises(TypeError, match="sample"):  # the old greedy call, `sample(None, logits)`
    transformer.sample(None, logits, temperature=0)
  with pytest.raises(TypeError, match="init"):  # a legacy uint32 key is a key too
    transformer.init(jax.random.PRNGKey(0), cfg)
  # The new order: the same draw as jax.random.categorical with that key.
  np.testing.assert_array_equal(transformer.sample(logits, key, 1.0),
                                jax.random.categorical(key, logits, axis=-1))
  a = transformer.lora.init(params, 4, jax.random.key(1))
  assert a["w_q"]["A"].shape == (cfg.n_layers, cfg.d_model, 4)


def test_cache_holds_the_forward_keys_and_values_heads_before_slots():
  """After a prefill and decode steps, slot `s` of layer `l` holds the forward pass's own
  (post-RoPE) key and value of token `s`, stored `(L, B, K, S, Dh)`; the slots beyond stay 0."""
  cfg = CONFIGS["llama-gqa"]
  params = transformer.init(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, cfg.vocab_size)
  _, state = jax.jit(functools.partial(transformer.Transformer(cfg).apply,
                                       mutable=["intermediates"]))({"params": params}, tokens)
  attn = state["intermediates"]["blocks"]["attn"]
  k_LBTKDh, v_LBTKDh = attn["k"][0], attn["v"][0]
  cache = transformer.init_cache(cfg, 2, 12)
  _, cache = transformer.prefill(params, cfg, tokens[:, :4], cache)
  for t in range(4, 9):
    _, cache = transformer.decode_step(params, cfg, tokens[:, t], cache)
  L, B, K, S, dh = cfg.n_layers, 2, cfg.n_kv_heads, 12, cfg.d_head
  assert cache.k.shape == cache.v.shape == (L, B, K, S, dh)
  np.testing.assert_allclose(cache.k[:, :, :, :9], np.moveaxis(k_LBTKDh, 3, 2), atol=1e-5)
  np.testing.assert_allclose(cache.v[:, :, :, :9], np.moveaxis(v_LBTKDh, 3, 2), atol=1e-5)
  assert not np.any(cache.k[:, :, :, 9:]) and not np.any(cache.v[:, :, :, 9:])
  np.testing.assert_array_equal(cache.valid, np.arange(S)[None].repeat(B, 0) < 9)


def test_decode_step_writes_the_cache_in_place():
  """`decode_step` donates its cache: the one passed in is consumed, its buffers become the
  returned cache's, and beyond its arguments a step needs about one layer's keys and values,
  a quarter of the cache here (the old step wrote a second whole cache per token: its output,
  never aliased)."""
  cfg = transformer.llama_config(vocab_size=64, d_model=32, n_layers=4, n_heads=4,
                                 n_kv_heads=4, d_ff=48, max_len=1024)
  params = transformer.init(cfg, jax.random.key(0))
  token_B = jnp.zeros((2,), jnp.int32)
  cache = transformer.init_cache(cfg, 2)
  kv_bytes = cache.k.nbytes + cache.v.nbytes
  m = transformer.decode_step.lower(params, cfg, token_B, cache).compile().memory_analysis()
  assert m.alias_size_in_bytes >= kv_bytes
  assert m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes < kv_bytes / 2
  _, new = transformer.decode_step(params, cfg, token_B, cache)
  assert cache.k.is_deleted() and cache.v.is_deleted() and not new.k.is_deleted()
  assert int(new.index) == 1


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_bytes_per_token_of_a_full_cache_is_the_config_formula(dtype):
  cfg = CONFIGS["llama-gqa"]
  B, S = 3, 20
  cache = transformer.init_cache(cfg, B, S, dtype)
  itemsize = np.dtype(dtype).itemsize
  expected = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * itemsize + 1 + 4 / (B * S)
  assert transformer.decode.bytes_per_token(cache) == pytest.approx(expected, rel=1e-12)
  allocated = sum(x.nbytes for x in jax.tree.leaves(cache))
  assert transformer.decode.cache_nbytes(cache) == allocated == expected * B * S
  abstract = jax.eval_shape(lambda: transformer.init_cache(cfg, B, S, dtype))
  assert transformer.decode.cache_nbytes(abstract) == allocated


@pytest.mark.parametrize("bits", [16, 4])
def test_bytes_per_token_of_a_latent_cache_is_the_rank_formula(bits):
  """Per token: per layer `R = K·r` coefficients for keys and for values, float16 or packed
  `bits`-bit codes (`⌈R·bits/8⌉` bytes), plus the validity flag and the shared index."""
  cfg = CONFIGS["llama-gqa"]
  params = transformer.init(cfg, jax.random.key(0))
  rank, B, S = 3, 2, 10
  comp = transformer.latent.weight_compression(params, cfg, rank, bits=16)
  if bits < 16:
    steps = tuple(jnp.ones((cfg.n_kv_heads * rank,)) for _ in range(cfg.n_layers))
    comp = transformer.latent.make_compression(comp.key_basis, comp.value_basis, comp.key_ranks,
                                               comp.value_ranks, bits, steps, steps)
  cache = transformer.latent.init_cache(cfg, comp, B, S)
  R = cfg.n_kv_heads * rank
  per_layer = 2 * R if bits == 16 else -(-R * bits // 8)
  expected = 2 * cfg.n_layers * per_layer + 1 + 4 / (B * S)
  assert transformer.decode.bytes_per_token(cache) == pytest.approx(expected, rel=1e-12)
