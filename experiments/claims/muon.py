"""Claim `muon`: does Muon reach tuned AdamW's loss in fewer steps, by a margin that matters?

    python -m experiments claim muon [--quick]

"Muon optimizer orthogonalizes gradient updates, outperforming Adam on matrix-shaped weights"
makes two statements. The first is settled by construction (the `theorem`: Newton–Schulz maps
every singular value into a band around 1), so it is a control that the Muon arm does what
Muon does. The second is the headline: **with AdamW tuned as hard as Muon, does Muon (on the
hidden matrices; AdamW on the embedding, output and vectors) reach tuned AdamW's final
validation loss in at least 10% fewer steps?** (the speedrun's comparison, steps to a target
loss). Refuted when the 95% interval of Muon's steps-to-target ratio lies above 0.9. The
margin: a smaller saving is within what re-tuning a schedule buys either optimizer. Steps, not
seconds, are the measure, as in the speedrun.

Protocol. Both peak rates are tuned the same way (`tuning.tune_on_seeds`) on one
quarter-decade grid `3e-4 … 3e-2` (9 rates; `muon_arm` matches AdamW's update RMS) at the full
budget `N`, final validation loss averaged over tuning seeds 100, 101 (never reported); a best
rate at an edge extends the grid one step, once. AdamW at its tuned rate sets the target, its
loss after `N` steps (per seed). Muon runs at its tuned rate in separate runs with budgets
`{0.1, 0.15, …, 0.4, 0.5, 0.6, 0.8, 1}·N` (the schedule, `budget_schedule`, depends on the
budget); its steps to target is the smallest budget reaching the target (`steps_to_loss`,
interpolated) over `N`, `1.5` (censored: left out of trend fits) when `N` does not reach it.
Controls (each blocks the headline): AdamW's runs end finite and below `ln V`; Muon's last
update has singular-value entropy ≥ 0.9 in every run; neither tuned rate sits at an edge of its
grid; no seed's ratio sits at the budget grid's floor.

Registered on `micro-20`'s shape (d 32, L 2, H 4; 41,856 params), each model trained from
scratch at 20 tokens per parameter: `N = 409` steps of 16 × 128 stdlib tokens (10% warm-up,
linear decay to 10% of the peak); bits per byte from AdamW's held-out loss. The scale axis
trains `pico-20`'s shape the same way (`steps=None` rescales `N` to 20 tokens per parameter).
`mini-20` is left out by cost (18-model tuning sweeps of 1,298 steps: over an hour of tuning on
2 idle cores), so the trend with size is not measured; `--sizes pico-20,micro-20,mini-20` adds
it. `--quick` (`quick` shape, one seed, 24 steps, one untuned rate): indicative only.

v2 (2026-12-05, before the run): the trained regime (issue 38; v1: `small`, 120 steps of 8 × 64,
0.07 tokens per parameter); the edge rule once; no budget axis (20 tokens per parameter is
already the compute-optimal length; v1's 16× on `micro` reached 23.5). Metric, margin, grids
and controls unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from experiments import models
from experiments.lab import optimizers as O
from experiments.lab import tuning, updates
from experiments.train.sweep import train_many
from experiments.verdict import Anchor, Claim, Spec, Threshold, TrainedSizes, axes
from experiments.verdict.render.tuning import edges, grid_panel

TUNING_SEEDS = (100, 101)
GRID = tuple(float(f"{x:.3g}") for x in np.geomspace(3e-4, 3e-2, 9))  # quarter-decade steps
FRACTIONS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0)
NOT_REACHED = 1.5
MARGIN = 0.1  # of AdamW's steps N: the smallest saving worth switching optimizers for
ENTROPY_FLOOR = 0.9  # an orthogonalised update (theorem: >= 0.95); AdamW's is ~0.3
NS_BAND = (0.68, 1.21)  # 5 standard Newton–Schulz steps map [0.002, 1] into this band


@dataclasses.dataclass(frozen=True)
class MuonSizes(TrainedSizes):
  """What a run of `muon` reads about its size.

  Attributes:
    model: the `experiments.models.RECIPES` shape trained from scratch.
    steps: AdamW's budget `N`; None: the steps that train `model` on
      `models.TOKENS_PER_PARAM` tokens per parameter (`budget_steps`), on every size alike.
    batch_size: windows per step.
    seq_len: tokens per window.
    grid: the peak-rate grid both optimizers are tuned on (its first rate is used untuned).
    fractions: Muon's budgets as fractions of `N` (increasing, ending at 1.0).
    eval_batches: validation batches per loss.
    tune: tune each optimizer's rate on `grid` (seeds `TUNING_SEEDS`); else use `grid[0]`.
    extend: rates that tuning may add beyond an edge of `grid` that wins.
  """

  model: str
  steps: int | None
  batch_size: int
  seq_len: int
  grid: tuple[float, ...]
  fractions: tuple[float, ...]
  eval_batches: int
  tune: bool
  extend: int


QUICK = MuonSizes(model="quick", steps=24, batch_size=4, seq_len=32, grid=(3e-3,),
                  fractions=(0.6, 1.0), eval_batches=2, tune=False, extend=0)
FULL = MuonSizes(model="micro-20", steps=None, batch_size=16, seq_len=128, grid=GRID,
                 fractions=FRACTIONS, eval_batches=4, tune=True, extend=1)


def budgets_of(steps: int, fractions) -> list[int]:
  """Muon's budgets in steps, `round(f · N)` (at least 2, distinct, increasing).

  Example:
    >>> from experiments.claims.muon import budgets_of
    >>> budgets_of(120, (0.1, 0.15, 0.2, 1.0))
    [12, 18, 24, 120]
  """
  out = [max(2, round(f * steps)) for f in fractions]
  if np.any(np.diff(out) <= 0) or out[-1] != steps:
    raise ValueError(f"budgets_of: fractions {tuple(fractions)} give budgets {out} at N = "
                     f"{steps}; they must be increasing, distinct, and end at 1.0")
  return out


def steps_ratio(budgets, losses, target: float) -> tuple[float, bool]:
  """Muon's steps to `target` over `N = budgets[-1]`, and whether it sits at the grid's floor.

  `NOT_REACHED` (1.5) when no budget reaches the target; at the floor when the smallest budget
  already does (the ratio is then only an upper bound).

  Example:
    >>> from experiments.claims.muon import steps_ratio
    >>> steps_ratio([30, 60, 120], [3.0, 2.6, 2.4], 2.8)
    (0.375, False)
    >>> steps_ratio([30, 60, 120], [2.7, 2.6, 2.4], 2.8), steps_ratio([60, 120], [3, 2.9], 2.8)
    ((0.25, True), (1.5, False))
  """
  reached = tuning.steps_to_loss(budgets, losses, target)
  if reached is None:
    return NOT_REACHED, False
  return reached / budgets[-1], bool(losses[0] <= target)


def _tree_index(params, i: int):
  """Run `i` of a `train_many` result's params (leading axes `(1, n_seeds)`)."""
  return jax.tree.map(lambda x: x[0, i], params)


