"""Condition estimates against float64 SVD, the rule, and the per-layer multipliers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optim
from optim.condition import KAPPA_MAX


def _with_kappa(seed, shape, kappa):
  rng = np.random.default_rng(seed)
  k = min(shape)
  U = np.linalg.qr(rng.standard_normal((shape[0], k)))[0]
  V = np.linalg.qr(rng.standard_normal((shape[1], k)))[0]
  return ((U * np.geomspace(2.0, 2.0 / kappa, k)) @ V.T).astype(np.float32)


@pytest.mark.parametrize("shape", [(24, 16), (16, 24)])
def test_estimate_matches_svd_and_never_overestimates(shape):
  W = jnp.stack([_with_kappa(i, shape, kappa) for i, kappa in enumerate((3.0, 30.0, 300.0))])
  exact = np.array([np.linalg.cond(np.asarray(w, np.float64)) for w in W])
  k = min(shape)
  v_max = jnp.ones((3, shape[1]))
  v_min = jnp.broadcast_to(jnp.linspace(1.0, 2.0, k), (3, k))
  est = jax.jit(optim.estimate_condition, static_argnums=3)(W, v_max, v_min, 100)
  np.testing.assert_allclose(est.kappa, exact, rtol=2e-2)
  assert np.all(np.asarray(est.kappa) <= exact * (1 + 1e-3))
  s = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)
  assert np.all(np.abs(s[:, 0] - np.asarray(est.sigma_max)) <= np.asarray(est.sigma_max_bound))
  assert np.all(np.abs(s[:, -1] - np.asarray(est.sigma_min)) <= np.asarray(est.sigma_min_bound))
  assert bool(np.all(est.converged))


def test_estimate_reports_unconverged_with_too_few_iterations():
  W = jnp.asarray(np.random.default_rng(9).standard_normal((3, 32, 32)), jnp.float32)
  k = 32
  est = optim.estimate_condition(W, jnp.ones((3, k)), jnp.ones((3, k)), 1)
  exact = np.array([np.linalg.cond(np.asarray(w, np.float64)) for w in W])
  assert not bool(np.all(est.converged))
  assert np.max(np.abs(np.asarray(est.kappa) / exact - 1)) > 1e-2


def test_degenerate_matrices():
  v_max, v_min = jnp.ones((2, 6)), jnp.ones((2, 6))
  W = jnp.stack([jnp.zeros((6, 6)), jnp.outer(jnp.arange(1.0, 7.0), jnp.ones(6))])
  kappa = optim.estimate_condition(W, v_max, v_min, 50).kappa
  assert kappa[0] == 1.0 and kappa[1] > 1e-2 * KAPPA_MAX


def test_multiplier_rule():
  kappa = jnp.array([1.0, 10.0, 40.0, 1000.0])
  m = optim.condition_multiplier(kappa, alpha=0.5, kappa_ref=10.0)
  np.testing.assert_allclose(m, [1.0, 1.0, 0.5, 0.1], rtol=1e-6)
  assert np.all(np.diff(np.asarray(optim.condition_multiplier(jnp.geomspace(1, 1e4, 50)))) <= 0)


def test_scale_by_condition_per_layer_and_refresh():
  W = jnp.stack([_with_kappa(0, (16, 16), 2.0), _with_kappa(1, (16, 16), 160.0)])
  params = {"w_1": W, "scale": jnp.ones(16)}
  tx = optim.scale_by_condition(alpha=1.0, kappa_ref=4.0, every=3, init_power_steps=100,
                                power_steps=100, matrix_axes={"w_1": optim.MatrixAxes(-2, -1)})
  state = tx.init(params)
  updates = jax.tree.map(jnp.ones_like, params)
  step = jax.jit(tx.update)
  out, state = step(updates, state, params)
  np.testing.assert_allclose(out["w_1"][0], 1.0)
  np.testing.assert_allclose(out["w_1"][1], 4.0 / 160.0, rtol=3e-2)
  np.testing.assert_array_equal(out["scale"], 1.0)
  # Between refreshes the estimate is carried; at count % every == 0 it is recomputed.
  kappas = []
  for _ in range(3):
    params = {"w_1": params["w_1"].at[1].set(W[0]), "scale": params["scale"]}
    out, state = step(updates, state, params)
    kappas.append(float(state.inner_state.kappa["w_1"][1]))
  assert kappas[0] == kappas[1] > 100 and kappas[2] == pytest.approx(2.0, rel=2e-2)
