"""`transformer.layout.matmul`: `x @ w` whose weight gradient reads a row-major `xᵀ`.

Its value must be `x @ w` bit for bit, and every derivative the library takes of it (reverse,
forward, second order, under `vmap`) must equal the float64 derivative of `x @ w`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer.layout import matmul


def _inputs(shape=(3, 5, 4), d_out=6, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(shape).astype(np.float32),
          rng.standard_normal((shape[-1], d_out)).astype(np.float32))


def _loss(f):
  return lambda x, w: jnp.sum(jnp.tanh(f(x, w)) ** 2)


def test_value_is_the_plain_product_bit_for_bit():
  x, w = _inputs()
  np.testing.assert_array_equal(jax.jit(matmul)(x, w), jax.jit(jnp.matmul)(x, w))


def test_reverse_gradients_match_float64_autodiff():
  x, w = _inputs()
  got = jax.jit(jax.grad(_loss(matmul), argnums=(0, 1)))(x, w)
  with jax.enable_x64(True):
    want = jax.grad(_loss(jnp.matmul), argnums=(0, 1))(x.astype(np.float64), w.astype(np.float64))
  for g, r in zip(got, want, strict=True):
    np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6)


def test_weight_gradient_is_x_transpose_times_cotangent_in_numpy():
  x, w = _inputs((7, 4), 3)
  ct = np.random.default_rng(1).standard_normal((7, 3))
  _, vjp = jax.vjp(matmul, x, w)
  dx, dw = vjp(ct.astype(np.float32))
  x64, w64 = x.astype(np.float64), w.astype(np.float64)
  np.testing.assert_allclose(dw, x64.T @ ct, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(dx, ct @ w64.T, rtol=1e-5, atol=1e-6)


def test_forward_mode_and_jacrev_agree():
  x, w = _inputs((2, 3), 2)
  for argnum in (0, 1):
    fwd = jax.jacfwd(matmul, argnums=argnum)(x, w)
    rev = jax.jacrev(matmul, argnums=argnum)(x, w)
    np.testing.assert_allclose(fwd, rev, rtol=1e-6, atol=1e-7)
  # d(x @ w)_ij / d w_kl = x_ik δ_jl
  np.testing.assert_allclose(jax.jacfwd(matmul, argnums=1)(x, w),
                             np.einsum("ik,jl->ijkl", x, np.eye(2)), rtol=1e-6)


def test_hessian_vector_product_matches_plain_matmul():
  x, w = _inputs((4, 3), 3)
  v = np.random.default_rng(2).standard_normal(w.shape).astype(np.float32)

  def hvp(f, x, w, v):
    g = jax.grad(lambda w: _loss(f)(x, w))
    return jax.jvp(g, (w,), (v,))[1]

  got = hvp(matmul, x, w, v)
  with jax.enable_x64(True):
    want = hvp(jnp.matmul, *(a.astype(np.float64) for a in (x, w, v)))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [0, None])
def test_vmapped_weights_and_inputs(axis):
  x, w = _inputs((3, 5, 4))
  ws = np.stack([w, 2 * w])
  f = jax.vmap(jax.grad(_loss(matmul), argnums=1), in_axes=(axis, 0))
  g = jax.vmap(jax.grad(_loss(jnp.matmul), argnums=1), in_axes=(axis, 0))
  xs = np.stack([x, -x]) if axis == 0 else x
  np.testing.assert_allclose(f(xs, ws), g(xs, ws), rtol=1e-5, atol=1e-6)
