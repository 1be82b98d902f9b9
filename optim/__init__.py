"""Optax transforms that shape the transformer's matrices while training.

Layout, as in `transformer`: every weight is used as `x @ W` with `W: (d_in, d_out)`, axis
-2 the reduction axis, axis -1 the output axis, and any leading axes (the stacked layer
axis `L`) a batch of independent matrices. This is optax's `MuonDimensionNumbers`
convention, so no transposes are needed.

Every piece is an `optax.GradientTransformation` with a `NamedTuple` state, composes with
`optax.chain`, `optax.partition`, `optax.inject_hyperparams` and `optax.MultiSteps`, and
works under `jax.jit`:

- `labels` / `select`: parameter roles (`hidden`, `embedding`, `unembedding`, `vector`)
  from parameter paths — ours, and linen/nnx, equinox and Hugging Face names from one table
  (`CONVENTIONS`) — and masks built from them; a leaf no rule places raises, naming it and
  the fix (`label_fn`, `labels_by_shape`); `MatrixAxes` (the type `analysis.spectrum` reads
  too, from `transformer.linalg`) says which axes of a stacked, fused or Einsum leaf are its
  matrix, as `matrix_axes=` of every transform below;
- `newton_schulz`, `scale_by_muon`, `muon`: Muon on the hidden matrices, AdamW elsewhere
  (orthogonality topic); under a device mesh `shard="owner"` orthogonalizes each stacked
  layer on the device that owns it (`owner_spec`);
- `spectral_cap`, `spectral_normalize`: bound or fix `σ_max` (eigenvalue topic);
- `scale_by_condition`: per-matrix rates from `κ = σ_max/σ_min` (condition-number topic);
- `orthogonal_heads`: a decoupled pull toward mutually orthogonal head subspaces
  (orthogonality topic).

Every hyper-parameter is checked where it is given — type (a number, or a schedule where a rate
may be one), sign and range — and a bad one (`muon("0.02")`, `muon(-0.02)`, `beta` outside
`[0, 1)`, `ns_steps <= 0`, ...) raises one line naming the argument, the value and the fix.
At `init` a leaf that is not a float array (an unpartitioned equinox module's bools: pass
`eqx.partition(model, eqx.is_inexact_array)`) and a foreign leaf of three or more axes whose
matrix no `matrix_axes` states are refused; at `update`, gradients whose tree or shapes differ
from the parameters', naming the leaf and both shapes (static: free under `jit`).
`check_finite=True` on any transform names the leaf that holds a NaN or inf.

Defaults follow `optax.contrib.muon`'s where no measurement says otherwise; `optim.muon`'s
docstring and `docs/optim.rst` table the differences (roles, a fused q, k, v split in three)
with their measurements. Trees of other libraries — linen/nnx, equinox (after
`eqx.partition`), Hugging Face — are read by their names and layouts.

Example:
  >>> import jax, optax, transformer, optim
  >>> cfg = transformer.preset("tiny")
  >>> params = transformer.init(cfg, jax.random.key(0))
  >>> tx = optax.chain(optim.muon(0.02, adam_learning_rate=1e-3),
  ...                  optim.spectral_cap(4.0, mask=optim.select(names=("w_o", "w_2"))))
  >>> state = tx.init(params)
"""

import pathlib as _pathlib

import transformer as _transformer

# A user's own `transformer.py` (or folder) earlier on `sys.path` shadows ours, and every import
# below would fail far from the cause: say so first, in one line.
if _pathlib.Path(getattr(_transformer, "__file__", "") or ".").resolve().parent.parent != (
    _pathlib.Path(__file__).resolve().parent.parent):
  raise ImportError(
      f"optim: `import transformer` found "
      f"{getattr(_transformer, '__file__', _transformer)}, not this library's package "
      f"(matrices-in-transformers): a module of yours named transformer shadows it. Fix: "
      f"rename it, or keep it inside a package of yours and run your code with "
      f"`python -m yourpackage.script` (docs/own-model.rst)")

from optim.condition import (
    ConditionEstimate,
    ConditionState,
    condition_multiplier,
    estimate_condition,
    scale_by_condition,
)
from optim.heads import head_gram_overlap, orthogonal_heads
from optim.orthogonalized import MuonState, muon, scale_by_muon, shape_scale
from optim.owners import owner_spec
from optim.roles import CONVENTIONS, ROLES, head_layout, labels, labels_by_shape, select
from optim.spectral import SpectralState, spectral_cap, spectral_normalize
from transformer.linalg.axes import MatrixAxes
from transformer.linalg.polar import NS_COEFFS, newton_schulz
from transformer.version import __version__

__all__ = [
    "__version__",
    "CONVENTIONS", "ConditionEstimate", "ConditionState", "MatrixAxes", "MuonState", "NS_COEFFS",
    "ROLES", "SpectralState",
    "condition_multiplier", "estimate_condition", "head_gram_overlap", "head_layout", "labels",
    "labels_by_shape", "muon",
    "newton_schulz",
    "orthogonal_heads", "owner_spec",
    "scale_by_condition", "scale_by_muon", "select", "shape_scale",
    "spectral_cap", "spectral_normalize",
]
