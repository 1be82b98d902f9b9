"""Claim `muon`: does Muon reach tuned AdamW's final loss in at most 0.6× the steps?

    python -m experiments claim muon [--quick]

Full run (3 seeds): the `small` shared model shape (d 128, L 4, H 4, pre-LN, learned
positions) trained from scratch on the stdlib corpus with batches of 8 windows of **64**
tokens (not 128: the context is halved so that the whole claim fits the 2-core budget),
budget `N = 120` steps: 10 tuning runs and 3 × (4 + 1) reported runs. Measured: 95 s on 2
idle CPU cores (1667 s at load average 14–20, with about ten claims running at once).
`--quick` (the `tiny` shape, one seed, a 24-step budget, one rate): 62 s on a loaded machine.

Expected result (full runs, 2026-11-30): supported. Tuned rates AdamW 1e-3, Muon 1e-2;
Muon's shortest budget (0.4 N = 48 steps) already beats AdamW's 120-step loss on every seed,
so the ratio sits at the grid's floor 0.4 (the true ratio is at most that); Muon's last
updates have singular-value entropy ≈ 0.96 and κ_p90 ≈ 6, AdamW's ≈ 0.30 and ≈ 4e3.

Protocol (modded-nanogpt's optimizer track): each optimizer's peak rate is tuned on the
same grid `{3e-4, 1e-3, 3e-3, 1e-2, 3e-2}` at the full budget on the spare seed 100 (never a
reported seed).
Both optimizers share the grid because `muon_arm` scales Muon's updates to AdamW's RMS
(`shape_scaling="rms"`, Moonlight's matching) and runs its non-hidden leaves on AdamW at the
same rate. AdamW at its tuned rate sets the target, its final validation loss after `N`
steps (per seed). Muon is run at its tuned rate in **separate runs** with the budgets
`{0.4, 0.6, 0.8, 1.0}·N` — the schedule (`budget_schedule`: 10% warm-up, linear decay to 10%
of the peak) depends on the budget — and its steps-to-target is the smallest budget whose
final validation loss reaches the target (`steps_to_loss`, interpolated between budgets).
The key number is that over `N` (AdamW's steps). When even Muon's full budget does not
reach the target, the ratio is recorded as `1.5` (worse than AdamW; the grid cannot say by
how much).

Logged: the condition number (`σ_1/σ_⌈0.9r⌉`, and the median of the full `σ_max/σ_min`,
often inf because LayerNorm-centred inputs give gradients an exact null direction) and the
singular-value entropy of each optimizer's last update of the hidden matrices. Muon's should
have entropy near 1; that Muon's updates are measurably closer to orthogonal than AdamW's is
the control (the instrument sees what Muon does).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments import models
from experiments.claims.claim import Anchor, Claim, Sizes, Spec, Threshold
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates
from experiments.train.sweep import train_many

GRID = tuning.RATE_GRID
TUNE_SEED = 100
FRACTIONS = (0.4, 0.6, 0.8, 1.0)
NOT_REACHED = 1.5


@dataclasses.dataclass(frozen=True)
class MuonSizes(Sizes):
  """What a run of `muon` reads about its size.

  Attributes:
    model: the `experiments.models.RECIPES` shape trained from scratch.
    steps: AdamW's budget `N`.
    batch_size: windows per step.
    seq_len: tokens per window.
    grid: the peak-rate grid both optimizers are tuned on (its first rate is used untuned).
    fractions: Muon's budgets as fractions of `N` (increasing, ending at 1.0).
    eval_batches: validation batches per loss.
    tune: tune each optimizer's rate on `grid` (seed `TUNE_SEED`); else use `grid[0]`.
  """

  model: str
  steps: int
  batch_size: int
  seq_len: int
  grid: tuple[float, ...]
  fractions: tuple[float, ...]
  eval_batches: int
  tune: bool


QUICK = MuonSizes(model="quick", steps=24, batch_size=4, seq_len=32, grid=(3e-3,),
                  fractions=(0.6, 1.0), eval_batches=2, tune=False)
FULL = MuonSizes(model="small", steps=120, batch_size=8, seq_len=64, grid=GRID,
                 fractions=FRACTIONS, eval_batches=4, tune=True)


def budget_run(cfg, make_tx, lr: float, seeds, budget: int, z: MuonSizes, *, stats: bool):
  """Final val losses `(n_seeds,)`, divergence flags and (if `stats`) last-update statistics."""
  last = {}

  def keep(step, params, _):
    last[step] = params

  r = train_many(cfg, tuning.on_budget(make_tx, budget), seeds=seeds, learning_rates=(lr,),
                 steps=budget, eval_every=budget - 1 if stats else budget, data="stdlib",
                 batch_size=z.batch_size, seq_len=z.seq_len, eval_batches=z.eval_batches,
                 callback=keep if stats else None)
  out = {"val_loss": r.val_loss[0, :, -1], "diverged": r.diverged[0]}
  if stats:
    before, after = last[budget - 1], last[budget]
    out["stats"] = [updates.last_update_statistics(
        *(jax_tree_index(p, i) for p in (before, after))) for i in range(len(seeds))]
  return out


def jax_tree_index(params, i: int):
  """Run `i` of a `train_many` result's params (leading axes `(1, n_seeds)`)."""
  import jax

  return jax.tree.map(lambda x: x[0, i], params)


def _mean(per_seed: dict, metric: str) -> float:
  return float(np.mean([m[metric] for m in per_seed.values()]))


