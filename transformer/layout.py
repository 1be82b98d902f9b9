"""`x @ W` whose reverse pass reads `xᵀ` from a row-major copy: the weight gradient's layout.

The weight gradient of `Y = X W` is `dW = Xᵀ dY`, a contraction over the token axis, which is
axis 0 of the row-major `X: (N, d_in)`. XLA:CPU's fast matmul path (its YNNPACK fusions) does
not take a transposed left operand, so autodiff's `dot(X, dY, contracting (0, 0))` ran on the
slow generic kernel: at micro-20 the weight gradients were 3.5 ms of a 15 ms train step, about
12 GFLOP/s for 8 MFLOP products (`python -m experiments.benchmarks.sweep`).

`matmul(x, w)` is `x @ w` with a custom JVP whose weight term reads `xᵀ` from a copy laid out
row-major (kept by an optimization barrier, so XLA cannot fold the transpose back into the
product). Transposed for the reverse pass, that term is `dW = (xᵀ) dY`, a plain row-major
matmul. The forward value is `x @ w` itself (bit for bit), the input gradient `dY Wᵀ` is
unchanged, and forward mode (`jax.jacfwd`, `jax.jvp`), `vmap` and higher derivatives work as
for `@`; `dW` equals autodiff's up to the summation order of float32 (relative 1e-6).

Off CPU the product is plain `x @ w`: GPU and TPU matmuls take transposed operands natively.
Inside `with plain_products():` it is plain everywhere (a program traced there is autodiff's own;
`python -m experiments.benchmarks.sweep --strategies dispatch,dispatch-plain` times both side by
side).
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

__all__ = ["matmul", "plain_products"]

_PLAIN = contextvars.ContextVar("plain_products", default=False)


@contextlib.contextmanager
def plain_products():
  """Within it, `matmul` traces as plain `x @ w` (autodiff's own reverse pass).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> with plain_products():
    ...   "custom_jvp" in str(jax.make_jaxpr(matmul)(jnp.ones((2, 3)), jnp.ones((3, 4))))
    False
  """
  token = _PLAIN.set(True)
  try:
    yield
  finally:
    _PLAIN.reset(token)


def matmul(x, w):
  """`x @ w` for `x: (..., d_in)`, `w: (d_in, d_out)`, with `dW` computed as `(xᵀ) dY`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x, w = jnp.ones((2, 3, 4)), jnp.ones((4, 5))
    >>> bool((matmul(x, w) == x @ w).all())
    True
    >>> g = jax.grad(lambda w: matmul(x, w).sum())(w)
    >>> g.shape, float(g[0, 0])
    ((4, 5), 6.0)
  """
  if _PLAIN.get() or jax.default_backend() != "cpu" or w.ndim != 2:
    return x @ w
  return _matmul(x, w)


@jax.custom_jvp
def _matmul(x, w):
  return x @ w


def _matmul_jvp(primals, tangents):
  x, w = primals
  dx, dw = tangents
  y = x @ w
  dy = None
  if not isinstance(dx, SymbolicZero):
    dy = dx @ w
  if not isinstance(dw, SymbolicZero):
    x_DN = jax.lax.optimization_barrier(x.reshape(-1, x.shape[-1]).T)
    term = (x_DN.T @ dw).reshape(y.shape)
    dy = term if dy is None else dy + term
  return y, jnp.zeros_like(y) if dy is None else dy


_matmul.defjvp(_matmul_jvp, symbolic_zeros=True)
