"""Device meshes and shardings for data parallelism and fully sharded parameters (FSDP).

A mesh has two named axes, `data` and `fsdp` (`--mesh data=N` or `--mesh data=N,fsdp=M`).
Batches are split over both axes (every device sees a different slice of the batch);
parameters and optimizer state are split over `fsdp` along their largest divisible axis and
replicated over `data`. XLA inserts the all-gathers and reduce-scatters this implies, so the
training step is the same code on one CPU, on 8 simulated CPU devices and on a GPU/TPU pod.

The mesh axes are `AxisType.Auto`: current `jax.make_mesh` defaults to `Explicit` axes, which
linen modules do not support (`ShardingTypeError` inside `nn.Embed`, even on one device).

Example:
  >>> import jax, transformer
  >>> from experiments.train.sharding import make_mesh, param_shardings, parse_mesh
  >>> params = transformer.init(transformer.preset("tiny"), jax.random.key(0))
  >>> mesh = make_mesh(parse_mesh("data=2,fsdp=4"))   # 8 devices (simulated on CPU)
  >>> shardings = param_shardings(mesh, params)     # a pytree of NamedSharding
  >>> params = jax.device_put(params, shardings)
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

AXES = ("data", "fsdp")


def parse_mesh(spec: str) -> dict[str, int]:
  """`"data=2,fsdp=4"` -> `{"data": 2, "fsdp": 4}`; a missing axis has size 1.

  Raises:
    ValueError: for an unknown axis name or a size that is not a positive integer.
  """
  shape = dict.fromkeys(AXES, 1)
  for part in filter(None, (p.strip() for p in spec.split(","))):
    name, _, size = part.partition("=")
    if name not in AXES or not size.isdigit() or int(size) < 1:
      raise ValueError(f"--mesh {spec!r}: cannot read {part!r}. Fix: write axis=size pairs "
                       f"with axes from {AXES}, e.g. 'data=8' or 'data=2,fsdp=4'.")
    shape[name] = int(size)
  return shape


def make_mesh(shape: dict[str, int], devices=None) -> jax.sharding.Mesh:
  """A `Mesh` with axes `("data", "fsdp")` of the given sizes over the first devices.

  Args:
    shape: axis sizes, as from `parse_mesh`.
    devices: the devices to use (default `jax.devices()`, which spans every host).

  Raises:
    ValueError: if the mesh needs more devices than there are.
  """
  devices = jax.devices() if devices is None else list(devices)
  sizes = tuple(shape.get(a, 1) for a in AXES)
  if math.prod(sizes) > len(devices):
    raise ValueError(f"mesh {dict(zip(AXES, sizes, strict=True))} needs {math.prod(sizes)} "
                     f"devices but {len(devices)} are available. Fix: shrink --mesh, or on CPU "
                     "set XLA_FLAGS=--xla_force_host_platform_device_count=N before importing "
                     "jax.")
  grid = np.asarray(devices[:math.prod(sizes)], dtype=object).reshape(sizes)
  return jax.sharding.Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def leaf_spec(shape: tuple[int, ...], fsdp: int) -> PartitionSpec:
  """Where one parameter (or optimizer-state) array is split over the `fsdp` axis.

  The largest axis divisible by `fsdp` is split (the last such on ties); arrays with no such
  axis, scalars and `fsdp == 1` are replicated. The rule reads only the shape, so Adam's
  moments are sharded exactly like their parameters.
  """
  if fsdp == 1:
    return PartitionSpec()
  divisible = [i for i, n in enumerate(shape) if n % fsdp == 0]
  if not divisible:
    return PartitionSpec()
  axis = max(divisible, key=lambda i: (shape[i], i))
  return PartitionSpec(*[("fsdp" if i == axis else None) for i in range(len(shape))])


def param_shardings(mesh: jax.sharding.Mesh, tree):
  """A `NamedSharding` per leaf of `tree` (arrays or `ShapeDtypeStruct`s), by `leaf_spec`."""
  fsdp = mesh.shape["fsdp"]
  return jax.tree.map(lambda x: NamedSharding(mesh, leaf_spec(tuple(x.shape), fsdp)), tree)


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  """Batches are split on their leading axis over every device (`data` and `fsdp`)."""
  return NamedSharding(mesh, PartitionSpec(AXES))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def check_batch_size(batch_size: int, mesh: jax.sharding.Mesh) -> None:
  """Raises a `ValueError` naming the fix if the batch does not split over the mesh."""
  n = mesh.shape["data"] * mesh.shape["fsdp"]
  if batch_size % n:
    raise ValueError(f"--batch-size {batch_size} is not divisible by the {n} devices of the "
                     f"mesh {dict(mesh.shape)}. Fix: use a batch size that is a multiple of "
                     f"{n} (e.g. {n * max(1, round(batch_size / n))}) or change --mesh.")


def put_batch(array: np.ndarray, sharding: NamedSharding) -> jax.Array:
  """A global array from host data that every process holds in full.

  Each device receives only its own slice (`jax.make_array_from_callback`), which works on one
  host and across hosts alike because every process computes the same `(seed, step)` batch.
  """
  return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])
