"""`one_at_a_time`: per-matrix LAPACK calls on CPU, values equal to the batched call."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optim
from transformer.linalg.serial import one_at_a_time


def _lapack_operand_shapes(compiled_text: str) -> list[str]:
  """The first operand shape of every LAPACK custom call in compiled HLO text."""
  shapes = []
  for line in compiled_text.splitlines():
    if "custom-call(" in line and 'custom_call_target="lapack_' in line:
      shapes.append(re.search(r"operand_layout_constraints=\{(\w+\[[\d,]*\])", line).group(1))
  return shapes


def _r_of(m):
  return jnp.linalg.qr(m, mode="r")


def test_nested_vmap_and_batch_axes_give_single_matrix_calls_and_batched_values():
  M = jax.random.normal(jax.random.key(0), (2, 3, 4, 6, 5))
  f = jax.jit(jax.vmap(jax.vmap(one_at_a_time(_r_of, core_ndims=(2,)))))
  shapes = _lapack_operand_shapes(f.lower(M).compile().as_text())
  assert shapes == ["f32[6,5]"]
  # QR is unique up to the signs of R's rows: compare |R| with numpy's in float64.
  ref = np.abs(np.linalg.qr(np.asarray(M, np.float64), mode="r"))
  np.testing.assert_allclose(np.abs(np.asarray(f(M))), ref, atol=1e-5)
  # Without the guard, XLA:CPU receives the whole batch in one call.
  plain = jax.jit(jax.vmap(jax.vmap(_r_of))).lower(M).compile().as_text()
  assert _lapack_operand_shapes(plain) == ["f32[2,3,4,6,5]"]


def test_unbatched_arguments_are_broadcast_under_vmap():
  A = jax.random.normal(jax.random.key(1), (4, 4)) + 4 * jnp.eye(4)
  b = jax.random.normal(jax.random.key(2), (3, 4))
  solve = one_at_a_time(lambda a, v: jnp.linalg.solve(a, v), core_ndims=(2, 1))
  got = jax.jit(jax.vmap(solve, in_axes=(None, 0)))(A, b)
  ref = np.linalg.solve(np.asarray(A, np.float64), np.asarray(b, np.float64).T).T
  np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-5)


def test_vmapped_condition_estimate_calls_lapack_per_matrix():
  """The `train_many` shape (runs × stacked layers) that deadlocked XLA:CPU before."""
  W = jax.random.normal(jax.random.key(3), (3, 4, 16, 8))
  v = jnp.ones((3, 4, 8))
  f = jax.jit(jax.vmap(lambda w, v: optim.estimate_condition(w, v, v, 40).kappa))
  shapes = _lapack_operand_shapes(f.lower(W, v).compile().as_text())
  assert shapes and all(s in ("f32[16,8]", "f32[8,8]") for s in shapes), shapes
  s = np.linalg.svd(np.asarray(W, np.float64), compute_uv=False)
  np.testing.assert_allclose(np.asarray(f(W, v)), s[..., 0] / s[..., -1], rtol=1e-3)


def test_mismatched_batch_shapes_name_the_fix():
  f = one_at_a_time(lambda a, v: a @ v, core_ndims=(2, 1))
  with pytest.raises(ValueError, match="one common batch shape"):
    f(jnp.ones((2, 3, 3)), jnp.ones((5, 3)))


def test_vmapped_lanczos_and_arnoldi_call_lapack_per_matrix():
  """The Ritz problems of Krylov methods vmapped over stacked layers: one matrix per call."""
  from transformer.linalg import arnoldi_eig, lanczos_svd

  A = jax.random.normal(jax.random.key(4), (3, 40, 40))

  def top(a):
    svd = lanczos_svd(lambda v: a @ v, lambda u: a.T @ u, jnp.ones(40), k=2, krylov_dim=40,
                      check_every=4)
    eig = arnoldi_eig(lambda v: a @ v, jnp.ones(40), k=2, krylov_dim=40, check_every=4)
    return svd.values, eig.values

  f = jax.jit(jax.vmap(top))
  shapes = _lapack_operand_shapes(f.lower(A).compile().as_text())
  assert shapes and all(s == "f32[40,40]" for s in shapes), shapes
  values, _ = f(A)
  s = np.linalg.svd(np.asarray(A, np.float64), compute_uv=False)[:, :2]
  np.testing.assert_allclose(np.asarray(values), s, rtol=1e-3)


def test_principal_angles_of_stacked_heads_call_lapack_per_matrix():
  """`orthogonal-heads` measures angles between stacked heads; that deadlocked once too."""
  from analysis.properties import principal_angles

  A = jax.random.normal(jax.random.key(5), (4, 6, 32, 8))
  B = jax.random.normal(jax.random.key(6), (4, 6, 32, 8))
  f = jax.jit(principal_angles)
  shapes = _lapack_operand_shapes(f.lower(A, B).compile().as_text())
  assert shapes and all(s in ("f32[32,8]", "f32[8,8]", "f32[32,32]") for s in shapes), shapes
  a64, b64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
  qa, qb = np.linalg.qr(a64)[0], np.linalg.qr(b64)[0]
  cos = np.linalg.svd(np.swapaxes(qa, -1, -2) @ qb, compute_uv=False)
  ref = np.sort(np.arccos(np.clip(cos, -1, 1)), axis=-1)
  np.testing.assert_allclose(np.sort(np.asarray(f(A, B)), axis=-1), ref, atol=1e-4)
