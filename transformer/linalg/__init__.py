"""Shared linear algebra for `analysis` and `optim`, written once.

Both packages sit above `transformer` and never import each other, so the iterations
they share live here: power iteration (spectral norms), and the modules added beside it.
Every function treats leading axes as a batch of matrices and works under `jax.jit`.
"""

from transformer.linalg.power import power_iteration, spectral_norm

__all__ = ["power_iteration", "spectral_norm"]
