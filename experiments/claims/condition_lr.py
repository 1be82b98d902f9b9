"""Claim `condition-lr`: do condition-aware learning rates train faster, and for that reason?

    python -m experiments claim condition-lr [--quick]

**The preface's question**: are condition-aware learning rates that *adapt to local geometry*
better learning rates? Two pre-registered comparisons with practical margins: faster than
tuned AdamW (by at least 5% of the budget `N` in steps to AdamW's final loss), and adapting
matters (at least 0.01 nats, ≈ 0.5% of the loss, below the same rule frozen at its first
multipliers). Whether it is more than a plain rate cut is an extension. Refuted when either
interval lies above its margin line.

Arms, each AdamW (`b1 = 0.9, b2 = 0.95`, 10% warm-up, linear decay to 10%) with one change:
`adamw` (its final validation loss per seed is the target); `condition`
(`optim.scale_by_condition`, `α = 0.5, κ_ref = 10`, κ̂ of each hidden matrix refreshed every 10
updates, its update times `min(1, (κ_ref/κ̂)^α)`); `frozen` (multipliers frozen at the first
update: is *tracking* κ the cause?); `lr-cut` (one constant `c` on every hidden matrix: the
condition arm's mean exact multiplier over runs at its tuned rate on the tuning seeds: is a
smaller average rate the cause?). Steps to target: the first step at which an arm's validation
curve (`curve_points` evaluations) reaches AdamW's final loss (`steps_to_loss`, interpolated),
over `N`; `1.5` when never reached (censored: left out of trend fits).

Protocol. Every arm's peak rate is tuned the same way (`tuning.tune_on_seeds`) on the
quarter-decade grid `5.33e-3 … 5.33e-2` (5 rates) at the full budget, final loss averaged over
tuning seeds 100, 101 (never reported); a best rate at an edge extends the grid one step, at
most twice. Seeds 0–4 then run at the tuned rates. Controls of the primary: the rule acts (mean
multiplier < 1 in every run); AdamW's runs end finite and below `ln V`; no tuned rate of adamw,
condition, frozen at an edge of its grid. The extension's control: lr-cut's inside its grid.

Registered on `micro-20`'s shape (d 32, L 2, H 4; 41,856 params) from scratch at 20 tokens per
parameter: `N = 409` steps of 16 × 128 stdlib tokens; bits per byte from AdamW's held-out loss.
Scale: `pico-20` the same way (`steps=None`); `mini-20` left out by cost, so no trend is
measured. `estimate_condition` calls LAPACK one matrix at a time on CPU (batched QRs deadlocked
XLA:CPU's pool); the run records each arm's wall time. `--quick`: one seed, 24 steps, one rate.

v2 (2026-12-05, before the run): the trained regime (issue 38; v1: `small`, 120 steps of 8 × 64,
0.07 tokens per parameter, rates tuned on one seed with no edge rule, three arms at the grid's
top); two tuning seeds, the edge rule and edge controls; curves of 20 points (v1: 10); no budget
axis (v1's showed the speed-up reversing by 23.5 tokens per parameter; 20 is the regime).
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

import transformer
from experiments import models
from experiments.lab import optimizers as O
from experiments.lab import tuning
from experiments.train.sweep import train_many
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes

TUNING_SEEDS = (100, 101)
# Quarter-decade steps from 5.33e-3 to 5.33e-2: AdamW's tuned 9.49e-3 on this shape (`muon` v2)
# sits inside, and the rule's multipliers (≈ 0.4) leave room above it for the other arms.
GRID = tuple(float(f"{x:.3g}") for x in np.geomspace(3e-3, 3e-1, 9)[1:6])
NOT_REACHED = 1.5
ALPHA, KAPPA_REF = 0.5, 10.0
PRIMARY_ARMS = ("adamw", "condition", "frozen")


@dataclasses.dataclass(frozen=True)
class ConditionLrSizes(TrainedSizes):
  """What a run of `condition-lr` reads about its size.

  Attributes:
    model: the shared model whose shape is trained from scratch (`experiments.models.RECIPES`).
    steps: the budget `N` of every run; None: the steps that train `model` on
      `models.TOKENS_PER_PARAM` tokens per parameter (`budget_steps`).
    batch_size: training windows per step.
    seq_len: training and validation window length.
    grid: the peak rates each arm is tuned on (without tuning, every arm runs at the first).
    curve_points: validation losses per reported curve (every `⌈N / curve_points⌉` steps).
    eval_batches: validation batches per evaluation.
    tune: tune every arm's rate on `grid` with `TUNING_SEEDS`; otherwise the lr-cut factor is
      the mean multiplier at initialisation.
    extend: rates that tuning may add beyond an edge of `grid` that wins.
  """

  model: str
  steps: int | None
  batch_size: int
  seq_len: int
  grid: tuple[float, ...]
  curve_points: int
  eval_batches: int
  tune: bool
  extend: int


QUICK = ConditionLrSizes(model="quick", steps=24, batch_size=4, seq_len=32, grid=(3e-3,),
                         curve_points=4, eval_batches=2, tune=False, extend=0)
FULL = ConditionLrSizes(model="micro-20", steps=None, batch_size=16, seq_len=128, grid=GRID,
                        curve_points=20, eval_batches=4, tune=True, extend=2)


def mean_multipliers(params_by_rate_seed) -> np.ndarray:
  """`(n_lr, n_seeds)` mean exact condition multiplier of the hidden matrices of each run."""
  leaves = jax.tree.leaves(params_by_rate_seed)
  n_lr, n_seeds = leaves[0].shape[:2]
  def one(r, s):
    run = jax.tree.map(lambda x: x[r, s], params_by_rate_seed)
    return O.hidden_condition_multipliers(run, ALPHA, KAPPA_REF).mean()

  return np.array([[one(r, s) for s in range(n_seeds)] for r in range(n_lr)])


def _recorder():
  seen: list = []

  def callback(step, params, _):
    seen.append(mean_multipliers(params))

  return seen, callback


def run(spec: Spec) -> dict:
  """Tunes every arm, fixes the lr-cut factor, runs the seeds; see the module docstring."""
  z = dataclasses.replace(spec.sizes, steps=spec.sizes.budget_steps())
  cfg = models.RECIPES[z.model].cfg
  N, seeds = z.steps, tuple(spec.seeds)
  every = math.ceil(N / z.curve_points)
  kw = {"data": "stdlib", "batch_size": z.batch_size, "seq_len": z.seq_len,
        "eval_batches": z.eval_batches}
  arms = {"adamw": O.adamw_arm(),
          "condition": O.condition_arm(alpha=ALPHA, kappa_ref=KAPPA_REF, every=10),
          "frozen": O.frozen_condition_arm(alpha=ALPHA, kappa_ref=KAPPA_REF)}
  tuned = {}

  def tune(name):
    if not z.tune:
      return tuning.untuned(z.grid[0])
    spec.log(f"  condition-lr: tuning {name} on {len(z.grid)} rates (seeds {TUNING_SEEDS}, "
             f"{N} steps)")
    return tuning.tune_on_seeds(cfg, arms[name], z.grid, seeds=TUNING_SEEDS, steps=N,
                                extend=z.extend, **kw)

  for name in PRIMARY_ARMS:
    tuned[name] = tune(name)
  if z.tune:
    seen, record = _recorder()
    train_many(cfg, tuning.on_budget(arms["condition"], N), seeds=TUNING_SEEDS,
               learning_rates=(tuned["condition"]["learning_rate"],), steps=N,
               eval_every=every, callback=record, **kw)
    factor = float(np.mean([m[0] for m in seen]))
    factor_from = (f"condition arm's mean exact multiplier over runs at its tuned rate (seeds "
                   f"{list(TUNING_SEEDS)}, every {every} steps)")
  else:
    init = transformer.init(cfg, jax.random.key(TUNING_SEEDS[0]))
    factor = float(O.hidden_condition_multipliers(init, ALPHA, KAPPA_REF).mean())
    factor_from = f"mean multiplier at initialisation (seed {TUNING_SEEDS[0]})"
  spec.log(f"  condition-lr: lr-cut factor {factor:.4f} ({factor_from})")
  arms["lr-cut"] = O.lr_cut_arm(factor=factor)
  tuned["lr-cut"] = tune("lr-cut")
  curves, mults, wall = {}, {}, {}
  for name, make_tx in arms.items():
    spec.log(f"  condition-lr: {name} at {tuned[name]['learning_rate']:g} on seeds {seeds}")
    seen, record = _recorder()
    start = time.perf_counter()
    r = train_many(cfg, tuning.on_budget(make_tx, N), seeds=seeds,
                   learning_rates=(tuned[name]["learning_rate"],), steps=N,
                   eval_every=every, callback=record, **kw)
    wall[name] = time.perf_counter() - start
    curves[name] = (r.steps, r.val_loss[0])
    mults[name] = np.mean([m[0] for m in seen], axis=0)  # (n_seeds,)
  at_edge = {a: float(t["at_edge"]) for a, t in tuned.items()}
  ended = {a: tuning.ended_diverged(curves[a][1][:, -1], cfg.vocab_size) for a in arms}
  runs: dict = {name: {} for name in arms}
  for i, seed in enumerate(seeds):
    target = float(curves["adamw"][1][i, -1])
    for name in arms:
      steps, val = curves[name]
      reached = tuning.steps_to_loss(steps, val[i], target)
      runs[name][seed] = {"val_loss": float(val[i, -1]), "ended_diverged": float(ended[name][i]),
                          "steps_frac": reached / N if reached is not None else NOT_REACHED,
                          "mean_multiplier": float(mults[name][i]),
                          "learning_rate": tuned[name]["learning_rate"],
                          "rates_at_grid_edge": sum(at_edge[a] for a in PRIMARY_ARMS),
                          "rate_at_grid_edge": at_edge[name]}
  mean = {a: {m: np.mean([runs[a][s][m] for s in seeds]) for m in ("val_loss", "steps_frac")}
          for a in arms}
  notes = [
      {"tuned": tuned, "read": f"lowest final val loss after {N} steps, mean over seeds "
                               f"{list(TUNING_SEEDS)}",
       "fixed": f"not tuned (the first of the grid {list(z.grid)})"},
      f"lr-cut factor c = {factor:.4f}: the {factor_from}; fixed before the reported runs.",
      "Mean final val loss: " + ", ".join(f"{a} {mean[a]['val_loss']:.4f}" for a in arms)
      + f"; steps to AdamW's final loss (fraction of N = {N}, curves every {every} steps): "
      + ", ".join(f"{a} {mean[a]['steps_frac']:.3f}" for a in arms) + ".",
      "Mean condition multiplier of the hidden weights over training (exact SVD; what the "
      "rule would apply): " + ", ".join(
          f"{a} {np.mean([runs[a][s]['mean_multiplier'] for s in seeds]):.3f}" for a in arms)
      + ".",
      f"Wall time of the {len(seeds)}-seed reported runs (one vmapped program each, compile "
      "and evaluations included, the machine shared): "
      + ", ".join(f"{a} {w:.0f} s" for a, w in wall.items()) + "; the condition and frozen "
      "arms refresh κ̂ by one QR per matrix (LAPACK one matrix at a time on CPU, paid at every "
      "step under vmap, where the refresh's branch is a select).",
      f"Model: `{z.model}` shape from scratch, batches {z.batch_size} × {z.seq_len} tokens, "
      f"N = {N} steps ({z.train_tokens() / models.param_count(z.model):.3g} tokens per "
      "parameter), 10% warm-up then linear decay to 10% of the peak.",
  ]
  return {"setup": {"alpha": ALPHA, "kappa_ref": KAPPA_REF, "lr_cut_factor": factor,
                    "lr_cut_factor_from": factor_from, "tuning_seeds": list(TUNING_SEEDS),
                    "eval_every": every, "reported_wall_s": wall, "tuned": tuned,
                    "model_config": cfg.to_dict()},
          "runs": runs, "notes": notes,
          "effects": [("final val loss: condition − AdamW", "condition", "adamw", "val_loss"),
                      ("steps fraction: frozen − AdamW", "frozen", "adamw", "steps_frac"),
                      ("steps fraction: lr-cut − AdamW", "lr-cut", "adamw", "steps_frac")]}


CLAIM = Claim(
    id="condition-lr",
    topic="condition number",
    kind="new",
    preface="Condition-aware learning rates that adapt to local geometry",
    hypothesis=("AdamW whose hidden-matrix updates are scaled by min(1, (κ_ref/κ̂)^α) "
                "(`optim.scale_by_condition`, κ̂ tracked during training), every arm's rate "
                "tuned the same way on the tuning seeds, is a better learning rate at 20 tokens "
                "per parameter: it reaches tuned AdamW's final validation loss in at least 5% "
                "fewer steps, and adapting matters: it ends at least 0.01 nats (≈ 0.5% of the "
                "loss) below the same rule with its multipliers frozen at their first values."),
    refuted_if=("The 95% interval of the steps-fraction difference lies above −0.05 (not 5% "
                "faster, or slower), or that of the loss difference to the frozen multipliers "
                "lies above −0.01 nats (adapting buys less than the margin), with every control "
                "holding."),
    thresholds=(
        Threshold.beyond("steps to AdamW's final loss: condition − AdamW", arm="condition",
                         metric="steps_frac", baseline="adamw", direction="<", margin=0.05,
                         unit="fraction of the budget N",
                         censored=f">= {NOT_REACHED}"),  # never reached: no number to fit
        Threshold.beyond("final val loss: condition − frozen multipliers", arm="condition",
                         metric="val_loss", baseline="frozen", direction="<", margin=0.01,
                         unit="nats"),
        Threshold("the rule acts (condition arm's mean multiplier < 1)", arm="condition",
                  metric="mean_multiplier", stat="range", supports="< 1", control=True),
        Threshold("AdamW's reported runs end finite and below ln V (the target exists)",
                  arm="adamw", metric="ended_diverged", stat="range", supports="== 0",
                  control=True, unit="1 = ended diverged"),
        Threshold("no tuned rate of adamw, condition, frozen sits at an edge of its grid",
                  arm="condition", metric="rates_at_grid_edge", stat="range", supports="== 0",
                  control=True, unit="arms"),
    ),
    extensions=(
        Extension("more than a rate cut",
                  "Does the rule end at least 0.01 nats below a plain rate cut of the same "
                  "average size on the same matrices?",
                  (Threshold.beyond("final val loss: condition − lr cut of the same average "
                                    "size", arm="condition", metric="val_loss",
                                    baseline="lr-cut", direction="<", margin=0.01,
                                    unit="nats"),
                   Threshold("lr-cut's tuned rate sits inside its grid", arm="lr-cut",
                             metric="rate_at_grid_edge", stat="range", supports="== 0",
                             control=True, unit="1 = at an edge"))),
    ),
    tuning_seeds=TUNING_SEEDS,
    anchors=(
        Anchor("per-matrix update scaling (update-RMS matching) that makes Muon's rates "
               "transfer", "≈ 2× compute efficiency with it",
               "Liu et al. 2025, Muon is Scalable for LLM Training (Moonlight)"),
        Anchor("iterations saved by a geometry-aware preconditioner over AdamW", "> 40% fewer",
               "Vyas et al. 2024, SOAP: Improving and Stabilizing Shampoo using Adam"),
    ),
    axes=(axes.scale(("pico-20", "micro-20")),),
    bits_metric=("adamw", "val_loss"),
    version=2,
    revisions=("v2: the trained regime (issue 38): micro-20's shape from scratch at 20 tokens "
               "per parameter (v1: small, 0.07), scale over pico-20 and micro-20 (mini-20 left "
               "out by cost: the trend is not measured), rates tuned on seeds 100, 101 on a "
               "5-rate quarter-decade grid with the edge rule (at most twice) and edge controls "
               "(v1: one seed, no edge rule, three arms at the grid's top), AdamW's end as a "
               "control, curves of 20 points, no budget axis (20 tokens per parameter is the "
               "regime; v1's showed the speed-up reversing by 23.5); arms, metrics and margins "
               "unchanged",),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
