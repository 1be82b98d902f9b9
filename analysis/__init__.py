"""What the matrices do: spectra, Jacobians, and the preface's seven properties.

Layout, as in `transformer`: weights are used as `x @ W` with `W: (d_in, d_out)`, and every
function treats leading axes as a batch of matrices (stacked layers, heads). Functions compute
and return arrays or dicts of arrays, jit-able where the math allows; certificates (rank,
definiteness) run in float64 and return the tolerance that decided them. Rendering (markdown,
figures) lives only in `analysis.report`.

Modules::

  weights:     every named weight matrix and the per-head circuits `W_QK^h`, `W_OV^h`.
  spectra:     singular values, condition number, stable/effective/numerical rank, power-law
               exponent, Marchenko–Pastur edge, float64 certificates.
  powerlaw:    power-law tail fits: Clauset–Shalizi–Newman (WeightWatcher's alpha) and Hill.
  jacobians:   dense and matrix-free (Lanczos, Arnoldi) Jacobian spectra, depth, causality.
  curvature:   loss Hessian: top eigenvalues (Lanczos), spectral density (stochastic Lanczos
               quadrature) of it or any symmetric operator, Gauss–Newton products.
  edge_of_stability: sharpness, the top (preconditioned) Hessian eigenvalue, against the
               optimizer's stability threshold (2/η for gradient descent).
  properties:  definiteness, decomposition, orthogonality, sparsity.
  stability:   causal Jacobian eigenvalues, certified attention-logit bound, effective κ.
  heads:       head ablation (loss rise, prunable heads) and attention-pattern similarity.
  report:      the atlas: markdown and PNG figures.
  kv:          rank of the KV cache: calibration bases, rank allocation, rank per input.

Example:
  >>> import jax, transformer, analysis
  >>> cfg = transformer.preset("tiny"); params = transformer.init(cfg, jax.random.key(0))
  >>> w_q = params["blocks"]["attn"]["w_q"]  # (L, d, H·dh): stacked layers
  >>> analysis.spectrum(w_q, matrix_axes=(-2, -1))["stable_rank"].shape == (cfg.n_layers,)
  True
"""

import pathlib as _pathlib

import transformer as _transformer

# A user's own `transformer.py` (or folder) earlier on `sys.path` shadows ours, and every import
# below would fail far from the cause: say so first, in one line.
if _pathlib.Path(getattr(_transformer, "__file__", "") or ".").resolve().parent.parent != (
    _pathlib.Path(__file__).resolve().parent.parent):
  raise ImportError(
      f"analysis: `import transformer` found "
      f"{getattr(_transformer, '__file__', _transformer)}, not this library's package "
      f"(matrices-in-transformers): a module of yours named transformer shadows it. Fix: "
      f"rename it, or keep it inside a package of yours and run your code with "
      f"`python -m yourpackage.script` (docs/own-model.rst)")

from analysis import kv
from analysis.contracts import check_attention
from analysis.curvature import (
    SpectralDensity,
    gauss_newton_operator,
    hessian_operator,
    hessian_spectral_density,
    hessian_top_eigenvalues,
    spectral_density,
    spectral_moments,
    split_params,
)
from analysis.edge_of_stability import (
    Sharpness,
    SharpnessTracker,
    adam_preconditioner,
    adam_second_moment,
    sharpness,
    stability_threshold,
)
from analysis.heads import head_ablation, pattern_similarity, redundancy_summary
from analysis.jacobians import (
    causal_leak,
    depth_profile,
    is_block_lower_triangular,
    jacobian,
    jacobian_bytes,
    jacobian_top_eigenvalues,
    jacobian_top_singular_values,
    layer_inputs,
    model_jacobian_top_singular_values,
    stack_fn,
    stream_input,
    token_dependency,
)
from analysis.powerlaw import power_law_fit
from analysis.properties import (
    activation_sparsity,
    attention_entropy,
    cache_rank,
    energy_captured,
    energy_curve,
    head_redundancy,
    head_subspace_overlap,
    local_mass,
    orthogonality_error,
    principal_angles,
    psd_certificate,
    rank_for_energy,
    softmax_kernel,
    symmetric_eigenvalues,
    symmetry_score,
    top_k_mass,
)
from analysis.spectra import (
    causal_logdet,
    effective_rank,
    eigenvalues,
    factored_singular_values,
    mp_edge,
    power_law_alpha,
    rank_certificate,
    singular_values,
    spectrum,
    stable_rank,
)
from analysis.stability import (
    attention_input_bound,
    causal_jacobian_blocks,
    causal_jacobian_eigenvalues,
    causal_jacobian_spectra,
    effective_condition,
    logit_bound,
    max_logit,
)
from analysis.weights import Factored, Matrix, circuits, matrices
from transformer.version import __version__

__all__ = [
    "__version__",
    "Sharpness", "SharpnessTracker", "SpectralDensity", "adam_preconditioner",
    "adam_second_moment", "gauss_newton_operator", "hessian_operator",
    "hessian_spectral_density", "hessian_top_eigenvalues", "power_law_fit", "sharpness",
    "spectral_density", "spectral_moments", "split_params", "stability_threshold",
    "attention_input_bound", "causal_jacobian_blocks", "causal_jacobian_eigenvalues",
    "causal_jacobian_spectra", "effective_condition", "logit_bound", "max_logit",
    "Factored", "Matrix", "activation_sparsity", "attention_entropy", "cache_rank",
    "causal_leak", "causal_logdet", "check_attention", "circuits", "depth_profile",
    "effective_rank",
    "eigenvalues", "energy_captured", "energy_curve", "factored_singular_values",
    "head_ablation", "head_redundancy", "head_subspace_overlap", "is_block_lower_triangular",
    "jacobian",
    "jacobian_bytes", "jacobian_top_eigenvalues", "jacobian_top_singular_values", "kv",
    "layer_inputs", "local_mass", "matrices", "model_jacobian_top_singular_values", "mp_edge",
    "orthogonality_error", "redundancy_summary",
    "pattern_similarity",
    "power_law_alpha", "principal_angles", "psd_certificate", "rank_certificate",
    "rank_for_energy", "singular_values", "softmax_kernel", "spectrum", "stable_rank",
    "stack_fn", "stream_input", "symmetric_eigenvalues", "symmetry_score", "token_dependency",
    "top_k_mass",
]
