"""Claim `layernorm-condition`: do the inputs a norm feeds stay well conditioned in training?

    python -m experiments claim layernorm-condition [--quick]

**The preface's question.** "LayerNorm and RMSNorm keep condition numbers bounded, stabilizing
training." A pre-norm feeds rows `X (B·T, D)` to `w_q, w_k, w_v` (`attn_in`) and `w_1` (`ffn_in`).
By the `theorem` each row leaves a norm with norm `√D` (`σ_1(X)` is pinned) but `κ_eff =
σ_1/σ_k` is *not* bounded by construction. The primary asks what trained models do **at the
registered size and each arm's tuned rate** (a measurement, not a property of norms):

* *below the bf16 line*: with LayerNorm, and with RMSNorm, the largest `κ_eff` of the
  normalized inputs over layers and training (15–16 readings) stays below `K = 1/u_bf16 =
  256` in every seed (below `K` every direction of `X` survives bfloat16 rounding; margin 0);
* *stabilizing*: at the stress rate the model without a norm ends at least 0.25 nats (≈ 10% of
  a trained loss) above each normed one; a run that ended diverged (non-finite, or above `ln V`)
  counts as `ln V`. Refuted if `κ_eff` exceeds `K` in every seed under a norm, or that gap lies
  inside 0.25 nats (whole 95% interval). Extensions: *is it the norm?* (without a norm, at its
  tuned rate, `κ_eff` at least twice the normed one's: `log₁₀` beyond `log₁₀ 2`) and *bounded
  where it stabilizes?* (the normed inputs below `K` at the stress rate too).

**Protocol.** Arms `layernorm`, `rmsnorm`, `none` (the raw residual stream), each trained from
scratch at 20 tokens per parameter (steps of 16 × 128 tokens), AdamW (`b = (0.9, 0.95)`, decay
0.1, cosine to 10%, no warm-up, no clipping: clipping hides divergence). On tuning seed 100
only, every arm runs every rate of `GRID`; its tuned rate has the lowest final validation loss
among runs that did not end diverged; one at an edge extends the grid a step (×3) beyond it,
once, and one still at an edge fails that arm's control, blocking every threshold read at tuned
rates. The stress rate is the smallest rate run at which `none` ended diverged on the tuning
seed; if none did, the largest rate run (recorded; the stress thresholds are read there all the
same). Seeds 0–4 run at the tuned and the stress rate; `κ_eff = analysis.effective_condition(X,
center=True)` on one validation batch (`N = 2,048` rows; LayerNorm's structural zero dropped),
at most `1/(max(N, D)·eps₃₂) = 4,096` in float32 (`kappa_ceiling`).

Registered on `micro-20` (D 32, L 2, H 4; 41,856 parameters, 409 steps), not `mini-20`: its run
is 3 arms × 1,298 steps × 16 runs ≈ 62,000 run-steps, ≈ 30–35 min on 2 idle cores (5 vmapped
seeds at 0.12–0.2 s a step), past the half hour a registered run may take. The scale axis
(`pico-20`, `micro-20`, `mini-20`) reruns the whole protocol with each size's own steps (145,
409, 1,298); the verdict is read at `micro-20`. `--quick`: `pico-20`, 2 tokens per parameter.
v2 (2026-12-05, before the run): the trained regime (issue 38; v1: `nano`, 200 steps of 16 × 32
tokens, 3 per parameter), the edge rule, the primary worded as a reading at the registered size.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from experiments import models
from experiments.lab import edge, norm_training
from experiments.lab.norm_training import NORMED, kappa_ceiling
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes
from experiments.verdict.render.cells import spread
from experiments.verdict.render.figures import median_band
from experiments.verdict.render.tuning import on_one_seed, stress_note

NORMS = ("layernorm", "rmsnorm", "none")
U_BF16 = float(jnp.finfo(jnp.bfloat16).eps) / 2  # unit roundoff 2⁻⁸
KAPPA_BOUND = 1 / U_BF16  # 256
STABLE_MARGIN = 0.25  # nats: ≈ 10% of a trained loss
NORM_MARGIN = math.log10(2)  # decades: "at least twice the condition number"
TUNE_SEED = 100
GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)


THEOREM = (
    "A norm fixes each row's scale, not the matrix's conditioning. For a row x ∈ R^D, "
    "LayerNorm's z = (x − x̄1)/rms(x − x̄1) has 1ᵀz = 0 and ‖z‖ = √D exactly, RMSNorm's "
    "z = x/rms(x) has ‖z‖ = √D, and both are scale invariant (z(αx) = z(x), α > 0). So the N "
    "rows of the normalized input Z all have norm √D whatever the stream's scale, "
    "‖Z‖_F² = N·D, and σ_1(Z)² ∈ [N, N·D] (times the largest squared gain): the scale is "
    "pinned. Nothing pins σ_k: a norm rescales rows, not features, so rows x_i = (±1, ε·w_i) "
    "(one strong feature, D − 1 weak ones) normalize to rows whose centred matrix has one "
    "direction of size ≈ √N and the rest of size O(ε√N): κ_eff(Z) grows like 1/ε while every "
    "row keeps norm √D. Whether trained inputs stay well conditioned is therefore empirical. "
    "tests/experiments/test_claims_stability.py checks both on random instances in float64, "
    "and that the model's Norm computes this z.")


@dataclasses.dataclass(frozen=True)
class LayernormConditionSizes(TrainedSizes):
  """What a run of `layernorm-condition` reads about its size.

  Attributes:
    model: the shape every arm is trained at from scratch, with the arm's norm
      (`experiments.models.config`): the registered `micro-20`, or a size of the scale axis.
    grid: the peak rates every arm is tuned on (tuning seed `TUNE_SEED`); the stress rate is one
      of them. Without tuning, every arm runs at `grid[0]` and the stress rate is `grid[-1]`.
    tune: tune on the tuning seed (FULL); otherwise the fixed rates above (QUICK).
    tokens_per_param: training tokens per parameter of `model` (`models.model_card`'s count,
      with LayerNorm); `steps` follows from it, so each size of the scale axis trains at it.
    seq_len: training and validation window length (at most the model's `max_len`).
    batch_size: training windows per step (and rows of the batch `κ_eff` is read on).
    evals: readings of `κ_eff` and the validation loss per run, at most: every
      `eval_every = ⌈steps / evals⌉` steps and at the last step.
    eval_batches: validation batches per evaluation of the loss.
    extend: how many times a tuned rate at an edge of `grid` extends it by one step beyond that
      edge (`norm_training.tune_arm`; the registered edge rule).
  """

  model: str
  grid: tuple[float, ...]
  tune: bool
  tokens_per_param: float
  seq_len: int
  batch_size: int
  evals: int
  eval_batches: int
  extend: int = 0

  def __post_init__(self):
    cfg = models.config(self.model)
    if self.seq_len > cfg.max_len:
      raise ValueError(f"LayernormConditionSizes: seq_len={self.seq_len} exceeds the "
                       f"`{self.model}` shape's max_len={cfg.max_len}. Fix: a shorter seq_len "
                       "or a longer model.")
    if not (self.tokens_per_param > 0 and self.evals >= 1):
      raise ValueError(f"LayernormConditionSizes: tokens_per_param={self.tokens_per_param} and "
                       f"evals={self.evals} must be positive. Fix: e.g. 20 and 16.")

  @property
  def steps(self) -> int:
    """Optimizer steps: `tokens_per_param` tokens per parameter of `model`, rounded up.

    Example:
      >>> from experiments.claims.layernorm_condition import FULL
      >>> FULL.steps, FULL.eval_every  # micro-20's recipe: 409 steps of 16 × 128 tokens
      (409, 26)
    """
    params = models.model_card(self.model)["params"]
    return math.ceil(self.tokens_per_param * params / (self.batch_size * self.seq_len))

  @property
  def eval_every(self) -> int:
    """Steps between readings (`evals` of them at most; the last at the last step)."""
    return math.ceil(self.steps / self.evals)

  def to_dict(self) -> dict:
    """The fields, and the steps and reading interval they give (what the run trained)."""
    return {**super().to_dict(), "steps": self.steps, "eval_every": self.eval_every}


QUICK = LayernormConditionSizes(model="pico-20", grid=(3e-3, 1e-1), tune=False,
                                tokens_per_param=2, seq_len=64, batch_size=8, evals=4,
                                eval_batches=2)
FULL = LayernormConditionSizes(model="micro-20", grid=GRID, tune=True,
                               tokens_per_param=models.TOKENS_PER_PARAM, seq_len=128,
                               batch_size=16, evals=16, eval_batches=4, extend=1)


def run(spec: Spec) -> dict:
  """Tunes each arm, picks the stress rate, tracks `κ_eff` on the seeds; see the docstring."""
  z = spec.sizes
  base = models.config(z.model)
  V = base.vocab_size
  kw = {"steps": z.steps, "batch_size": z.batch_size, "seq_len": z.seq_len,
        "eval_batches": z.eval_batches}
  tuned: dict[str, dict] = {}
  if z.tune:
    for norm in NORMS:
      spec.log(f"  layernorm-condition: tuning {norm} on {list(z.grid)} (seed {TUNE_SEED}, "
               f"{z.steps} steps)")
      tuned[norm] = norm_training.tune_arm(base.replace(norm=norm), z.grid, seed=TUNE_SEED,
                                           extend=z.extend, **kw)
    stress, found = norm_training.stress_rate(tuned["none"]["grid"], tuned["none"]["excluded"])
  else:
    tuned = {norm: edge.untuned(z.grid[0]).to_dict() for norm in NORMS}
    stress, found = z.grid[-1], False
  tracks, runs = {}, {}
  for norm in NORMS:
    rates = (tuned[norm]["learning_rate"], stress)
    spec.log(f"  layernorm-condition: {norm} at {rates[0]:g} (tuned) and {stress:g} (stress) "
             f"on seeds {list(spec.seeds)}")
    tracks[norm] = norm_training.track(base.replace(norm=norm), spec.seeds, rates,
                                       eval_every=z.eval_every, **kw)
    runs[norm] = {seed: {**norm_training.seed_metrics(tracks[norm], j, V),
                         "learning_rate": rates[0], "stress_rate": stress,
                         "edge_lr": float(tuned[norm]["at_edge"])}
                  for j, seed in enumerate(spec.seeds)}
  return {"setup": {"model_config": base.to_dict(), "norms": list(NORMS), "center": True,
                    "kappa_bound": KAPPA_BOUND, "tune_seed": TUNE_SEED, "tuned": tuned,
                    "stress_rate": stress, "stress_rate_from_divergence": found},
          "runs": runs,
          "figures": [_figure(tracks, tuned, stress, V,
                              kappa_ceiling(z.batch_size * z.seq_len, base.d_model),
                              z.eval_every)],
          "notes": _notes(runs, tuned, stress, found, spec.seeds, z, base),
          "effects": [("log10 κ_max at the stress rate: none − layernorm", "none", "layernorm",
                       "log10_kappa_stress"),
                      ("end loss at the tuned rates: none − layernorm", "none", "layernorm",
                       "end_loss_tuned")]}


def _notes(runs, tuned, stress, found, seeds, z, cfg) -> list:
  values = lambda arm, key: np.array([runs[arm][s][key] for s in seeds], np.float64)
  span = lambda arm, key: spread(values(arm, key))
  total = lambda arm, key: int(np.nansum(values(arm, key)))
  return [
      {"tuned": tuned, "per_rate": True, "read": on_one_seed(TUNE_SEED, z.steps, z.grid, z.extend)},
      stress_note(stress, found, arm="none", tuned=z.tune),
      f"Largest κ_eff of the normalized inputs (attn_in, ffn_in; over layers and every "
      f"{z.eval_every} steps), mean [min, max] over seeds, against the bound K = 1/u_bf16 = "
      f"{KAPPA_BOUND:.0f}: at the tuned rates " + "; ".join(
          f"{n} {span(n, 'kappa_tuned')}" for n in NORMS) + "; at the stress rate " + "; ".join(
          f"{n} {span(n, 'kappa_stress')}" for n in NORMS) + ".",
      "Per input at the tuned rates (mean over seeds): " + "; ".join(
          f"{n}: " + ", ".join(f"{i} {np.nanmean(values(n, f'{i}/kappa_tuned')):.4g}"
                               for i in NORMED) for n in NORMS)
      + "; at the last evaluation: " + ", ".join(
          f"{n} {np.nanmean(values(n, 'kappa_tuned_final')):.4g}" for n in NORMS) + ".",
      f"End loss (nats; ended diverged = ln V = {math.log(cfg.vocab_size):.3f}), mean [min, "
      "max]: at the tuned rates " + "; ".join(f"{n} {span(n, 'end_loss_tuned')}" for n in NORMS)
      + "; at the stress rate " + "; ".join(f"{n} {span(n, 'end_loss_stress')}" for n in NORMS)
      + ".",
      f"Runs that ended diverged (of {len(seeds)} seeds), tuned / stress: " + ", ".join(
          f"{n} {total(n, 'diverged_tuned')} / {total(n, 'diverged_stress')}" for n in NORMS)
      + "; spiked but recovered: " + ", ".join(
          f"{n} {total(n, 'spiked_tuned')} / {total(n, 'spiked_stress')}" for n in NORMS) + ".",
      "Zero singular values dropped from κ_eff (largest over inputs, layers, evaluations), "
      "tuned / stress rate: " + ", ".join(
          f"{n} {np.nanmax(values(n, 'n_dropped_tuned')):.0f} / "
          f"{np.nanmax(values(n, 'n_dropped_stress')):.0f}" for n in NORMS)
      + ". LayerNorm has one structural zero (its all-ones direction, `(X ⊙ 1/scale)·1 = 0`); "
      f"more means the input lost rank in float32, where κ_eff reads at most its ceiling "
      f"1/(max(N, D)·eps₃₂) = {kappa_ceiling(z.batch_size * z.seq_len, cfg.d_model):.0f}.",
      f"Model: the `{z.model}` shape from scratch, D = {cfg.d_model}, L = {cfg.n_layers}, "
      f"H = {cfg.n_heads}, T = {z.seq_len}, B = {z.batch_size} (κ_eff read on "
      f"{z.batch_size * z.seq_len} rows of one validation batch), {z.steps} steps: "
      f"{z.train_tokens():,} tokens, {z.tokens_per_param:g} per parameter of the LayerNorm "
      "model (the arms without a norm's gain and bias have a few fewer parameters).",
  ]


def _figure(tracks: dict, tuned: dict, stress: float, vocab_size: int, ceiling: float,
            eval_every: int) -> dict:
  """`kappa.png`, declared as data: `κ_eff` of the normalized inputs at the tuned and at the
  stress rates, and the validation loss at the stress rate (median over seeds, band min–max)."""
  colors = dict(zip(NORMS, ("C0", "C1", "C3"), strict=True))
  ln_v = math.log(vocab_size)
  log = {"yscale": "log", "ylog_ticks": True, "xlabel": "training step", "legend_below": 2}
  panels = []
  for i, title in ((0, "at each arm's tuned rate"), (1, f"at the stress rate η = {stress:g}")):
    drawn = []
    for norm, tr in tracks.items():
      k_ES = np.nanmax(np.stack([np.nanmax(tr["kappa_ERSL"][n][:, i], -1) for n in NORMED]), 0)
      rate = tuned[norm]["learning_rate"] if i == 0 else stress
      drawn.append(median_band(tr["steps_E"], k_ES.T, color=colors[norm],
                               label=f"{norm} (η = {rate:g})"))
    top = max([np.nanmax(band["hi"]) for _, band in drawn if np.isfinite(band["hi"]).any()]
              + [KAPPA_BOUND])
    near = top > ceiling / 10  # the ceiling is drawn only where readings come near it
    panels.append({**log, "lines": [line for line, _ in drawn],
                   "bands": [band for _, band in drawn],
                   "hlines": [{"y": KAPPA_BOUND, "color": "k", "style": "--", "lw": 1,
                               "label": f"bound K = 1/u_bf16 = {KAPPA_BOUND:.0f}"}]
                   + ([{"y": ceiling, "color": "0.5", "style": ":", "lw": 1.5,
                        "label": f"float32 ceiling of κ_eff = {ceiling:.0f}"}] if near else []),
                   "ylabel": "κ_eff = σ₁/σ_k (max over attn_in, ffn_in, layers)",
                   "title": f"κ_eff of the normalized inputs\n{title}"})
  drawn = [median_band(tr["steps_E"], tr["val_RSE"][1], color=colors[norm], label=norm)
           for norm, tr in tracks.items()]
  top = 5 * ln_v  # a diverging run's early losses (hundreds of nats) would flatten the rest
  low = min([2.0] + [0.9 * np.nanmin(tr["val_RSE"][1]) for tr in tracks.values()])
  panels.append({**log, "lines": [line for line, _ in drawn], "bands": [b for _, b in drawn],
                 "hlines": [{"y": ln_v, "color": "k", "style": ":", "lw": 1.5,
                             "label": f"ln V = {ln_v:.2f} (initial loss)"}],
                 "ylim": [float(low), top], "ylabel": "validation loss (nats, log scale)",
                 "title": f"validation loss at the stress rate η = {stress:g}\n"
                          f"(axis cut at {top:.0f} nats)"})
  n_seeds = next(iter(tracks.values()))["final_RS"].shape[1]
  band = f"median over {n_seeds} seeds, band min–max" if n_seeds > 1 else "one seed"
  return {"name": "kappa.png", "size": [15, 5.4], "panels": panels, "suptitle_size": 10,
          "suptitle": f"layernorm-condition: {band}, read every {eval_every} steps on one "
                      "validation batch"}


def _edge_control(arm: str) -> Threshold:
  """The control of an arm's tuned rate: it must not sit at an edge of its (extended) grid."""
  return Threshold(f"{arm}'s tuned rate inside the grid", arm=arm, metric="edge_lr",
                   stat="range", supports="== 0", control=True)


def _bound(arm: str, tag: str, where: str, needs: tuple[str, ...]) -> Threshold:
  """`arm`'s largest `κ_eff` (`kappa_<tag>`) below `KAPPA_BOUND` in every seed."""
  return Threshold.beyond(f"{arm}: largest κ_eff of the normalized inputs at {where}", arm=arm,
                          metric=f"kappa_{tag}", direction="<", reference=KAPPA_BOUND,
                          margin=0.0, stat="range", unit="σ₁/σ_k (dimensionless)", needs=needs)


CLAIM = Claim(
    id="layernorm-condition",
    topic="condition number",
    kind="existing",
    preface="LayerNorm and RMSNorm keep condition numbers bounded, stabilizing training",
    theorem=THEOREM,
    hypothesis=(
        "Trained from scratch at 20 tokens per parameter at the registered size (micro-20), "
        "with LayerNorm, and with RMSNorm, the effective condition number κ_eff = σ_1/σ_k "
        "(centred, non-zero spectrum) of the normalized projection inputs (attention and "
        "feed-forward), largest over layers and over training at the arm's tuned rate, stays "
        f"below K = 1/u_bf16 = {KAPPA_BOUND:.0f} in every seed; and at the stress rate (the "
        "smallest rate at which the un-normed model ended diverged on the tuning seed) the "
        f"un-normed model ends at least {STABLE_MARGIN} nats above each normed one (ended "
        "diverged counts as ln V)."),
    refuted_if=(
        f"κ_eff exceeds {KAPPA_BOUND:.0f} under LayerNorm or under RMSNorm in every seed; or "
        f"the un-normed model's end loss at the stress rate lies within {STABLE_MARGIN} nats of "
        "a normed model's, or below it (whole 95% interval)."),
    thresholds=(
        _bound("layernorm", "tuned", "its tuned rate", ("layernorm's tuned rate inside the grid",)),
        _bound("rmsnorm", "tuned", "its tuned rate", ("rmsnorm's tuned rate inside the grid",)),
        Threshold.beyond("end loss at the stress rate: none − layernorm", arm="none",
                         metric="end_loss_stress", baseline="layernorm", margin=STABLE_MARGIN,
                         unit="nats", needs=()),
        Threshold.beyond("end loss at the stress rate: none − rmsnorm", arm="none",
                         metric="end_loss_stress", baseline="rmsnorm", margin=STABLE_MARGIN,
                         unit="nats", needs=()),
        _edge_control("layernorm"),
        _edge_control("rmsnorm"),
    ),
    extensions=(
        Extension("is it the norm?",
                  "Without a norm, at its own tuned rate, is the largest κ_eff of the "
                  "projection inputs at least twice the normed model's (log₁₀ difference "
                  "beyond log₁₀ 2)?",
                  (*(Threshold.beyond(f"log10 κ_max at the tuned rates: none − {arm}",
                                      arm="none", metric="log10_kappa_tuned", baseline=arm,
                                      margin=NORM_MARGIN, unit="decades (log10 κ_eff)")
                     for arm in ("layernorm", "rmsnorm")),
                   *(_edge_control(arm) for arm in NORMS))),
        Extension("bounded where it stabilizes?",
                  "At the stress rate, where the norms are to stabilize training, do the "
                  f"normalized inputs still stay below K = {KAPPA_BOUND:.0f}?",
                  tuple(_bound(arm, "stress", "the stress rate", ())
                        for arm in ("layernorm", "rmsnorm"))),
    ),
    tuning_seeds=(TUNE_SEED,),
    axes=(axes.scale(models.TRAINED["gpt"]),),
    bits_metric=("layernorm", "end_loss_tuned"),
    version=2,
    revisions=("v2: the trained regime of issue 38: every arm from scratch at 20 tokens per "
               "parameter, registered on micro-20 (a mini-20 run would pass half an hour on 2 "
               "idle cores; v1: nano, 200 steps of 16 × 32 tokens, 3 per parameter), scale "
               "over pico-20, micro-20, mini-20 at 20 each; the edge rule (a tuned rate at a "
               "grid edge extends it one step, once; still there fails its arm's control); "
               "thresholds and margins unchanged; the hypothesis names the size it is read at",),
    anchors=(
        Anchor("pre-LN transformer", "trains without warm-up; post-LN needs it (gradients at "
               "the output layer grow with depth)", "Xiong et al. 2020, On Layer Normalization "
               "in the Transformer Architecture"),
        Anchor("normalization replaced by an element-wise tanh", "matches LayerNorm models "
               "(Dynamic Tanh, DyT)", "Zhu et al. 2025, Transformers without Normalization"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
