"""`analysis` refuses the inputs a new user gets wrong, in one line raised by our code before
jax traces anything; `spectrum` reads `MatrixAxes` like `optim`. (`analysis/inputs.py`.)
"""


import functools

import jax.numpy as jnp
import numpy as np
import pytest

import analysis
import optim
from tests.refusals import refused as _refused

refused = functools.partial(_refused, package=analysis)  # one line, from our code


def test_spectrum_reads_matrix_axes_like_optim():
  rng = np.random.default_rng(0)
  qkv = rng.normal(size=(16, 3, 2, 8)).astype(np.float32)  # (D, 3, H, Dh), fused
  ref = np.linalg.svd(np.moveaxis(qkv.astype(np.float64), 1, 0).reshape(3, 16, 16),
                      compute_uv=False)
  for axes in (optim.MatrixAxes(0, (2, 3)), (0, (2, 3))):
    spec = analysis.spectrum(jnp.asarray(qkv), matrix_axes=axes)
    np.testing.assert_allclose(spec["singular_values"], ref, rtol=1e-5)
    np.testing.assert_allclose(spec["condition_number"], ref[:, 0] / ref[:, -1], rtol=1e-4)
  per_head = analysis.spectrum(jnp.asarray(qkv[:, 0]), matrix_axes=optim.MatrixAxes(0, 2))
  want = np.linalg.svd(np.moveaxis(qkv[:, 0].astype(np.float64), 1, 0), compute_uv=False)
  np.testing.assert_allclose(per_head["singular_values"], want, rtol=1e-5)  # (H, min(D, Dh))
  torch_layout = analysis.spectrum(jnp.asarray(qkv[:, 0, 0]).T, matrix_axes=(-1, -2))
  np.testing.assert_allclose(torch_layout["singular_values"], want[0], rtol=1e-5)


BAD_SPECTRA = [
    (lambda: analysis.spectrum({"w_q": jnp.ones((4, 4))}), "got a dict"),
    (lambda: analysis.spectrum(jnp.ones(4)), "shape (4,)"),
    (lambda: analysis.spectrum(jnp.ones((4, 4), jnp.int32)), "dtype int32"),
    (lambda: analysis.spectrum(jnp.ones((4, 4)), matrix_axes=(0, 2)), "out of range"),
    (lambda: analysis.spectrum(jnp.ones((4, 4)), matrix_axes=(0,)), "not a MatrixAxes"),
]


@pytest.mark.parametrize("call, needle", BAD_SPECTRA, ids=[n for _, n in BAD_SPECTRA])
def test_bad_matrices_refused(call, needle):
  with pytest.raises(ValueError) as e:
    call()
  refused(e, needle)


def _f(x):
  return jnp.tanh(x) @ jnp.ones((4, 4))


@pytest.mark.parametrize("fn", [analysis.jacobian, analysis.jacobian_top_singular_values,
                                analysis.jacobian_top_eigenvalues, analysis.token_dependency])
def test_jacobian_functions_refuse_tuples_and_swaps(fn):
  x = jnp.ones((3, 4))
  with pytest.raises(ValueError) as e:
    fn(lambda x: (_f(x), x), x)
  refused(e, "f returned a tuple of 2", "lambda x: f(x)[0]")
  with pytest.raises(ValueError) as e:
    fn(lambda x: {"y": _f(x)}, x)
  refused(e, "f returned a dict")
  with pytest.raises(ValueError) as e:
    fn(x, _f)
  refused(e, "did you swap them?")
  with pytest.raises(ValueError) as e:
    fn(_f, jnp.ones((3, 4), jnp.int32))
  refused(e, "dtype int32")


def _loss(params, batch):
  return jnp.sum((batch @ params["w"]) ** 2) + jnp.sum(params["b"] ** 2)


def test_hessian_refuses_integer_trees_and_swapped_arguments():
  batch = jnp.ones((5, 3))
  params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2, jnp.int32)}
  with pytest.raises(ValueError) as e:
    analysis.hessian_top_eigenvalues(_loss, params, batch)
  refused(e, "'b'", "dtype int32", "float")
  with pytest.raises(ValueError) as e:
    analysis.hessian_top_eigenvalues(params, _loss, batch)
  refused(e, "look swapped")
  with pytest.raises(ValueError) as e:
    analysis.hessian_spectral_density(_loss, {"w": np.arange(6).reshape(3, 2)}, batch)
  refused(e, "'w'", "dtype int")
  # Integer leaves left out by `wrt` are fine: only differentiated leaves must be float.
  ok = analysis.hessian_top_eigenvalues(lambda p, b: jnp.sum((b @ p["w"]) ** 2), params, batch,
                                        k=1, wrt=lambda name: name == "w", tol=1e-6)
  H = 2 * np.kron(np.asarray(batch.T @ batch, np.float64), np.eye(2))  # d²/dw² of ‖Xw‖²
  np.testing.assert_allclose(ok.values[0], np.linalg.eigvalsh(H)[-1], rtol=1e-5)
