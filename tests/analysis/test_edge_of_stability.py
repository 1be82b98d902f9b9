"""Sharpness against dense Hessians, and the thresholds against optax's own iterations."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis import curvature
from analysis import edge_of_stability as eos


def _run(tx, curvature_value, steps=3000):
  """`|θ|` after `steps` updates of `tx` on `½ λ θ²` from θ = 1 (float64)."""
  with jax.enable_x64(True):
    theta = jnp.ones((), jnp.float64)

    def body(carry, _):
      theta, state = carry
      updates, state = tx.update(curvature_value * theta, state)
      return (jnp.clip(theta + updates, -1e10, 1e10), state), None  # diverged stays finite

    (theta, _), _ = jax.lax.scan(body, (theta, tx.init(theta)), None, length=steps)
    return abs(float(theta))


@pytest.mark.parametrize("kind", ["gd", "heavy_ball", "nesterov", "adam"])
def test_threshold_is_where_the_optimizer_starts_to_diverge(kind):
  lr, beta, p = 0.1, 0.9, 0.05  # p: a frozen Adam preconditioner √v̂ + ε
  if kind == "adam":
    # Adam's direction with ν frozen: EMA momentum, divided by P.
    tx = optax.chain(optax.ema(beta, debias=False), optax.scale(-lr / p))
    threshold = eos.stability_threshold(lr, optimizer="adam", b1=beta)
    scale = p  # the threshold is on λ / P
  else:
    momentum = 0.0 if kind == "gd" else beta
    tx = optax.sgd(lr, momentum=momentum or None, nesterov=kind == "nesterov")
    threshold = eos.stability_threshold(lr, momentum=momentum,
                                              nesterov=kind == "nesterov")
    scale = 1.0
  assert _run(tx, scale * threshold * 0.97) < 1e-3
  assert _run(tx, scale * threshold * 1.03) > 1e3


def _logistic():
  X = jax.random.normal(jax.random.key(0), (40, 5))
  y = (jax.random.uniform(jax.random.key(1), (40,)) < 0.5).astype(jnp.float32)
  params = {"w": 0.3 * jax.random.normal(jax.random.key(2), (5,)), "b": jnp.zeros(())}

  def loss(p, batch):
    X, y = batch
    return optax.sigmoid_binary_cross_entropy(X @ p["w"] + p["b"], y).mean()

  return loss, params, (X, y)


def test_adam_preconditioned_sharpness_matches_dense():
  loss, params, batch = _logistic()
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.inject_hyperparams(optax.adamw)(learning_rate=0.05, b1=0.9, b2=0.95))
  state = tx.init(params)
  for _ in range(3):
    updates, state = tx.update(jax.grad(loss)(params, batch), state, params)
    params = optax.apply_updates(params, updates)
  theta, merge, _ = curvature.split_params(params)
  H = np.asarray(jax.hessian(lambda t: loss(merge(t), batch))(theta), np.float64)
  nu, count = eos.adam_second_moment(state)
  assert int(count) == 3
  P = curvature.split_params(nu)[0] / (1 - 0.95**3)
  P = np.sqrt(np.asarray(P, np.float64)) + 1e-8
  ref = np.linalg.eigvalsh(H / np.sqrt(np.outer(P, P)))[-1]
  out = eos.sharpness(loss, params, batch, learning_rate=0.05, optimizer="adam",
                            opt_state=state, b2=0.95, tol=1e-5)
  assert bool(out.converged)
  np.testing.assert_allclose(out.sharpness, ref, rtol=1e-4)
  np.testing.assert_allclose(out.threshold, 38 / 0.05, rtol=1e-6)
  np.testing.assert_allclose(out.two_over_lr, 2 / 0.05, rtol=1e-6)
  with pytest.raises(ValueError, match="opt_state"):
    eos.sharpness(loss, params, batch, learning_rate=0.05, optimizer="adam")
  with pytest.raises(ValueError, match="ScaleByAdamState"):
    eos.adam_second_moment(optax.sgd(0.1).init(params))


def test_tracker_logs_floats_and_warm_starts():
  loss, params, batch = _logistic()
  theta, merge, _ = curvature.split_params(params)
  lam = np.linalg.eigvalsh(np.asarray(jax.hessian(lambda t: loss(merge(t), batch))(theta)))
  track = eos.SharpnessTracker(loss, momentum=0.9, nesterov=True, tol=1e-4)
  first = track(params, batch, 0.1)
  second = track(params, batch, 0.1)  # same point: the warm start converges sooner
  assert set(first) == {"sharpness", "sharpness_threshold", "two_over_lr", "sharpness_bound",
                        "sharpness_converged", "sharpness_krylov_dim"}
  assert all(isinstance(v, float) for v in first.values())
  for row in (first, second):
    np.testing.assert_allclose(row["sharpness"], lam[-1], rtol=1e-4)
    np.testing.assert_allclose(row["sharpness_threshold"], 3.8 / 2.8 / 0.1, rtol=1e-6)
    assert row["sharpness_converged"] == 1.0
  assert second["sharpness_krylov_dim"] <= first["sharpness_krylov_dim"]
