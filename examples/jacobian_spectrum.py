"""The Jacobian spectrum of any function, dense and matrix-free.

    python examples/jacobian_spectrum.py   # 16 s of CPU time

`analysis` differentiates any `f(x)`, not only our transformer. Here `f` is a residual
block `x + tanh(x W₁) W₂` on a `(T, D)` input, written in plain JAX. The dense Jacobian
`(T·D, T·D)` (`analysis.jacobian`) gives every singular value and eigenvalue; Lanczos and
Arnoldi (`jacobian_top_singular_values`, `jacobian_top_eigenvalues`) give the top ones from
Jacobian-vector products alone, with error bounds — the path that scales to models whose
Jacobian does not fit in memory. The residual keeps the eigenvalues near 1.
"""

import jax
import jax.numpy as jnp
import numpy as np

import analysis

T, D, F = 8, 32, 64


def main():
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  W1 = jax.random.normal(k1, (D, F)) / np.sqrt(D) * 0.3
  W2 = jax.random.normal(k2, (F, D)) / np.sqrt(F) * 0.3
  x = jax.random.normal(k3, (T, D))

  def f(x):
    return x + jnp.tanh(x @ W1) @ W2

  J = np.asarray(analysis.jacobian(f, x), np.float64)       # (T·D, T·D)
  s = np.linalg.svd(J, compute_uv=False)
  eig = np.linalg.eigvals(J)
  top = analysis.jacobian_top_singular_values(f, x, k=4)
  far = analysis.jacobian_top_eigenvalues(f, x, k=1, shift=1.0)  # max |λ − 1|, by Arnoldi
  print(f"dense:        sigma_1..4 {np.round(s[:4], 4)}, max |lambda - 1| "
        f"{np.abs(eig - 1).max():.4f}")
  print(f"matrix-free:  sigma_1..4 {np.round(np.asarray(top.values), 4)}, "
        f"converged {bool(np.all(top.converged))}")
  print(f"max |lambda - 1|: Arnoldi {abs(complex(far.values[0])):.4f}")
  np.testing.assert_allclose(abs(complex(far.values[0])), np.abs(eig - 1).max(), rtol=1e-3)
  np.testing.assert_allclose(np.asarray(top.values), s[:4], rtol=1e-3)
  dep = analysis.token_dependency(f, x)                     # ‖∂f_i/∂x_j‖
  print("per-position map: token dependency is diagonal:",
        bool(np.all(np.asarray(dep)[~np.eye(T, dtype=bool)] == 0)))


if __name__ == "__main__":
  main()
