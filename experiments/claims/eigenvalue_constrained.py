"""Claim `eigenvalue-constrained`: does capping spectral norms make training stable?

    python -m experiments claim eigenvalue-constrained [--quick]

**The preface's question**, clause by clause. "Eigenvalue-constrained training to guarantee
stable gradient flow." With `σ_max ≤ 1` enforced on every hidden matrix after each step
(`cap-hidden`: AdamW, then `optim.spectral_cap(1.0)` by exact SVD on `w_q, w_k, w_v, w_o, w_1,
w_2`), no layer can amplify the signal or the gradient through it; stable gradient flow is read
through its outcome, whether training survives a rate that breaks plain `adamw`. ①
*Eigenvalue-constrained training*: the constrained model trains, its final loss at its tuned
rate at most 1% above AdamW's at AdamW's (whole 95% interval). ② *to guarantee stable gradient
flow*: at the stress rate `cap-hidden` ends diverged in no seed, and ends ≥ 0.25 nats (≈ 10% of
a trained loss) below `adamw` there (ended diverged counts as `ln V`). Refuted if the cost
exceeds 1%, or it ends diverged in every seed at the stress rate, or the gap lies inside 0.25
nats. The certified logit bound holds by construction (the `theorem`): a control of the
instrument. Extension *a stable range*: at the stress rate within 5% of its tuned loss.

**Protocol.** AdamW (`b = (0.9, 0.95)`, decay 0.1, cosine to 10%, **no warm-up, no clipping**:
clipping hides divergence), every model from scratch at 20 tokens per parameter (steps of
16 × 128 stdlib tokens). On tuning seeds 110 and 111, each arm runs every rate of `GRID` (7
rates, half-decades `10^-2.5 … 10^0.5`); its tuned rate has the lowest mean final `val` loss
among rates no tuning seed ended diverged at (non-finite, or above `ln V`); one at an edge
extends the grid a step beyond it, once (`edge.tune`), and one still at an edge fails that
arm's control. The stress rate is the smallest rate run at which `adamw` ended diverged on a
tuning seed; if none did, the largest rate run. Seeds 10–14 run each arm at its tuned and at
the stress rate, read on the `test` split; no rate is chosen on them. Controls: no tuned rate
at an edge; `σ_max ≤ 1.001` of the capped matrices at the end (the cap acts); the largest
attention logit `max |q·k|/√Dh`, read every `eval_every` steps, never above its certified
bound `analysis.logit_bound` (float32 tolerance 1e-4), in every run of both arms.

Registered on `pico-20` (D 16, L 2, H 4; 14,784 parameters, 145 steps); the scale axis runs
the same protocol and ratio on `micro-20` (41,856, 409 steps) and `mini-20` (1,298 steps), so
the trend spans ≥ 8× in parameters. `--quick`: `pico-20`, two fixed rates, one seed.
History: v1 `nano`, each seed's best rate; v2 the trained regime, tuned on seed 100 alone
(inconclusive: gap 0.338, 95% CI [0.218, 0.458]). v3, registered before any run of it:
clauses, two tuning seeds, mini-20, fresh seeds, the test split (`revisions`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from experiments import models
from experiments.lab import cap_training as ct
from experiments.lab import edge
from experiments.lab.norm_training import stress_rate
from experiments.verdict import (
  Anchor,
  Claim,
  Extension,
  Revision,
  Spec,
  Threshold,
  TrainedSizes,
  axes,
)
from experiments.verdict.declare.clause import Clause
from experiments.verdict.render.cells import spread
from experiments.verdict.render.figures import median_band
from experiments.verdict.render.tuning import stress_note

CAP = 1.0
ARMS: dict[str, tuple[str, ...] | None] = {"adamw": None, "cap-hidden": ct.HIDDEN}
SEEDS = (10, 11, 12, 13, 14)
TUNING_SEEDS = (110, 111)
GRID = tuple(float(f"{x:.3g}") for x in np.geomspace(10 ** -2.5, 10 ** 0.5, 7))
STABLE_MARGIN = 0.25  # nats: ≈ 10% of a trained loss
COST = 0.01  # the largest relative loss cost of the cap at the tuned rates
WITHIN = 0.05  # the stress rate is "in the stable range" within 5% of the tuned loss
CERT_RTOL = 1e-4  # float32 rounding allowed when comparing measured logits with the bound
SIGMA_TOL = 1e-3  # float32 SVD rounding allowed on σ_max ≤ CAP


@dataclasses.dataclass(frozen=True)
class EigenvalueConstrainedSizes(TrainedSizes):
  """What a run of `eigenvalue-constrained` reads about its size.

  Attributes:
    model: the shape every arm is trained at from scratch (`experiments.models.config`): the
      registered `pico-20`, or a size of the scale axis.
    grid: the peak rates each arm is tuned on (`TUNING_SEEDS`). Without tuning, every
      arm runs at `grid[0]` and the stress rate is `grid[-1]`.
    tune: tune on the tuning seed (FULL); otherwise the fixed rates above (QUICK).
    steps: optimizer steps per run; None trains `model` at 20 tokens per parameter
      (`budget_steps`), so each size of the scale axis sees the same ratio.
    seq_len: training and validation window length (at most the model's `max_len`).
    batch_size: training windows per step.
    evals: certificate readings and validation losses per run, at most: every
      `eval_every = ⌈steps / evals⌉` steps and at the last step.
    eval_batches: validation batches per evaluation.
    extend: how many times a tuned rate at an edge of `grid` extends it a step beyond it.
    split: the split the reported runs' losses and certificate read: `test` (v3); `val` (v2,
      before `test` was cut from the held-out files).
  """

  model: str
  grid: tuple[float, ...]
  tune: bool
  steps: int | None
  seq_len: int
  batch_size: int
  evals: int
  eval_batches: int
  extend: int = 0
  split: str = "val"

  def __post_init__(self):
    cfg = models.config(self.model)
    if self.seq_len > cfg.max_len:
      raise ValueError(f"EigenvalueConstrainedSizes.seq_len={self.seq_len} exceeds the "
                       f"`{self.model}` shape's max_len={cfg.max_len}. Fix: seq_len <= "
                       f"{cfg.max_len}, or a model with more positions.")
    if len(self.grid) < 2 or self.evals < 1:
      raise ValueError(f"EigenvalueConstrainedSizes: grid={self.grid} needs two rates or more "
                       f"and evals={self.evals} must be positive. Fix: e.g. GRID and 8.")

  @property
  def eval_every(self) -> int:
    """Steps between readings (`evals` of them at most; the last at the last step).

    Example:
      >>> from experiments.claims.eigenvalue_constrained import FULL
      >>> FULL.budget_steps(), FULL.eval_every  # pico-20 at 20 tokens per parameter
      (145, 19)
    """
    return math.ceil(self.budget_steps() / self.evals)

  def to_dict(self) -> dict:
    """The fields, and the steps and reading interval they give (what the run trained)."""
    return {**super().to_dict(), "budget_steps": self.budget_steps(),
            "eval_every": self.eval_every}


QUICK = EigenvalueConstrainedSizes(model="pico-20", grid=(3e-3, 1.0), tune=False, steps=15,
                                   seq_len=128, batch_size=16, evals=3, eval_batches=2,
                                   split="test")
FULL = EigenvalueConstrainedSizes(model="pico-20", grid=GRID, tune=True, steps=None,
                                  seq_len=128, batch_size=16, evals=8, eval_batches=4,
                                  extend=1, split="test")


def run(spec: Spec) -> dict:
  """Tunes each arm, picks the stress rate, trains the seeds there; see the docstring."""
  z = spec.sizes
  cfg = models.config(z.model)
  V, steps = cfg.vocab_size, z.budget_steps()
  kw = {"steps": steps, "batch_size": z.batch_size, "seq_len": z.seq_len,
        "eval_batches": z.eval_batches}
  make = {arm: ct.make_tx_factory(steps, names, CAP) for arm, names in ARMS.items()}
  if z.tune:
    tuned = {}
    for arm in ARMS:
      spec.log(f"  eigenvalue-constrained: tuning {arm} on {list(z.grid)} (seeds "
               f"{list(TUNING_SEEDS)}, {steps} steps)")
      tuned[arm] = ct.tune_arm(cfg, make[arm], z.grid, seeds=TUNING_SEEDS, extend=z.extend,
                               **kw)
    stress, found = stress_rate(tuned["adamw"]["grid"], tuned["adamw"]["excluded"])
  else:
    tuned = {arm: edge.untuned(z.grid[0]).to_dict() for arm in ARMS}
    stress, found = z.grid[-1], False
  tracks, runs = {}, {}
  for arm in ARMS:
    rates = sorted({tuned[arm]["learning_rate"], stress})
    spec.log(f"  eigenvalue-constrained: {arm} at {tuned[arm]['learning_rate']:g} (tuned) and "
             f"{stress:g} (stress) on seeds {list(spec.seeds)}")
    tracks[arm] = ct.track(cfg, make[arm], spec.seeds, rates, eval_every=z.eval_every,
                           eval_split=z.split, **kw)
    index = {"tuned": rates.index(tuned[arm]["learning_rate"]), "stress": rates.index(stress)}
    tracks[arm]["index"] = index
    runs[arm] = {seed: {**ct.seed_metrics(tracks[arm], index, j, V),
                        "learning_rate": tuned[arm]["learning_rate"], "stress_rate": stress,
                        "edge_lr": float(tuned[arm]["at_edge"])}
                 for j, seed in enumerate(spec.seeds)}
  for seed in spec.seeds:
    a, c = runs["adamw"][seed], runs["cap-hidden"][seed]
    cert = np.nanmax([m[f"cert_ratio_{t}"] for m in (a, c) for t in ("tuned", "stress")])
    for m in (a, c):
      m["tuned_loss_rel_cost"] = (m["end_loss_tuned"] - a["end_loss_tuned"]) / a["end_loss_tuned"]
      m["stress_loss_rel_tuned"] = (m["end_loss_stress"] - m["end_loss_tuned"]) / m[
          "end_loss_tuned"]
      m["cert_ratio_all_runs"] = float(cert)
  return {"split": z.split,
          "setup": {"model_config": cfg.to_dict(), "arms": {a: list(n) if n else None
                                                            for a, n in ARMS.items()},
                    "cap": CAP, "tuning_seeds": list(TUNING_SEEDS), "tuned": tuned,
                    "stress_rate": stress,
                    "stress_rate_from_divergence": found},
          "runs": runs, "figures": [_figure(tracks, tuned, stress, V)],
          "notes": _notes(runs, tuned, stress, found, spec.seeds, z, cfg),
          "effects": [("end loss at the stress rate: adamw − cap-hidden", "adamw", "cap-hidden",
                       "end_loss_stress")]}


def _notes(runs, tuned, stress, found, seeds, z, cfg) -> list:
  values = lambda arm, key: [runs[arm][s][key] for s in seeds]
  span = lambda arm, key: spread(values(arm, key))
  total = lambda arm, key: int(np.nansum(values(arm, key)))
  return [
      {"tuned": tuned, "per_rate": True,
       "read": f"lowest final val loss after {z.budget_steps()} steps, mean over tuning seeds "
               f"{list(TUNING_SEEDS)}, among rates no tuning seed ended diverged at; grid "
               f"{list(z.grid)}, extended a step beyond an edge that won, at most {z.extend}×"},
      stress_note(stress, found, arm="adamw", tuned=z.tune),
      f"End loss (nats; ended diverged = ln V = {math.log(cfg.vocab_size):.3f}), mean [min, "
      "max] over seeds: at the tuned rates " + "; ".join(
          f"{a} {span(a, 'end_loss_tuned')}" for a in ARMS) + "; at the stress rate " + "; ".join(
          f"{a} {span(a, 'end_loss_stress')}" for a in ARMS) + ".",
      f"Runs that ended diverged (of {len(seeds)} seeds), tuned / stress: " + ", ".join(
          f"{a} {total(a, 'diverged_tuned')} / {total(a, 'diverged_stress')}" for a in ARMS)
      + "; flagged by a spike but recovered: " + ", ".join(
          f"{a} {total(a, 'spiked_tuned')} / {total(a, 'spiked_stress')}" for a in ARMS) + ".",
      "Largest σ_max of the hidden matrices at the end, mean [min, max], tuned / stress: "
      + "; ".join(f"{a} {span(a, 'sigma_max_tuned')} / {span(a, 'sigma_max_stress')}"
                  for a in ARMS) + f" (cap {CAP:g}; inf: non-finite weights).",
      "Logit certificate, largest measured / certified logit over evaluations, layers and "
      "heads (finite runs), tuned / stress: " + "; ".join(
          f"{a} {span(a, 'cert_ratio_tuned')} / {span(a, 'cert_ratio_stress')}" for a in ARMS)
      + ".",
      f"Model: the `{z.model}` shape from scratch, D = {cfg.d_model}, L = {cfg.n_layers}, "
      f"H = {cfg.n_heads}, T = {z.seq_len}, B = {z.batch_size}, {z.budget_steps()} steps: "
      f"{z.train_tokens():,} tokens, {z.train_tokens() / models.param_count(z.model):.1f} per "
      f"parameter; cap σ_max ≤ {CAP:g} by exact SVD after each step.",
  ]


def _figure(tracks: dict, tuned: dict, stress: float, vocab_size: int) -> dict:
  """`rates.png`, declared as data: the tuning-seed loss against the rate, and the validation
  loss over training at the stress and the tuned rates (median over seeds, band min–max), one
  colour per arm."""
  colors = {"adamw": "C3", "cap-hidden": "C0"}
  ln_v = math.log(vocab_size)
  lines = []
  for arm, t in tuned.items():
    if t["losses"]:
      bad = t["excluded"]
      lines += [{"x": t["grid"], "y": [ln_v if b else v for v, b in zip(t["losses"], bad,
                                                                         strict=True)],
                 "style": "o-", "color": colors[arm], "label": arm},
                {"x": [g for g, b in zip(t["grid"], bad, strict=True) if b],
                 "y": [ln_v] * sum(bad), "style": "x", "color": colors[arm], "ms": 10}]
  rates = {"lines": lines, "xscale": "log", "xlabel": "peak learning rate (log scale)",
           "vlines": [{"x": stress, "color": "k", "style": "--", "lw": 1,
                       "label": f"stress rate {stress:g}"}],
           "ylabel": "final validation loss (nats; ended diverged = ln V, x)",
           "title": f"tuning seeds {', '.join(map(str, TUNING_SEEDS))}: mean loss vs rate",
           "legend": 8,
           **({} if lines else {"note": "not tuned (quick)"})}
  panels = [rates]
  for tag, what in (("stress", "at the stress rate"), ("tuned", "at each arm's tuned rate")):
    rate = lambda arm, tag=tag: stress if tag == "stress" else tuned[arm]["learning_rate"]
    drawn = [median_band(tr["steps_E"], tr["val_RSE"][tr["index"][tag]], color=colors[arm],
                         label=f"{arm} (η = {rate(arm):g})") for arm, tr in tracks.items()]
    panels.append({"lines": [line for line, _ in drawn], "bands": [band for _, band in drawn],
                   "hlines": [{"y": ln_v, "color": "k", "style": ":", "lw": 1.5,
                               "label": f"ln V = {ln_v:.2f} (initial loss)"}],
                   "ylim": [0, 1.5 * ln_v], "xlabel": "training step",
                   "ylabel": "validation loss (nats)", "legend": 8,
                   "title": f"validation loss {what}\n(median over seeds, band min–max; axis cut)"})
  return {"name": "rates.png", "size": [15, 4.6], "panels": panels}


def _edge_control(arm: str) -> Threshold:
  """The control of an arm's tuned rate: it must not sit at an edge of its (extended) grid."""
  return Threshold(f"{arm}'s tuned rate inside the grid", arm=arm, metric="edge_lr",
                   stat="range", supports="== 0", control=True)