def budget_run(cfg, make_tx, lr: float, seeds, budget: int, z: MuonSizes, *, stats: bool):
  """Final val losses `(n_seeds,)`, end-divergence and spike flags, last-update statistics."""
  last = {}

  def keep(step, params, _):
    last[step] = params

  r = train_many(cfg, tuning.on_budget(make_tx, budget), seeds=seeds, learning_rates=(lr,),
                 steps=budget, eval_every=budget - 1 if stats else budget, data="stdlib",
                 batch_size=z.batch_size, seq_len=z.seq_len, eval_batches=z.eval_batches,
                 callback=keep if stats else None)
  final = r.val_loss[0, :, -1]
  ended = tuning.ended_diverged(final, cfg.vocab_size)
  out = {"val_loss": final, "ended_diverged": ended, "spiked": r.diverged[0] & ~ended}
  if stats:
    out["stats"] = [updates.last_update_statistics(
        _tree_index(last[budget - 1], i), _tree_index(last[budget], i))
        for i in range(len(seeds))]
  return out


def run(spec: Spec) -> dict:
  """Tunes both optimizers, runs Muon's budgets; see the module docstring."""
  z = dataclasses.replace(spec.sizes, steps=spec.sizes.budget_steps())
  cfg = models.RECIPES[z.model].cfg
  N, seeds = z.steps, tuple(spec.seeds)
  arms = {"adamw": O.adamw_arm(), "muon": O.muon_arm()}
  tuned = {}
  for name, make_tx in arms.items():
    if z.tune:
      spec.log(f"  muon: tuning {name} on {len(z.grid)} rates (seeds {TUNING_SEEDS}, {N} steps)")
      tuned[name] = tuning.tune_on_seeds(cfg, make_tx, z.grid, seeds=TUNING_SEEDS, steps=N,
                                         extend=z.extend, data="stdlib",
                                         batch_size=z.batch_size, seq_len=z.seq_len,
                                         eval_batches=z.eval_batches)
    else:
      tuned[name] = tuning.untuned(z.grid[0])
  spec.log("  muon: rates " + ", ".join(f"{a} {t['learning_rate']:g}" for a, t in tuned.items()))
  budgets = budgets_of(N, z.fractions)
  full = {}
  for name, make_tx in arms.items():
    spec.log(f"  muon: {name} at N = {N} steps on seeds {seeds}")
    full[name] = budget_run(cfg, make_tx, tuned[name]["learning_rate"], seeds, N, z, stats=True)
  curve = {N: full["muon"]}
  for b in budgets[:-1]:
    spec.log(f"  muon: Muon with a {b}-step budget")
    curve[b] = budget_run(cfg, arms["muon"], tuned["muon"]["learning_rate"], seeds, b, z,
                          stats=False)
  at_edge = edges(tuned)
  runs: dict = {"adamw": {}, "muon": {}}
  for i, seed in enumerate(seeds):
    target = float(full["adamw"]["val_loss"][i])
    losses = [float(curve[b]["val_loss"][i]) for b in budgets]
    ratio, floor = steps_ratio(budgets, losses, target)
    for name in arms:
      runs[name][seed] = {"val_loss": float(full[name]["val_loss"][i]),
                          "ended_diverged": float(full[name]["ended_diverged"][i]),
                          "spiked": float(full[name]["spiked"][i]),
                          "learning_rate": tuned[name]["learning_rate"],
                          **full[name]["stats"][i]}
    runs["adamw"][seed]["steps_ratio"] = 1.0
    runs["muon"][seed].update(
        steps_ratio=ratio, at_budget_floor=float(floor), rates_at_grid_edge=at_edge,
        steps_to_target=ratio * N if ratio != NOT_REACHED else math.nan,
        budgets_ended_diverged=float(sum(curve[b]["ended_diverged"][i] for b in budgets)),
        **{f"val_loss_budget_{b}": loss for b, loss in zip(budgets, losses, strict=True)})
  ratio = [runs["muon"][s]["steps_ratio"] for s in seeds]
  mean = lambda a, k: float(np.mean([runs[a][s][k] for s in seeds]))
  notes = [
      {"tuned": tuned, "read": f"lowest final val loss after {N} steps, mean over seeds "
                               f"{list(TUNING_SEEDS)}"},
      f"Muon's steps to AdamW's final loss / N = {N}: per seed "
      f"{[round(r, 3) for r in ratio]} (budgets {budgets}; {NOT_REACHED} = not reached; "
      f"floor {budgets[0] / N:g}).",
      f"Final val loss at N = {N}: AdamW {mean('adamw', 'val_loss'):.4f}, Muon "
      f"{mean('muon', 'val_loss'):.4f}; runs ended diverged: AdamW "
      f"{int(sum(runs['adamw'][s]['ended_diverged'] for s in seeds))}, Muon (every budget) "
      f"{int(sum(runs['muon'][s]['budgets_ended_diverged'] for s in seeds))}; recovered spikes "
      f"at N: AdamW {int(sum(runs['adamw'][s]['spiked'] for s in seeds))}, Muon "
      f"{int(sum(runs['muon'][s]['spiked'] for s in seeds))}.",
      "Last update of the hidden matrices (mean over matrices and seeds; by construction, "
      "see the theorem): " + "; ".join(
          f"{a}: sv entropy {mean(a, 'update_sv_entropy'):.3f}, "
          f"κ_p90 {mean(a, 'update_cond_p90'):.3g}" for a in arms) + ".",
      f"Model: `{z.model}` shape trained from scratch, batches {z.batch_size} × "
      f"{z.seq_len} tokens, N = {N} steps ({z.train_tokens() / models.param_count(z.model):.3g} "
      "tokens per parameter), schedule 10% warm-up then linear decay to 10% of the peak.",
  ]
  return {"setup": {"budgets": budgets, "tuning_seeds": list(TUNING_SEEDS), "tuned": tuned,
                    "model_config": cfg.to_dict()},
          "runs": runs, "notes": notes, "figures": [_figure(tuned, runs, seeds, budgets, N)],
          "effects": [("final val loss at N steps: Muon − AdamW", "muon", "adamw", "val_loss"),
                      ("update sv entropy: Muon − AdamW", "muon", "adamw", "update_sv_entropy"),
                      ("update κ_p90: Muon − AdamW", "muon", "adamw", "update_cond_p90")]}


