"""`analysis` on a `flax.nnx` model: its state's matrices, and any `f(x)` built from it.

Nothing in `analysis` is specific to our model: spectra take arrays (an `nnx.Param` or an
`nnx.State` leaf is one), Jacobians take functions. Checked against float64 numpy SVDs and
`jax.jacrev` of the model's pure form (`nnx.split` / `nnx.merge`).
"""

import jax
import numpy as np
import pytest
from flax import nnx

import analysis

D, F, T = 8, 16, 4


class Mlp(nnx.Module):
  def __init__(self, rngs):
    self.fc1 = nnx.Linear(D, F, rngs=rngs)
    self.fc2 = nnx.Linear(F, D, rngs=rngs)

  def __call__(self, x):
    return x + self.fc2(nnx.gelu(self.fc1(x)))


@pytest.fixture(scope="module")
def model():
  return Mlp(nnx.Rngs(0))


def _sv(W):
  return np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)


def test_spectra_of_the_state(model):
  state = nnx.as_pure(nnx.state(model, nnx.Param))
  ranks = {k: analysis.spectrum(v["kernel"])["stable_rank"] for k, v in state.items()}
  for k, W in (("fc1", model.fc1.kernel), ("fc2", model.fc2.kernel)):
    s = _sv(W[...])
    np.testing.assert_allclose(ranks[k], np.sum(s**2) / s[0] ** 2, rtol=1e-5)
    # The variable itself is accepted where an array is.
    np.testing.assert_allclose(analysis.singular_values(W), s, rtol=1e-5)
  # A stack of layers made by `nnx.vmap` is a batch of matrices, one spectrum per layer.
  stack = nnx.vmap(lambda key: nnx.Linear(D, D, rngs=nnx.Rngs(key)))(
      jax.random.split(jax.random.key(1), 3))
  W = stack.kernel[...]
  assert W.shape == (3, D, D)
  np.testing.assert_allclose(analysis.spectrum(W, matrix_axes=(-2, -1))["condition_number"],
                             [_sv(w)[0] / _sv(w)[-1] for w in W], rtol=1e-4)


def test_jacobians_of_a_function_built_from_the_model(model):
  x = jax.random.normal(jax.random.key(2), (T, D))
  graphdef, state = nnx.split(model)
  pure = lambda x: nnx.merge(graphdef, state)(x)
  ref = np.asarray(jax.jacrev(pure)(x), np.float64).reshape(T * D, T * D)
  J = analysis.jacobian(lambda x: model(x), x)
  np.testing.assert_allclose(J, ref, rtol=1e-5, atol=1e-6)
  top_fn = lambda x: analysis.jacobian_top_singular_values(lambda y: model(y), x, k=3).values
  top = jax.jit(top_fn)(x)
  np.testing.assert_allclose(top, _sv(ref)[:3], rtol=1e-3)
  # The MLP acts on each position alone: its token dependency is diagonal.
  dep = np.asarray(analysis.token_dependency(lambda y: model(y), x))
  assert bool(analysis.is_block_lower_triangular(dep))
  np.testing.assert_array_equal(dep[~np.eye(T, dtype=bool)], 0)
  assert np.all(np.diag(dep) > 0)
