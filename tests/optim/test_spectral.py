"""spectral_cap / spectral_normalize: exact σ_max after the update, untouched under the cap."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optim

# The bare `w_1` leaves below are stacks `(L, d_in, d_out)`: outside a tree of ours, only the
# caller can say so (without it, the default mask asks, in one line).
STACK = optim.MatrixAxes(-2, -1)


def _sigma(W):
  return np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)[..., 0]


def _matrices():
  key = jax.random.key(0)
  a, b = jnp.arange(1.0, 17.0), jnp.linspace(-1.0, 1.0, 24)
  return {
      "random": {"w_1": jax.random.normal(key, (2, 16, 24))},
      "rank_one": {"w_1": jnp.stack([jnp.outer(a, b), -3 * jnp.outer(a, b)])},
      "huge": {"w_1": 1e3 * jax.random.normal(key, (2, 16, 24))},
  }


@pytest.mark.parametrize("method", ["svd", "lanczos", "power"])
@pytest.mark.parametrize("case", ["random", "rank_one", "huge"])
def test_cap_holds_after_an_update(case, method):
  params = _matrices()[case]
  updates = jax.tree.map(lambda p: 0.01 * jnp.flip(p, -1), params)
  tx = optim.spectral_cap(2.0, method=method, init_power_steps=50, matrix_axes=STACK)
  capped, state = jax.jit(tx.update)(updates, tx.init(params), params)
  new = params["w_1"] + capped["w_1"]
  # Power mode: the warm-started estimate is a lower bound, tight after `init_power_steps`.
  slack = {"svd": 1e-4, "lanczos": 1e-3, "power": 2e-2}[method]
  assert np.all(_sigma(new) <= 2.0 * (1 + slack))
  assert np.all(_sigma(new) >= 2.0 * (1 - 2e-2))  # the radial projection lands on the cap
  if method != "power":
    assert bool(np.all(state.inner_state.converged["w_1"]))


def _muon_run(method, above, steps=4, cap=0.2):
  """Exact σ_max / cap after each of `steps` updates of muon(0.1) then spectral_cap.

  Stacked `(L, 32, 32)` Gaussian weights start at `σ_max = above · cap`.
  """
  w = jax.random.normal(jax.random.key(4), (3, 32, 32))
  params = {"w_1": w * (above * cap / _sigma(w))[:, None, None]}
  tx = optax.chain(optim.muon(0.1, matrix_axes=STACK),
                   optim.spectral_cap(cap, method=method, matrix_axes=STACK))
  state, step = tx.init(params), jax.jit(tx.update)
  ratios = []
  for i in range(steps):
    grads = {"w_1": jax.random.normal(jax.random.key(10 + i), w.shape)}
    updates, state = step(grads, state, params)
    params = optax.apply_updates(params, updates)
    ratios.append(_sigma(params["w_1"]) / cap)
  return np.array(ratios)  # (steps, L)


def test_default_cap_holds_after_every_muon_update_including_the_first():
  # Gaussian matrices: small gaps between the top singular values, where a single
  # warm-started power step lags behind (measured: 1.09x the cap); Lanczos to tol must not.
  ratios = _muon_run("lanczos", above=5.0)
  assert ratios.max() <= 1.01 and ratios.min() >= 0.98
  assert _muon_run("power", above=5.0).max() > 1.05  # the case is adversarial


def test_default_cap_holds_on_weights_far_above_the_cap():
  ratios = _muon_run("lanczos", above=20.0, steps=2)
  assert ratios.max() <= 1.01 and ratios.min() >= 0.98


def test_under_the_cap_is_left_untouched_and_mask_is_respected():
  key = jax.random.key(1)
  params = {"w_q": 0.01 * jax.random.normal(key, (2, 8, 8)), "w_2": 10 * jnp.eye(8),
            "w_o": 10 * jnp.eye(8), "scale": jnp.ones(8)}
  updates = jax.tree.map(lambda p: 1e-3 * jnp.ones_like(p), params)
  tx = optim.spectral_cap(1.0, mask=optim.select(names=("w_2",)))
  out, _ = jax.jit(tx.update)(updates, tx.init(params), params)
  for name in ("w_q", "w_o", "scale"):  # under the cap, or not chosen: bit for bit
    np.testing.assert_array_equal(out[name], updates[name])
  assert _sigma(params["w_2"] + out["w_2"]) == pytest.approx(1.0, rel=1e-3)


def test_power_estimate_tracks_over_steps():
  params = {"w_1": jax.random.normal(jax.random.key(2), (32, 32))}
  tx = optim.spectral_cap(1.0, method="power", init_power_steps=1)
  state, step = tx.init(params), jax.jit(tx.update)
  for _ in range(30):
    u, state = step(jax.tree.map(jnp.zeros_like, params), state, params)
    params = jax.tree.map(jnp.add, params, u)
  assert _sigma(params["w_1"]) <= 1.0 + 1e-3


@pytest.mark.parametrize("method", ["svd", "lanczos", "power"])
def test_normalize_keeps_target(method):
  params = {"w_1": jax.random.normal(jax.random.key(3), (3, 12, 20)), "w_2": jnp.zeros((4, 4))}
  tx = optim.spectral_normalize(0.5, method=method, init_power_steps=100,
                                matrix_axes={"w_1": STACK})
  updates = jax.tree.map(lambda p: 0.01 * jnp.ones_like(p), params)
  out, _ = jax.jit(tx.update)(updates, tx.init(params), params)
  np.testing.assert_allclose(_sigma(params["w_1"] + out["w_1"]), 0.5, rtol=1e-3)


def test_default_normalize_within_one_percent_on_gaussian_matrices():
  params = {"w_1": 5.0 * jax.random.normal(jax.random.key(5), (2, 3, 32, 32))}
  tx = optim.spectral_normalize(1.0, matrix_axes=STACK)
  state, step = tx.init(params), jax.jit(tx.update)
  for i in range(3):
    grads = {"w_1": 0.3 * jax.random.normal(jax.random.key(20 + i), (2, 3, 32, 32))}
    out, state = step(grads, state, params)
    params = optax.apply_updates(params, out)
    np.testing.assert_allclose(_sigma(params["w_1"]), 1.0, rtol=1e-2)
  zero = optim.spectral_normalize(1.0)
  z = {"w_2": jnp.zeros((4, 4))}
  np.testing.assert_array_equal(zero.update(z, zero.init(z), z)[0]["w_2"], 0.0)


def test_needs_params():
  tx = optim.spectral_cap(1.0)
  p = {"w_1": jnp.eye(3)}
  with pytest.raises(ValueError, match="params"):
    tx.update(p, tx.init(p))
