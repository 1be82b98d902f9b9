"""Muon on your own `flax.linen` model.

    python examples/muon_linen.py          # 23 s of CPU time

A small linen language model with the usual layer names (`nn.Embed`, `nn.Dense` named `fc1`
and `fc2`, an `lm_head`) learns a next-token rule with `optim.muon`. `optim.labels` places
every leaf by its name: the `fc1` and `fc2` kernels are hidden matrices (orthogonalized by
Muon), the embedding and `lm_head` go to AdamW, biases and norms are vectors. It prints the
roles, the loss before and after, and how evenly the first `fc1` update spreads over its
directions (the normalized entropy of its singular values) under Muon and under AdamW.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import optim

V, D, F, T, B = 32, 32, 48, 16, 16


class TinyLM(nn.Module):
  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(V, D)(tokens)
    x = x + nn.Dense(D, name="fc2")(nn.gelu(nn.Dense(F, name="fc1")(nn.LayerNorm()(x))))
    return nn.Dense(V, name="lm_head")(nn.LayerNorm()(x))


def batch(step):
  """Sequences whose next token is `(3 * token + 1) mod V`: learnable from one token."""
  first = jax.random.randint(jax.random.key(step), (B, 1), 0, V)
  steps = jnp.arange(T + 1)[None, :]
  return (first * 3**steps + (3**steps - 1) // 2) % V


def loss_fn(params, tokens):
  logits = TinyLM().apply(params, tokens[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def sv_entropy(update):
  """Normalized entropy of `σ_i² / Σσ²`: 1 when every direction of the update is equally long
  (an orthogonal matrix), near 0 when one direction dominates."""
  s = np.linalg.svd(np.asarray(update, np.float64), compute_uv=False)
  p = s**2 / np.sum(s**2)
  return float(-np.sum(p * np.log(p + 1e-300)) / np.log(p.size))


def main():
  params = TinyLM().init(jax.random.key(0), batch(0)[:, :-1])
  roles = optim.labels(params)["params"]
  for layer, leaves in roles.items():
    print(f"{layer:12s} {leaves}")

  tx = optim.muon(0.02, adam_learning_rate=3e-3)  # Muon on hidden, AdamW elsewhere
  grads = jax.grad(loss_fn)(params, batch(0))
  first = {}
  for name, opt in (("muon", tx), ("adamw", optax.adamw(3e-3))):
    u, _ = opt.update(grads, opt.init(params), params)
    first[name] = sv_entropy(u["params"]["fc1"]["kernel"])
  print(f"first fc1 update, singular-value entropy (1 = orthogonal): muon {first['muon']:.2f}, "
        f"adamw {first['adamw']:.2f}")

  @jax.jit
  def step(params, state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  state = tx.init(params)
  for i in range(100):
    params, state, loss = step(params, state, batch(i))
    if i in (0, 99):
      print(f"step {i:3d}  loss {float(loss):.3f}")
  assert first["muon"] > first["adamw"] + 0.1, first
  assert float(loss) < 0.5 * float(jnp.log(V)), float(loss)


if __name__ == "__main__":
  main()
