"""Train a small equinox transformer with `optim.muon`: the hidden matrices on Muon, the rest on
AdamW, the optimizer state over `eqx.filter(model, eqx.is_inexact_array)`.

Run from a project of yours that has the library installed:

    python -m yourpackage.muon_equinox      # about 20 s on 2 CPU cores

The task is arithmetic sequences mod V (`a, a+s, a+2s, ...`, `a` and `s` random): the next token
needs the two before it, so attention has to learn to look back. Prints how `optim.labels`
routes each leaf, then the loss, which falls from ln V (about 2.8) to near 0.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import optim

V, D, H, T, L, BATCH, STEPS = 16, 32, 4, 12, 2, 32, 150


class Block(eqx.Module):
  norm_1: eqx.nn.LayerNorm
  attn: eqx.nn.MultiheadAttention
  norm_2: eqx.nn.LayerNorm
  mlp: eqx.nn.MLP

  def __init__(self, key):
    k_attn, k_mlp = jax.random.split(key)
    self.norm_1, self.norm_2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
    self.attn = eqx.nn.MultiheadAttention(H, D, key=k_attn)  # query_proj ... output_proj
    self.mlp = eqx.nn.MLP(D, D, 4 * D, depth=1, activation=jax.nn.gelu, key=k_mlp)

  def __call__(self, x_TD):
    causal_TT = jnp.tril(jnp.ones((T, T), bool))
    h_TD = jax.vmap(self.norm_1)(x_TD)
    x_TD = x_TD + self.attn(h_TD, h_TD, h_TD, mask=causal_TT)
    return x_TD + jax.vmap(self.mlp)(jax.vmap(self.norm_2)(x_TD))


class Model(eqx.Module):
  emb: eqx.nn.Embedding
  pos_emb: eqx.nn.Embedding
  blocks: list
  norm_f: eqx.nn.LayerNorm
  lm_head: eqx.nn.Linear

  def __init__(self, key):
    keys = jax.random.split(key, L + 3)
    self.emb = eqx.nn.Embedding(V, D, key=keys[0])
    self.pos_emb = eqx.nn.Embedding(T, D, key=keys[1])
    self.blocks = [Block(k) for k in keys[2:-1]]
    self.norm_f = eqx.nn.LayerNorm(D)
    self.lm_head = eqx.nn.Linear(D, V, use_bias=False, key=keys[-1])

  def __call__(self, tokens_T):
    x_TD = jax.vmap(self.emb)(tokens_T) + jax.vmap(self.pos_emb)(jnp.arange(T))
    for block in self.blocks:
      x_TD = block(x_TD)
    return jax.vmap(self.lm_head)(jax.vmap(self.norm_f)(x_TD))


def batch(key):
  """`(BATCH, T)` arithmetic sequences mod V."""
  k_start, k_step = jax.random.split(key)
  start = jax.random.randint(k_start, (BATCH, 1), 0, V)
  step = jax.random.randint(k_step, (BATCH, 1), 1, V)
  return (start + step * jnp.arange(T)) % V


def loss_fn(model, tokens_BT):
  logits_BTV = jax.vmap(model)(tokens_BT)[:, 1:-1]  # from position 1 on: two tokens seen
  targets_BT = tokens_BT[:, 2:]
  return optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT).mean()


def main():
  model = Model(jax.random.key(0))
  params, static = eqx.partition(model, eqx.is_inexact_array)
  roles = optim.labels(params)
  print("roles:", {r: sum(x == r for x in jax.tree.leaves(roles)) for r in optim.ROLES})
  tx = optim.muon(0.02, adam_learning_rate=3e-3, n_heads=H)  # per-head Muon on the attention
  state = tx.init(params)

  @eqx.filter_jit
  def train_step(params, state, tokens_BT):
    loss, grads = eqx.filter_value_and_grad(
        lambda p: loss_fn(eqx.combine(p, static), tokens_BT))(params)
    updates, state = tx.update(grads, state, params)
    return eqx.apply_updates(params, updates), state, loss

  losses = []
  for step, key in enumerate(jax.random.split(jax.random.key(1), STEPS)):
    params, state, loss = train_step(params, state, batch(key))
    losses.append(float(loss))
    if step % 25 == 0 or step == STEPS - 1:
      print(f"step {step:3d}  loss {losses[-1]:.3f}")
  first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
  print(f"loss {first:.3f} -> {last:.3f} (ln V = {math.log(V):.3f})")
  assert last < 0.5 * first, (first, last)


if __name__ == "__main__":
  main()
