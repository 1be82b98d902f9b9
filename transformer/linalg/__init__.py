"""Shared linear algebra for `analysis` and `optim`, written once.

Both packages sit above `transformer` and never import each other, so the iterations
they share live here: power iteration (spectral norms), Newton–Schulz (polar factors, for
Muon), and Lanczos/Arnoldi (matrix-free spectra of Jacobians). Every function treats
leading axes as a batch of matrices and works under `jax.jit`.
"""

from transformer.linalg.lanczos import EigResult, SVDResult, arnoldi_eig, lanczos_svd
from transformer.linalg.newton_schulz import NS_COEFFS, newton_schulz
from transformer.linalg.power import power_iteration, spectral_norm

__all__ = ["EigResult", "NS_COEFFS", "SVDResult", "arnoldi_eig", "lanczos_svd", "newton_schulz",
           "power_iteration", "spectral_norm"]
