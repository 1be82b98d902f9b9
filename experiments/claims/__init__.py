"""The preface's fourteen claims, each a `Claim` that can fail, and their registry `CLAIMS`.

    python -m experiments claim causal-mask [--quick] [--seeds 0 1 2 3 4] [--axes scale=mini-20]
    python -m experiments tour [--quick] [--only causal-mask softmax-kernel]
    python -m experiments.commands.table [--check README.md]

One module per claim (`causal_mask.py`, ...: its `Sizes`, `QUICK`, `FULL`, `run`, `CLAIM`) and
nothing else: the machinery they share (declarations, statistics, the verdict rule, the
runner, reports) is `experiments.verdict`, the commands that run them `experiments.commands`.
A claim imports no other claim; what two claims share lives in `experiments.lab`.

`CLAIMS` maps the ids of DESIGN.md, in tour order (per topic: the existing application, then
the new one), to their `Claim`. A claim whose module is not written yet is registered with
`not_built(...)`: it carries its topic and the preface's sentence, and the tour shows it as
"not built", never as a verdict.

To add a claim, write `experiments/claims/<id>.py` (under 400 lines, a docstring of at most
40: question, operationalisation, protocol; measurements that grow go to `experiments/lab/`),
freezing its thresholds before it ever runs, and register its `CLAIM` below, in its topic's
place. A claim that trains its arms from scratch subclasses `TrainedSizes` (so the run records
its tokens per parameter) and trains each size at 20 tokens per parameter; its rates are
chosen on `tuning_seeds` only, by the edge rule (`experiments.lab.edge.Search`). A rate goes
down the house one way, each module entered once and none called back into:

    claim (`z.grid`; an arm of `experiments.train.arms`, also named in `lab.optimizers`)
      -> `experiments.lab.tuning.tune_on_seeds` (owns the search loop; `lab.edge.Search`,
         called and returning, only says which rates to run next and which one won)
      -> `experiments.train.sweep.train_many` (injects each rate, `optax.inject_hyperparams`)
      -> `experiments.train.arms`: `on_budget` (the rate on the budget's schedule), the arm's
         `make_tx`
      -> `experiments.train.step` (`adamw`, `train_step`)

The other tuners (`lab.attention_arms.tune_rate`, `lab.norm_training.tune_fixed`,
`lab.lora.tune_rates`, `lab.kv_arms.tune_fit_rate`) own their loop over `Search` the same
way. The template::

    import dataclasses

    from experiments.verdict import Claim, Spec, Threshold, TrainedSizes, axes


    @dataclasses.dataclass(frozen=True)
    class MySizes(TrainedSizes):
      model: str
      steps: int
      batch_size: int = 16
      seq_len: int = 128


    QUICK = MySizes(model="quick", steps=20)
    FULL = MySizes(model="micro-20", steps=409)  # 20 tokens per parameter


    def run(spec: Spec) -> dict:
      runs = {"arm": {}, "base": {}}
      for seed in spec.seeds:
        ...  # measure each arm at spec.sizes on this seed
        runs["arm"][seed], runs["base"][seed] = {"loss": ...}, {"loss": ...}
      return {"runs": runs, "setup": {"model": spec.sizes.model}}


    CLAIM = Claim(
        id="my-claim", topic="...", kind="new", preface="the preface's sentence",
        hypothesis="ours, precise enough to fail", refuted_if="what would refute it",
        thresholds=(Threshold.beyond("loss drop", "arm", "loss", baseline="base",
                                     direction="<", margin=0.01),),
        axes=(axes.scale(("pico-20", "micro-20", "mini-20")),), bits_metric=("base", "loss"),
        QUICK=QUICK, FULL=FULL, run=run, tuning_seeds=(99,))

A new claim touches these files, and no others (counts and order elsewhere, the tour's and the
tests', are read from `CLAIMS`):

1. `experiments/claims/<id>.py` (its id with `_` for `-`): the module above.
2. `experiments/claims/__init__.py`: its name in the import list and its `CLAIM` in `CLAIMS`.
3. `tests/experiments/claims/test_<id>.py`: its measurement against an independent reference
   (numpy or scipy in float64), its theorem if it states one, its thresholds on synthetic runs.
4. `docs/architecture.rst` and README.md's prose: its id in the list of claims, the count.
5. After its full run (`python -m experiments claim my-claim --keep`, from a clean worktree at
   the commit that registered it): `results/<id>/` as the run wrote it, and the verdict tables
   that `python -m experiments.commands.table` prints from `results/` (never typed).

`python -m experiments claim my-claim --quick` runs it first, as a pipeline check. A claim
whose setup changes later gets `version=2` and a `revisions` line saying why, before its new
run.

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
from experiments.verdict.declare.claim import Claim


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

__all__ = ["CLAIMS", "not_built"]
