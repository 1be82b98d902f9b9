"""One matrix at a time on CPU: a guard around batched LAPACK calls (QR, solves, SVD, eig).

Why it exists. jaxlib's CPU LAPACK kernels split a batch of matrices into chunks, hand the
chunks to XLA's intra-op thread pool and then *block* that pool thread until the chunks are
done. When two such kernels run at once (two independent QRs in one program, which XLA:CPU
schedules concurrently) and the pool has two threads (a 2-core machine), each waits for work
queued behind the other: a deadlock with every thread idle. It was met in `train_many`'s
vmapped runs of `optim.scale_by_condition` (see `experiments/claims/condition_lr.py`). A
kernel given a batch of one runs its matrix inline and never waits on the pool, so on CPU
`one_at_a_time` loops over the batch (`lax.map`), also when the batch comes from an outer
`jax.vmap` (through `jax.custom_batching.custom_vmap`). Other backends get the batched call.
`svd`, `qr`, `eig`, `eigvals`, `eigh` and `eigvalsh` are the guarded `jnp.linalg` functions; the
library calls them wherever a jitted (or vmapped) program decomposes a batch of matrices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp


def one_at_a_time(fn: Callable, core_ndims: Sequence[int]) -> Callable:
  """`fn` over leading batch axes, one problem per call on CPU (a batched call elsewhere).

  Args:
    fn: a function of positional arrays, each with exactly its core dimensions (e.g. a
      matrix and a vector), returning a pytree of arrays; it must also accept a batch on
      leading axes (as `jnp.linalg` functions do), which other backends use.
    core_ndims: the number of core (trailing) dimensions of each argument.

  Returns:
    A function of the same arguments with any common leading batch shape, jit-able and
    vmappable; on CPU every call `fn` makes sees a single problem.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> r_of = one_at_a_time(lambda m: jnp.linalg.qr(m, mode="r"), core_ndims=(2,))
    >>> M = jax.random.normal(jax.random.key(0), (2, 3, 5, 4))
    >>> R = jax.jit(jax.vmap(r_of))(M)
    >>> bool(jnp.allclose(jnp.abs(R), jnp.abs(jnp.linalg.qr(M, mode="r")), atol=1e-5))
    True
  """
  core_ndims = tuple(core_ndims)

  def looped(*args):
    _check(args, core_ndims)
    lead = args[0].shape[:args[0].ndim - core_ndims[0]]
    if not lead:
      return fn(*args)
    flat = [a.reshape((-1,) + a.shape[len(lead):]) for a in args]
    out = jax.lax.map(lambda xs: guarded(*xs), flat)
    return jax.tree.map(lambda o: o.reshape(lead + o.shape[1:]), out)

  @jax.custom_batching.custom_vmap
  def guarded(*args):
    return looped(*args)

  @guarded.def_vmap
  def _rule(axis_size, in_batched, *args):
    args = [a if batched else jnp.broadcast_to(a, (axis_size,) + a.shape)
            for a, batched in zip(args, in_batched, strict=True)]
    out = looped(*args)
    return out, jax.tree.map(lambda _: True, out)

  def dispatch(*args):
    if len(args) != len(core_ndims):
      raise TypeError(f"one_at_a_time: expected {len(core_ndims)} arguments (one per "
                      f"core_ndims entry), got {len(args)}")
    return jax.lax.platform_dependent(*args, cpu=guarded, default=fn)

  # Jitted, so that eager calls of the returned function compile once per shape.
  return jax.jit(dispatch)


def _check(args, core_ndims):
  leads = {a.shape[:a.ndim - c] for a, c in zip(args, core_ndims, strict=True)}
  if len(leads) != 1 or any(a.ndim < c for a, c in zip(args, core_ndims, strict=True)):
    shapes = [a.shape for a in args]
    raise ValueError(f"one_at_a_time: arguments need one common batch shape in front of "
                     f"their core dims {core_ndims}, got shapes {shapes}. Fix: broadcast "
                     f"the arguments to one batch shape first.")



def _guarded(fn: Callable, **kwargs) -> Callable:
  """The guarded `fn(matrix, **kwargs)`, built once per (fn, kwargs) and reused."""
  return _build(fn, tuple(sorted(kwargs.items())))


@functools.cache
def _build(fn: Callable, kwargs: tuple) -> Callable:
  return one_at_a_time(functools.partial(fn, **dict(kwargs)) if kwargs else fn, core_ndims=(2,))


def svd(a: jax.Array, *, full_matrices: bool = True, compute_uv: bool = True):
  """`jnp.linalg.svd` of `a (..., m, n)`, one matrix per LAPACK call on CPU.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> a = jax.random.normal(jax.random.key(0), (3, 4, 5))
    >>> bool(jnp.allclose(svd(a, compute_uv=False), jnp.linalg.svd(a, compute_uv=False),
    ...                   rtol=1e-5))
    True
  """
  return _guarded(jnp.linalg.svd, full_matrices=full_matrices, compute_uv=compute_uv)(a)


def qr(a: jax.Array, *, mode: str = "reduced"):
  """`jnp.linalg.qr` of `a (..., m, n)`, one matrix per LAPACK call on CPU."""
  return _guarded(jnp.linalg.qr, mode=mode)(a)


def eig(a: jax.Array):
  """`jnp.linalg.eig` of `a (..., n, n)` (CPU only, as `jnp.linalg.eig`), one matrix per call.

  Example:
    >>> import jax.numpy as jnp
    >>> w, _ = eig(jnp.stack([jnp.diag(jnp.array([2.0, 1.0]))] * 3))
    >>> sorted(w[0].real.tolist())
    [1.0, 2.0]
  """
  return _guarded(jnp.linalg.eig)(a)


def eigvals(a: jax.Array):
  """`jnp.linalg.eigvals` of `a (..., n, n)`, one matrix per LAPACK call on CPU."""
  return _guarded(jnp.linalg.eigvals)(a)


def eigvalsh(a: jax.Array):
  """`jnp.linalg.eigvalsh` of symmetric `a (..., n, n)`, one matrix per LAPACK call on CPU."""
  return _guarded(jnp.linalg.eigvalsh)(a)


def eigh(a: jax.Array):
  """`jnp.linalg.eigh` of symmetric `a (..., n, n)`, one matrix per LAPACK call on CPU.

  Example:
    >>> import jax.numpy as jnp
    >>> w, v = eigh(jnp.stack([jnp.diag(jnp.array([2.0, 1.0]))] * 3))
    >>> w[0].tolist()
    [1.0, 2.0]
  """
  return _guarded(jnp.linalg.eigh)(a)