CAP_ACTS = "cap-hidden: σ_max of the capped matrices at the end"
CERT = "max measured logit / certified bound, both arms, both rates"
NO_DIVERGENCE = "cap-hidden: ended diverged at the stress rate"
GAP = "end loss at the stress rate: adamw − cap-hidden"
TRAINS = "cap-hidden: tuned final loss, relative cost vs AdamW"
CLAIM = Claim(
    id="eigenvalue-constrained",
    topic="eigenvalues",
    kind="new",
    preface="Eigenvalue-constrained training to guarantee stable gradient flow",
    hypothesis=(
        "Trained from scratch at 20 tokens per parameter at the registered size (pico-20), "
        "capping σ_max ≤ 1 of every hidden matrix after each AdamW step (no clipping, no "
        f"warm-up): ① at each arm's tuned rate its final loss is at most {COST:.0%} above "
        "AdamW's; ② at the stress rate (the smallest rate at which AdamW alone ended diverged "
        "on a tuning seed) the capped model ends diverged in no seed and ends at least "
        f"{STABLE_MARGIN} nats below AdamW (ended diverged counts as ln V); test split."),
    refuted_if=(
        f"① the capped model's tuned loss is more than {COST:.0%} above AdamW's; ② it ends "
        "diverged at the stress rate in every seed, or AdamW's end loss there lies within "
        f"{STABLE_MARGIN} nats of the capped model's, or below it (whole 95% interval)."),
    theorem=("The certificate cannot fail: for rows of norm ≤ r entering the projections, "
             "|q_i·k_j| ≤ r² σ_max(W_Q W_Kᵀ) (plus bias terms) by Cauchy–Schwarz, so "
             "analysis.logit_bound holds for any weights, capped or not; it is a control of the "
             "instrument. tests/experiments/claims/test_theorems.py checks the inequality on "
             "random instances in float64."),
    thresholds=(
        Threshold(NO_DIVERGENCE, arm="cap-hidden", metric="diverged_stress", stat="range",
                  supports="== 0", refutes=">= 1",
                  unit="1 = ended diverged", needs=(CAP_ACTS, CERT)),
        Threshold.beyond(GAP, arm="adamw",
                         metric="end_loss_stress", baseline="cap-hidden", margin=STABLE_MARGIN,
                         unit="nats", needs=(CAP_ACTS, CERT)),
        Threshold(TRAINS, arm="cap-hidden",
                  metric="tuned_loss_rel_cost", supports=f"<= {COST}", refutes=f"> {COST}",
                  unit="fraction of the loss"),
        Threshold(CAP_ACTS, arm="cap-hidden", metric="sigma_max_tuned", stat="range",
                  supports=f"<= {CAP + SIGMA_TOL}", control=True),
        Threshold(CERT, arm="cap-hidden", metric="cert_ratio_all_runs", stat="range",
                  supports=f"<= {1 + CERT_RTOL}", control=True),
        _edge_control("adamw"),
        _edge_control("cap-hidden"),
    ),
    clauses=(Clause("Eigenvalue-constrained training", (TRAINS,)),
             Clause("to guarantee stable gradient flow", (NO_DIVERGENCE, GAP))),
    extensions=(
        Extension("a stable range",
                  "Does the stress rate lie in the capped model's stable range: its end loss "
                  f"there within {WITHIN:.0%} of its loss at its own tuned rate?",
                  (Threshold("cap-hidden: stress-rate loss relative to its tuned loss",
                             arm="cap-hidden", metric="stress_loss_rel_tuned",
                             supports=f"<= {WITHIN}", refutes=f"> {WITHIN}",
                             unit="fraction of the loss", needs=(CAP_ACTS, CERT)),)),
    ),
    seeds=SEEDS,
    tuning_seeds=TUNING_SEEDS,
    axes=(axes.scale(("pico-20", "micro-20", "mini-20")),),
    bits_metric=("adamw", "end_loss_tuned"),
    key=GAP,  # the gap, not the 0/1 count
    version=3,
    revisions=("v2: the trained regime of issue 38: every arm from scratch at 20 tokens per "
               "parameter, registered on pico-20 (v1: nano, 200 steps of 16 × 64, ≈ 1.5 per "
               "parameter), scale over pico-20 and micro-20; rates tuned on seed 100 under the "
               "edge rule instead of each reported seed's best of the grid, and the seeds run at "
               "the tuned and the stress rate only (v1's primary was n/a: AdamW never ended "
               "diverged on its grid, so v2 reads a stress-rate loss gap with a 0.25-nat margin); "
               "the 'wider range' extension becomes 'a stable range'",
               Revision(3, "protocol",
                        "Confirmatory (issue 47 items 2, 3, 5, issue 50 item 4), registered "
                        "before any run of v3: the sentence in two clauses, ① 'Eigenvalue-"
                        "constrained training' (the tuned-rate cost) and ② 'to guarantee stable "
                        "gradient flow' (no divergence and the loss gap at the stress rate), "
                        "thresholds unchanged; rates tuned on two tuning seeds, 110 and 111, by "
                        "the mean final loss (v2: seed 100 alone), the stress rate the smallest "
                        "at which adamw ended diverged on either; mini-20 joins the scale axis "
                        "(pico-20, micro-20, mini-20: 8x in parameters); fresh seeds 10-14 (v1, "
                        "v2: 0-4); reported runs read on the test split (v2: val). Model, "
                        "budget, grid, edge rule, cap and margins unchanged.")),
    anchors=(
        Anchor("spectral reparametrisation of all linear layers", "trains without warm-up or "
               "LayerNorm; entropy collapse avoided", "Zhai et al. 2023, Stabilizing "
               "Transformer Training by Preventing Attention Entropy Collapse (σReparam)"),
        Anchor("Lipschitz-constrained transformer weights", "stable training with spectral caps,"
               " max attention logit bounded", "Newhouse et al. 2025, Training Transformers "
               "with Enforced Lipschitz Constants"),
        Anchor("QK-Clip: rescale W_Q, W_K when the max logit exceeds a threshold", "no loss "
               "spikes over 15.5T tokens", "Kimi Team 2025, Kimi K2 (MuonClip)"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
