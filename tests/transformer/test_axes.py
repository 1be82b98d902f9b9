"""`MatrixAxes`, the one type `optim` and `analysis` share: `as_matrices` against numpy's own
transpose and reshape, and malformed axes refused in one line. (`transformer/linalg/axes.py`.)"""

import numpy as np
import pytest

from transformer.linalg import MatrixAxes, as_matrices, as_matrix_axes

X = np.random.default_rng(0).normal(size=(5, 4, 3, 2)).astype(np.float32)


@pytest.mark.parametrize("axes, order, shape", [
    (MatrixAxes(), (0, 1, 2, 3), (5, 4, 3, 2)),                 # ours: the last two
    (MatrixAxes(-1, -2), (0, 1, 3, 2), (5, 4, 2, 3)),           # torch: (d_out, d_in)
    (MatrixAxes(1, (2, 3)), (0, 1, 2, 3), (5, 4, 6)),           # an Einsum (D, H, Dh)
    (MatrixAxes(0, (2, 3)), (1, 0, 2, 3), (4, 5, 6)),           # fused (D, 3, H, Dh)
    (MatrixAxes((3, 1), 0), (2, 3, 1, 0), (3, 8, 5)),           # flattened in the given order
])
def test_as_matrices_is_numpys_transpose_and_reshape(axes, order, shape):
  M, restore = as_matrices(X, axes)
  np.testing.assert_array_equal(M, np.transpose(X, order).reshape(shape))
  np.testing.assert_array_equal(restore(M), X)


def test_pairs_are_read_and_anything_else_refused_in_one_line():
  assert as_matrix_axes((0, [1, 2])) == MatrixAxes(0, (1, 2))
  assert as_matrix_axes([-1, -2]) == MatrixAxes(-1, -2)
  for bad in ((0,), (0, 1, 2), (0, "1"), (True, 1), (0, ()), "kernel", None):
    with pytest.raises(ValueError) as e:
      as_matrix_axes(bad, "optim.muon: matrix_axes")
    assert "\n" not in str(e.value) and "optim.muon: matrix_axes" in str(e.value)
  for bad, needle in ((MatrixAxes(0, 4), "out of range"), (MatrixAxes(-5, 0), "out of range"),
                      (MatrixAxes(1, (2, 1)), "twice")):
    with pytest.raises(ValueError, match=needle) as e:
      as_matrices(X, bad, "'w'")
    assert "'w'" in str(e.value) and "(5, 4, 3, 2)" in str(e.value)
