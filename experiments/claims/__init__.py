"""The preface's fourteen claims, each a `Claim` that can fail, run by one runner.

    python -m experiments claim causal-mask [--quick] [--seeds 0 1 2]
    python -m experiments tour [--quick] [--only causal-mask softmax-kernel]

`CLAIMS` maps the ids of DESIGN.md, in tour order (per topic: the existing application, then
the new one), to their `Claim`. A claim whose module is not written yet is registered with
`not_built(...)`: it carries its topic and the preface's sentence, and the tour shows it as
"not built", never as a verdict. To add one, write `experiments/claims/<id>.py` defining
`CLAIM = Claim(...)` and replace its `not_built` line below with `<module>.CLAIM`.

Example:
  >>> from experiments.claims import CLAIMS
  >>> list(CLAIMS)[:2], CLAIMS["causal-mask"].topic
  (['causal-mask', 'kv-compression'], 'full rank & causality')
"""

from experiments.claims import adaptive_rank, causal_mask, kv_compression, lora, softmax_kernel
from experiments.claims.models import RECIPES, base_model, base_model_info, base_models
from experiments.claims.runner import (
    Anchor,
    Claim,
    Spec,
    Threshold,
    run_claim,
    validate_results,
    validate_tour,
)

_EIGEN, _COND, _PSD = "eigenvalues", "condition number", "positive definiteness"
_DECOMP, _ORTHO, _SPARSE = "decomposition", "orthogonality", "sparsity"


def not_built(id: str, topic: str, kind: str, preface: str) -> Claim:
  """A registered claim whose experiment is not written yet (no `run`: shown as not built)."""
  return Claim(id=id, topic=topic, kind=kind, preface=preface)


CLAIMS: dict[str, Claim] = {c.id: c for c in (
    causal_mask.CLAIM,
    kv_compression.CLAIM,
    not_built("residual-eigenvalues", _EIGEN, "existing",
              "Residual connections keep eigenvalues near 1, enabling 100+ layer networks"),
    not_built("eigenvalue-constrained", _EIGEN, "new",
              "Eigenvalue-constrained training to guarantee stable gradient flow"),
    not_built("layernorm-condition", _COND, "existing",
              "LayerNorm and RMSNorm keep condition numbers bounded, stabilizing training"),
    not_built("condition-lr", _COND, "new",
              "Condition-aware learning rates that adapt to local geometry"),
    softmax_kernel.CLAIM,
    not_built("psd-attention", _PSD, "new",
              "Kernel-aware attention variants with guaranteed mathematical properties"),
    lora.CLAIM,
    adaptive_rank.CLAIM,
    not_built("muon", _ORTHO, "existing",
              "Muon optimizer orthogonalizes gradient updates, outperforming Adam on "
              "matrix-shaped weights"),
    not_built("orthogonal-heads", _ORTHO, "new",
              "Orthogonal attention heads that provably learn non-redundant patterns"),
    not_built("sliding-window", _SPARSE, "existing",
              "Sparse attention (Longformer, BigBird) scales to long documents by skipping "
              "distant token pairs"),
    not_built("dynamic-sparsity", _SPARSE, "new",
              "Learned dynamic sparsity patterns that adapt to input structure"),
)}

__all__ = ["Anchor", "CLAIMS", "Claim", "RECIPES", "Spec", "Threshold", "base_model",
           "base_model_info", "base_models", "not_built", "run_claim", "validate_results",
           "validate_tour"]
