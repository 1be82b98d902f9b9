"""LoRA: step-0 identity, the merged update equals (alpha/R) A B, gradients reach only adapters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import transformer
from transformer import lora

CFG = transformer.Config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_len=32)
LLAMA = transformer.llama_config(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                 d_ff=48, max_len=32)


@pytest.mark.parametrize("cfg", [CFG, LLAMA], ids=["gpt", "llama"])
def test_step0_logits_bit_identical(cfg):
  params = transformer.init(cfg, jax.random.key(0))
  adapters = lora.init(params, 4, jax.random.key(1), lora.ALL_HIDDEN)
  assert ("w_gate" in adapters) == (cfg.activation == "swiglu")
  tokens = jax.random.randint(jax.random.key(2), (2, 16), 0, cfg.vocab_size)
  apply = jax.jit(transformer.Transformer(cfg).apply)
  base = apply({"params": params}, tokens)
  merged = apply({"params": lora.merge(params, adapters, alpha=16.0)}, tokens)
  np.testing.assert_array_equal(np.asarray(merged), np.asarray(base))


def test_merge_adds_scaled_product_float64_reference():
  params = transformer.init(CFG, jax.random.key(0))
  adapters = lora.init(params, 3, jax.random.key(1), ("w_q", "w_2"))
  adapters["w_q"]["B"] = jax.random.normal(jax.random.key(3), adapters["w_q"]["B"].shape)
  merged = lora.merge({"params": params}, adapters, alpha=6.0)["params"]
  A = np.asarray(adapters["w_q"]["A"], np.float64)
  B = np.asarray(adapters["w_q"]["B"], np.float64)
  want = np.asarray(params["blocks"]["attn"]["w_q"], np.float64) + 2.0 * A @ B
  np.testing.assert_allclose(merged["blocks"]["attn"]["w_q"], want, atol=1e-6)
  assert np.linalg.matrix_rank(want[0] - np.asarray(params["blocks"]["attn"]["w_q"][0])) == 3
  np.testing.assert_array_equal(merged["blocks"]["ffn"]["w_2"], params["blocks"]["ffn"]["w_2"])
  np.testing.assert_array_equal(merged["blocks"]["attn"]["w_k"], params["blocks"]["attn"]["w_k"])


def test_params_fn_trains_only_adapters_and_lowers_loss():
  params = transformer.init(CFG, jax.random.key(0))
  adapters = lora.init(params, 4, jax.random.key(1))
  f = lora.params_fn(params, alpha=8.0)
  model = transformer.Transformer(CFG)
  tokens = jax.random.randint(jax.random.key(2), (4, 17), 0, 8)

  def loss(ad):
    logits = model.apply({"params": f(ad)}, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  grads = jax.grad(loss)(adapters)
  assert set(grads) == {"w_q", "w_v"}
  # With B = 0, dL/dA = 0 exactly and dL/dB = (alpha/R) Aᵀ dL/dW is not.
  assert float(jnp.abs(grads["w_q"]["A"]).max()) == 0.0
  assert float(jnp.abs(grads["w_q"]["B"]).max()) > 0.0
  tx = optax.adam(1e-2)
  state = tx.init(adapters)
  @jax.jit
  def step(ad, st):
    updates, st = tx.update(jax.grad(loss)(ad), st)
    return optax.apply_updates(ad, updates), st

  first = float(loss(adapters))
  for _ in range(10):
    adapters, state = step(adapters, state)
  assert float(loss(adapters)) < first - 0.05


def test_bad_rank_and_target_raise():
  params = transformer.init(CFG, jax.random.key(0))
  with pytest.raises(ValueError, match="rank"):
    lora.init(params, 33, jax.random.key(1))
  with pytest.raises(ValueError, match="w_gate"):
    lora.init(params, 2, jax.random.key(1), ("w_gate",))
  with pytest.raises(ValueError, match="not a block matrix"):
    lora.init(params, 2, jax.random.key(1), ("embed",))
