"""The preface's fourteen claims, each a `Claim` that can fail, run by one runner.

    python -m experiments claim causal-mask [--quick] [--seeds 0 1 2 3 4] [--sizes mini,small]
    python -m experiments tour [--quick] [--only causal-mask softmax-kernel]
    python -m experiments.claims.table [--check README.md]

One module per claim (`causal_mask.py`, ...: its `Sizes`, `QUICK`, `FULL`, `run`, `CLAIM`),
and the machinery every claim shares, each module one concern:

| module | concern |
| --- | --- |
| `claim` | the frozen declarations: `Claim`, `Threshold`, `Extension`, `Anchor`, `Sizes`, `Spec` |
| `stats` | t-quantiles, 95% intervals, paired effects, rank correlations, number formatting |
| `schema` | the validators of `results.json` (a claim's and the tour's) |
| `runner` | running a claim and its verdict (`decide`: the one rule, margins and controls) |
| `report` | markdown: a claim's `report.md` and the tour's (imports `claim`, `stats` only) |
| `tour` | `python -m experiments tour` and `claim` |
| `table` | the README's verdict table from the committed runs in `results/` |
| `validate` | `python -m experiments.claims.validate ROOT` (CI, after the quick tour) |

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

from experiments.claims import (
  adaptive_rank,
  causal_mask,
  condition_lr,
  dynamic_sparsity,
  eigenvalue_constrained,
  kv_compression,
  layernorm_condition,
  lora,
  muon,
  orthogonal_heads,
  psd_attention,
  residual_eigenvalues,
  sliding_window,
  softmax_kernel,
)
from experiments.claims.claim import Anchor, Claim, Sizes, Spec, Threshold
from experiments.claims.runner import run_claim
from experiments.claims.schema import validate_results, validate_tour


def not_built(id: str, topic: str, kind: str, preface: str) -> Claim:
  """A registered claim whose experiment is not written yet (no `run`: shown as not built)."""
  return Claim(id=id, topic=topic, kind=kind, preface=preface)


CLAIMS: dict[str, Claim] = {c.id: c for c in (
    causal_mask.CLAIM,
    kv_compression.CLAIM,
    residual_eigenvalues.CLAIM,
    eigenvalue_constrained.CLAIM,
    layernorm_condition.CLAIM,
    condition_lr.CLAIM,
    softmax_kernel.CLAIM,
    psd_attention.CLAIM,
    lora.CLAIM,
    adaptive_rank.CLAIM,
    muon.CLAIM,
    orthogonal_heads.CLAIM,
    sliding_window.CLAIM,
    dynamic_sparsity.CLAIM,
)}

__all__ = ["Anchor", "CLAIMS", "Claim", "Sizes", "Spec", "Threshold", "not_built", "run_claim",
           "validate_results", "validate_tour"]
