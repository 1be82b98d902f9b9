"""The training step's optimizers: the one AdamW against optax with its decay mask, Muon's own rate
and its hidden matrices, the schedule."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import train
from tests.experiments.train.configs import SMALL
from transformer import names


def test_muon_has_its_own_learning_rate():
  params = {"embed": {"embedding": jnp.ones((8, 4))},
            "blocks": {"attn": {"w_q": jnp.ones((2, 4, 4))}}}
  rng = np.random.default_rng(0)
  grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)

  def second_update(**rates):
    tc = SMALL.replace(optimizer="muon", weight_decay=0.0, grad_clip=0.0, **rates)
    tx = train.optimizer(tc)
    state = tx.init(params)
    _, state = tx.update(grads, state, params)
    return tx.update(grads, state, params)[0]

  base = second_update(learning_rate=1e-3, muon_learning_rate=2e-2)
  muon_x3 = second_update(learning_rate=1e-3, muon_learning_rate=6e-2)
  adam_x3 = second_update(learning_rate=3e-3, muon_learning_rate=2e-2)
  w_q = lambda u: np.asarray(u["blocks"]["attn"]["w_q"])
  emb = lambda u: np.asarray(u["embed"]["embedding"])
  np.testing.assert_allclose(w_q(muon_x3), 3 * w_q(base), rtol=1e-5)
  np.testing.assert_allclose(emb(muon_x3), emb(base), rtol=1e-6)
  np.testing.assert_allclose(emb(adam_x3), 3 * emb(base), rtol=1e-5)
  np.testing.assert_allclose(w_q(adam_x3), w_q(base), rtol=1e-6)
  assert train.TrainConfig().muon_learning_rate == 0.02


def test_adamw_decays_matrices_only_and_schedule():
  params = {"embed": {"embedding": jnp.ones((8, 4))}, "norm_f": {"scale": jnp.ones(4)},
            "blocks": {"attn": {"w_q": jnp.ones((2, 4, 4)), "b_q": jnp.ones((2, 4))}}}
  mask = names.decay_mask(params)
  assert mask == {"embed": {"embedding": True}, "norm_f": {"scale": False},
                  "blocks": {"attn": {"w_q": True, "b_q": False}}}
  tc = SMALL.replace(weight_decay=0.5)
  tx = train.optimizer(tc)
  zeros = jax.tree.map(jnp.zeros_like, params)
  state = tx.init(params)
  _, state = tx.update(zeros, state, params)  # step 0: the warm-up starts at lr = 0
  updates, _ = tx.update(zeros, state, params)  # step 1: zero gradients leave only the decay
  lr_1 = tc.learning_rate / tc.warmup_steps
  expected = jax.tree.map(lambda p, m: -lr_1 * 0.5 * m * p, params, mask)
  jax.tree.map(lambda u, e: np.testing.assert_allclose(u, e, rtol=1e-6), updates, expected)
  assert set(train.OPTIMIZERS) >= {"adamw", "sgd", "muon"}
  lr = train.schedule(SMALL)
  np.testing.assert_allclose([lr(0), lr(5), lr(40)], [0.0, 3e-3, 3e-4], rtol=1e-6)


def test_muon_entry_orthogonalizes_hidden_matrices_only():
  rng = np.random.default_rng(0)
  params = {"embed": {"embedding": jnp.ones((8, 4))},
            "blocks": {"attn": {"w_q": jnp.ones((2, 4, 4))}}}
  grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
  tc = SMALL.replace(optimizer="muon", weight_decay=0.0)
  tx = train.optimizer(tc.replace(grad_clip=0.0))
  state = tx.init(params)
  _, state = tx.update(grads, state, params)  # step 0: the warm-up starts at lr = 0
  updates, _ = tx.update(grads, state, params)
  lr_1 = tc.learning_rate / tc.warmup_steps
  # The embedding takes AdamW; w_q takes Muon: an update with all singular values alike.
  assert np.abs(updates["embed"]["embedding"]).max() <= 1.01 * lr_1
  sigma = np.linalg.svd(np.asarray(updates["blocks"]["attn"]["w_q"]), compute_uv=False)
  raw = np.linalg.svd(np.asarray(grads["blocks"]["attn"]["w_q"]), compute_uv=False)
  assert (raw.min(-1) / raw.max(-1) < 0.3).all()  # the gradient itself is far from orthogonal
  assert (sigma.min(-1) / sigma.max(-1) > 0.5).all() and sigma.min() > 0


# -------------------------------------------------------------------------- the one AdamW


def _updates(tx, params, steps=3):
  state, out = tx.init(params), []
  for t in range(steps):
    grads = jax.tree.map(lambda p, t=t: jnp.sin(3.0 * p + t) + 0.1, params)
    u, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, u)
    out.append(u)
  return out


@pytest.mark.parametrize("decay", ["matrices", "all"])
def test_adamw_is_optax_adamw_with_the_named_decay_mask(decay):
  import transformer

  params = transformer.init(transformer.preset("llama-tiny"), jax.random.key(0))
  # An independent mask: a leaf decays when its name is a weight matrix's (`w_*`, embedding).
  by_name = lambda p: jax.tree_util.tree_map_with_path(
      lambda path, _: str(getattr(path[-1], "key", "")).startswith("w_")
      or getattr(path[-1], "key", "") == "embedding", p)
  ref = optax.adamw(optax.linear_schedule(1e-2, 1e-3, 3), b1=0.9, b2=0.95, eps=1e-8,
                    weight_decay=0.3, mask=by_name if decay == "matrices" else None)
  got = train.adamw(optax.linear_schedule(1e-2, 1e-3, 3), weight_decay=0.3, decay=decay)
  for a, b in zip(_updates(got, params), _updates(ref, params), strict=True):
    chex.assert_trees_all_close(a, b, rtol=1e-6, atol=1e-9)
  zero = jax.tree.map(jnp.zeros_like, params)  # a zero gradient: the decay alone
  u, _ = got.update(zero, got.init(params), params)
  assert bool(jnp.any(u["blocks"]["norm_1"]["scale"] != 0)) == (decay == "all")


def test_adamw_middle_acts_before_the_decay_and_bad_decay_names_the_fix():
  params = {"w_q": jnp.ones((2, 3))}
  grads = {"w_q": jnp.full((2, 3), 0.5)}
  tx = train.adamw(0.1, weight_decay=0.2, decay="all", middle=(optax.scale(0.0),))
  u, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(u["w_q"], -0.1 * 0.2 * np.ones((2, 3)), rtol=1e-6)  # decay only
  with pytest.raises(ValueError, match=r"decay='hidden'.*Fix: use one of \['all', 'matrices'\]"):
    train.adamw(0.1, weight_decay=0.1, decay="hidden")


def test_the_matrices_mask_is_the_roles_mask_on_every_shape():
  import optim
  import transformer
  from experiments import models

  roles = optim.select(roles=("hidden", "embedding", "unembedding"))
  cfgs = [models.config(m) for m in models.SHAPES]
  cfgs += [transformer.preset(p) for p in ("tiny", "llama-tiny")]
  for cfg in cfgs:
    p = jax.eval_shape(lambda cfg=cfg: transformer.init(cfg, jax.random.key(0)))
    assert jax.tree.leaves(roles(p)) == jax.tree.leaves(train.DECAY_MASKS["matrices"](p))
