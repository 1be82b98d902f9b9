"""Where Muon orthogonalizes each matrix under a device mesh: `owner_spec` and the `shard=`
settings of `optim.scale_by_muon` (split from `optim.orthogonalized`, by concern).

`"owner"` splits the stacked layer axis over the mesh, so every device orthogonalizes only the
layers it owns, with no collective inside the Newton–Schulz iterations; `"replicate"` gathers
every matrix to every device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from jax.sharding import Mesh, NamedSharding, PartitionSpec

Shard = Literal["owner", "replicate"]


def owner_spec(shape: tuple[int, ...], mesh: Mesh,
               axes: Sequence[str] | None = None) -> PartitionSpec:
  r"""Where a stacked `(L, ..., d_in, d_out)` momentum lives while it is orthogonalized.

  Axis 0 (the layer axis `L`) is split over the largest ordered subset of `axes` whose sizes
  multiply to a divisor of `L`; the matrix axes are never split, so each device runs the
  Newton–Schulz iteration on whole matrices. The other axes of `axes` replicate the owned
  slice (those devices repeat the same work, with no communication). Fallback: a leaf with
  no leading axis (`ndim == 2`), or whose `L` no mesh axis divides, is replicated (gathered
  to every device, orthogonalized redundantly).

  Args:
    shape: the momentum's shape, at least 2-D.
    mesh: the device mesh (a `Mesh`, or an `AbstractMesh`: only axis names and sizes are read).
    axes: mesh axes to spread ownership over, in mesh order; default every axis of `mesh`.

  Returns:
    A `PartitionSpec`, e.g. `P(("data", "fsdp"), None, None)`, or `P()` for the fallback.

  Example:
    >>> import jax
    >>> from optim import owner_spec
    >>> mesh = jax.sharding.AbstractMesh((2, 4), ("data", "fsdp"))  # or a `Mesh`
    >>> owner_spec((8, 32, 64), mesh), owner_spec((4, 32, 64), mesh), owner_spec((3, 32, 64), mesh)
    (P(('data', 'fsdp'), None, None), P('fsdp', None, None), P())
  """
  axes = tuple(mesh.axis_names if axes is None else axes)
  unknown = [a for a in axes if a not in mesh.axis_names]
  if unknown:
    raise ValueError(f"owner_spec: {unknown=} are not axes of the mesh {dict(mesh.shape)}. "
                     "Fix: pass shard_axes from mesh.axis_names.")
  if len(shape) < 3:
    return PartitionSpec()
  best = ()
  for mask in range(1, 2 ** len(axes)):
    subset = tuple(a for i, a in enumerate(axes) if mask >> i & 1)
    size = math.prod(mesh.shape[a] for a in subset)
    if shape[0] % size == 0 and size > math.prod(mesh.shape[a] for a in best):
      best = subset
  if math.prod(mesh.shape[a] for a in best) == 1:
    return PartitionSpec()
  return PartitionSpec(best[0] if len(best) == 1 else best, *(None,) * (len(shape) - 1))


def _iteration_sharding(shape, shard: Shard | None, mesh: Mesh | None, axes):
  """The `NamedSharding` of one matrix leaf during Newton–Schulz, or `None` (GSPMD decides)."""
  if shard is None:
    return None
  spec = owner_spec(shape, mesh, axes) if shard == "owner" else PartitionSpec()
  return NamedSharding(mesh, spec)


def _check_shard(shard, mesh, shard_axes) -> None:
  if shard not in (None, "owner", "replicate"):
    raise ValueError(f"scale_by_muon: unknown {shard=}; choose None, 'owner' or 'replicate'")
  if shard is not None and not isinstance(mesh, Mesh):
    raise ValueError(f"scale_by_muon: shard={shard!r} needs the device mesh. Fix: pass "
                     "mesh=jax.sharding.Mesh(...) (the mesh the parameters are sharded over).")
  if shard is None and (mesh is not None or shard_axes is not None):
    raise ValueError("scale_by_muon: mesh/shard_axes do nothing without shard. Fix: pass "
                     "shard='owner' (or 'replicate'), or drop mesh and shard_axes.")
  if shard == "owner":
    owner_spec((1, 1, 1), mesh, shard_axes)  # unknown axes fail here, at construction