def run(spec: Spec) -> dict:
  """Tunes both optimizers, runs the budgets; see the module docstring."""
  z = spec.sizes
  cfg = models.RECIPES[z.model].cfg
  N, seeds = z.steps, tuple(spec.seeds)
  arms = {"adamw": O.adamw_arm(), "muon": O.muon_arm()}
  tuned = {}
  for name, make_tx in arms.items():
    if z.tune:
      spec.log(f"  muon: tuning {name} on {z.grid} (seed {TUNE_SEED}, {N} steps)")
      tuned[name] = tuning.tune(cfg, make_tx, z.grid, seed=TUNE_SEED, steps=N, data="stdlib",
                                batch_size=z.batch_size, seq_len=z.seq_len,
                                eval_batches=z.eval_batches)
    else:
      tuned[name] = {"learning_rate": z.grid[0], "index": 0, "val_loss": [], "diverged": []}
  spec.log("  muon: tuned rates " + ", ".join(f"{a} {t['learning_rate']:g}"
                                              for a, t in tuned.items()))
  budgets = [max(4, round(f * N)) for f in z.fractions]
  full = {name: budget_run(cfg, make_tx, tuned[name]["learning_rate"], seeds, N, z, stats=True)
          for name, make_tx in arms.items()}
  curve = {}
  for b in budgets[:-1]:
    spec.log(f"  muon: Muon with a {b}-step budget")
    curve[b] = budget_run(cfg, arms["muon"], tuned["muon"]["learning_rate"], seeds, b, z,
                          stats=False)["val_loss"]
  curve[N] = full["muon"]["val_loss"]
  runs: dict = {"adamw": {}, "muon": {}}
  for i, seed in enumerate(seeds):
    target = float(full["adamw"]["val_loss"][i])
    muon_losses = [float(curve[b][i]) for b in budgets]
    reached = tuning.steps_to_loss(budgets, muon_losses, target)
    for name in arms:
      runs[name][seed] = {"val_loss": float(full[name]["val_loss"][i]),
                          "diverged": float(full[name]["diverged"][i]),
                          "learning_rate": tuned[name]["learning_rate"],
                          **full[name]["stats"][i]}
    runs["adamw"][seed]["steps_ratio"] = 1.0
    runs["muon"][seed]["steps_ratio"] = reached / N if reached is not None else NOT_REACHED
    runs["muon"][seed]["steps_to_target"] = reached if reached is not None else float("nan")
    for b, loss in zip(budgets, muon_losses, strict=True):
      runs["muon"][seed][f"val_loss_budget_{b}"] = loss
  ratio = [runs["muon"][s]["steps_ratio"] for s in seeds]
  notes = [
      f"- Tuned peak rates (grid {list(z.grid)}, seed {TUNE_SEED}, {N} steps): "
      + ", ".join(f"{a} {t['learning_rate']:g} (final val losses "
                  f"{[round(v, 4) for v in t['val_loss']]})" for a, t in tuned.items()) + ".",
      f"- Muon steps to AdamW's final loss / {N}: per seed {[round(r, 3) for r in ratio]} "
      f"(budgets {budgets}; {NOT_REACHED} = not reached).",
      "- Last update, hidden matrices (mean over matrices and seeds): "
      + "; ".join(f"{a}: sv entropy {_mean(runs[a], 'update_sv_entropy'):.3f}, "
                  f"κ_p90 {_mean(runs[a], 'update_cond_p90'):.3g}" for a in arms) + ".",
      f"- Model: `{z.model}` shape trained from scratch, batches {z.batch_size} × "
      f"{z.seq_len} tokens, schedule 10% warm-up then linear decay to 10% of the peak.",
  ]
  return {"setup": {"budgets": budgets, "tune_seed": TUNE_SEED, "tuned": tuned,
                    "model_config": cfg.to_dict()},
          "runs": runs, "notes": notes,
          "effects": [("final val loss at N steps: Muon − AdamW", "muon", "adamw", "val_loss"),
                      ("update sv entropy: Muon − AdamW", "muon", "adamw", "update_sv_entropy"),
                      ("update κ_p90: Muon − AdamW", "muon", "adamw", "update_cond_p90")]}


CLAIM = Claim(
    id="muon",
    topic="orthogonality",
    kind="existing",
    preface=("Muon optimizer orthogonalizes gradient updates, outperforming Adam on "
             "matrix-shaped weights"),
    hypothesis=("With each optimizer's peak rate tuned on the same grid, Muon reaches tuned "
                "AdamW's final validation loss (N = 120 steps, `small` shape, stdlib) in at "
                "most 0.6 N steps (separate runs with shorter budgets), and its updates are "
                "closer to orthogonal (higher singular-value entropy) than AdamW's."),
    refuted_if=("Muon needs at least as many steps as AdamW to reach AdamW's final loss "
                "(ratio ≥ 1 over the whole 95% interval)."),
    thresholds=(
        Threshold("Muon steps to AdamW's final loss / AdamW's steps", arm="muon",
                  metric="steps_ratio", supports="<= 0.6", refutes=">= 1.0"),
        Threshold("Muon's updates more orthogonal than AdamW's (sv entropy, Muon − AdamW)",
                  arm="muon", metric="update_sv_entropy", baseline="adamw", stat="range",
                  supports="> 0", control=True),
        Threshold("AdamW runs did not diverge", arm="adamw", metric="diverged", stat="range",
                  supports="== 0", control=True),
    ),
    anchors=(
        Anchor("Muon / AdamW steps to val loss 3.28 (GPT-2 small, FineWeb)",
               "3375–3600 / 5625 ≈ 0.6", "modded-nanogpt optimizer track (Jordan et al. 2024)"),
        Anchor("Muon compute efficiency over AdamW", "≈ 2×",
               "Liu et al. 2025, Muon is Scalable for LLM Training (Moonlight)"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