def _figure(tuned, runs, seeds, budgets, N) -> dict:
  """`budgets.png`, declared as data (`verdict.render.figures.draw`): the tuning grids, then
  Muon's final loss against its budget beside AdamW's at `N`."""
  loss = lambda s: [runs["muon"][s][f"val_loss_budget_{b}"] for b in budgets]
  lines = [{"x": budgets, "y": loss(s), "style": "-", "color": "tab:orange", "alpha": 0.35,
            "lw": 1, **({"label": "Muon, one seed"} if k == 0 else {})}
           for k, s in enumerate(seeds if len(seeds) > 1 else ())]
  lines.append({"x": budgets, "y": [float(v) for v in np.mean([loss(s) for s in seeds], 0)],
                "style": "o-", "color": "tab:orange", "lw": 2, "label": "Muon, mean over seeds"})
  target = float(np.mean([runs["adamw"][s]["val_loss"] for s in seeds]))
  curve = {"title": f"Muon's loss vs budget, {len(seeds)} seed(s)", "lines": lines,
           "xlabel": "Muon's budget (steps; separate runs)", "ylabel": "final val loss (nats)",
           "hlines": [{"y": target, "color": "tab:blue", "style": "--",
                       "label": f"AdamW after N = {N} steps (mean)"}],
           "vlines": [{"x": (1 - MARGIN) * N, "color": "k", "style": ":",
                       "label": f"margin: {1 - MARGIN:g} N = {(1 - MARGIN) * N:g} steps"}],
           "legend": 8}
  grid = grid_panel(tuned, title=f"tuning on seeds {', '.join(map(str, TUNING_SEEDS))}",
                    ylabel=f"final val loss after N = {N} steps (nats)")
  return {"name": "budgets.png", "size": [11, 4], "panels": [grid, curve]}


