"""Shared linear algebra for `analysis` and `optim`, written once.

Both packages sit above `transformer` and never import each other, so the iterations
they share live here: power iteration (spectral norms), Newton–Schulz (polar factors, for
Muon), and Lanczos/Arnoldi (matrix-free spectra of Jacobians). Every function treats
leading axes as a batch of matrices (or is batched by `jax.vmap`) and works under
`jax.jit`. The iterative ones return a `NamedTuple` with the values, an error bound per value
and a `converged` flag. `MatrixAxes` says which axes of an array are its matrix (the rest a
batch), for both.
"""

from transformer.linalg.axes import MatrixAxes, as_matrices, as_matrix_axes
from transformer.linalg.lanczos import (
    EigResult,
    SVDResult,
    SymEigResult,
    arnoldi_eig,
    check_interval,
    default_krylov_dim,
    lanczos_eigh,
    lanczos_quadrature,
    lanczos_svd,
)
from transformer.linalg.polar import NS_COEFFS, newton_schulz
from transformer.linalg.power import PowerResult, normalize, power_iteration
from transformer.linalg.serial import one_at_a_time

__all__ = ["EigResult", "MatrixAxes", "NS_COEFFS", "PowerResult", "SVDResult", "SymEigResult",
           "arnoldi_eig", "as_matrices", "as_matrix_axes", "check_interval",
           "default_krylov_dim", "lanczos_eigh", "lanczos_quadrature", "lanczos_svd",
           "newton_schulz", "normalize", "one_at_a_time", "power_iteration"]