THEOREM = (
    "Muon's update of a hidden matrix is s · NS(M), five Newton–Schulz steps on its momentum "
    "M. Each step maps X = U Σ Vᵀ to U p(Σ) Vᵀ with the odd quintic p(x) = 3.4445x − 4.7750x³ "
    "+ 2.0315x⁵ (the singular vectors are kept: XXᵀX = U Σ³ Vᵀ), starting from M/‖M‖_F, whose "
    "singular values lie in [0, 1]. Composing p five times maps every singular value in "
    f"[0.002, 1] into [{NS_BAND[0]}, {NS_BAND[1]}], so whenever M has no direction weaker than "
    "0.002 ‖M‖_F, the update's normalised singular-value entropy is at least the minimum over "
    "that band (≥ 0.95 for r ≥ 32 singular values; 1 for the exact polar factor U Vᵀ). That "
    "Muon orthogonalises is therefore a control of the instrument, not a finding: "
    "tests/experiments/test_claims_optimizers.py checks the band and the entropy bound on "
    "random matrices in float64.")

CLAIM = Claim(
    id="muon",
    topic="orthogonality",
    kind="existing",
    preface=("Muon optimizer orthogonalizes gradient updates, outperforming Adam on "
             "matrix-shaped weights"),
    theorem=THEOREM,
    hypothesis=("With both optimizers' peak rates tuned the same way on the tuning seeds only "
                "(one grid, the full budget N, the grid extended past a winning edge), Muon on "
                "the hidden matrices (AdamW on the rest) reaches tuned AdamW's final validation "
                "loss after N steps (20 tokens per parameter in full runs) in at least 10% "
                "fewer steps: the 95% interval of its steps ratio (separate runs with shorter "
                "budgets) lies below "
                f"{1 - MARGIN:g}."),
    refuted_if=(f"The 95% interval of Muon's steps-to-target ratio lies above {1 - MARGIN:g} "
                "(less than 10% of AdamW's steps saved, or none), with every control holding."),
    thresholds=(
        Threshold.beyond("Muon's steps to AdamW's final loss / AdamW's steps", arm="muon",
                         metric="steps_ratio", direction="<", reference=1.0, margin=MARGIN,
                         unit="fraction of AdamW's steps N",
                         censored=f">= {NOT_REACHED}"),  # never reached: no number to fit
        Threshold("AdamW's reported runs end finite and below ln V (the target exists)",
                  arm="adamw", metric="ended_diverged", stat="range", supports="== 0",
                  control=True, unit="1 = ended diverged"),
        Threshold(f"Muon's last update is orthogonalised: sv entropy ≥ {ENTROPY_FLOOR} (the "
                  "theorem)", arm="muon", metric="update_sv_entropy", stat="range",
                  supports=f">= {ENTROPY_FLOOR}", control=True, unit="normalised entropy"),
        Threshold("neither tuned rate sits at an edge of its grid (AdamW tuned as hard as Muon)",
                  arm="muon", metric="rates_at_grid_edge", stat="range", supports="== 0",
                  control=True, unit="optimizers"),
        Threshold("the budget grid resolves the ratio (no seed at its floor)", arm="muon",
                  metric="at_budget_floor", stat="range", supports="== 0", control=True,
                  unit="1 = at the floor"),
    ),
    anchors=(
        Anchor("Muon / AdamW steps to val loss 3.28 (GPT-2 small, FineWeb)",
               "3375–3600 / 5625 ≈ 0.6", "modded-nanogpt optimizer track (Jordan et al. 2024)"),
        Anchor("Muon compute efficiency over AdamW", "≈ 2×",
               "Liu et al. 2025, Muon is Scalable for LLM Training (Moonlight)"),
    ),
    tuning_seeds=TUNING_SEEDS,
    axes=(axes.scale(("pico-20", "micro-20")),),
    bits_metric=("adamw", "val_loss"),
    version=2,
    revisions=("v2: the trained regime (issue 38): micro-20's shape, each size trained from "
               "scratch at 20 tokens per parameter (v1: small, 0.07), scale over pico-20 and "
               "micro-20 (mini-20 left out by cost: the trend is not measured), the edge rule "
               "once, no budget axis (20 tokens per parameter is the compute-optimal length); "
               "metric, margin, grids and controls unchanged",),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
