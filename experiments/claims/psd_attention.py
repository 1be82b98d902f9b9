"""Claim `psd-attention`: how much loss does attention with a guaranteed PSD kernel cost?

    python -m experiments claim psd-attention [--quick]

**Question.** The preface's "kernel-aware attention variants with guaranteed mathematical
properties": with keys tied to the query projection (`Config.qk_tied`, `K = X W_Q`) the kernel
matrix of softmax (`exp(Q Qᵀ/√dh)`, Schur product theorem), of the Gaussian (`rbf`) and of
elu+1 linear attention (`Φ Φᵀ`) is symmetric PSD for every input (the `theorem`). What could
come out either way: **how much language-modelling loss does the best such variant cost against
untied softmax attention?** Operationalised as the paired `loss_psd / loss_softmax − 1` of the
held-out stdlib loss, `psd` being the tied variant (`softmax-tied`, `rbf-tied`, `linear-tied`)
with the lowest loss on tuning seed 100 at its tuned rate, so reported seeds choose nothing.
Supported when the whole 95% interval lies below **3% of softmax's loss** (v1's margin, kept:
a dearer variant is not one to trade for a guarantee); refuted when it lies above.

**Extension** (own verdict), named for what it measures: *copy exact match, chosen variant −
softmax* on the `copy` task (16 symbols, then their copy; `data.exact_match`, held-out
batches): at most 10 points below? Control: softmax learns copy (exact match ≥ 0.5).

**Protocol.** Every arm trains from scratch at the shape of `Sizes.model` with AdamW at a
constant rate (`attention_arms.make_tx`). Its rate is chosen on seed 100 from `rate_factors`
times the shape's recipe peak `3e-3 · 64 / d` (ratio 2) by the held-out stdlib loss; a best
rate at an edge extends the grid one step, once (`tune_rate(extend=1)`); a rate of any arm
still at an edge fails the control `rates_at_edge == 0` and the verdict is unread. Then
softmax and the chosen variant train on seeds 0–4: stdlib at 20 tokens per parameter
(`steps=None`: the recipe's steps of 16 × 128 tokens), copy for `copy_steps` at the arm's
stdlib rate. `--quick` (`mini`, 30 steps, one rate, `softmax-tied` taken as chosen) tunes
nothing: indicative only. Registered at `micro-20` (d 32, L 2, H 4; 409 steps): a run
registered at `mini-20` (1,298 steps) with its scale axis was estimated at ≈ 35 min on the
idle 2 cores (step times measured at load 7, divided by 3.5), over the 30-min budget.

**Scale axis**: the GPT family's trained sizes `pico-20`, `micro-20`, `mini-20`, each at 20
tokens per parameter, the whole protocol per size (rates and variant chosen again). The Llama
family is left out: tied keys need `n_kv_heads == n_heads` (keeping K = H/2 of the query
projections scores other heads' queries, not a symmetric kernel), and H key/value heads would
not be the family's model.

v2 (2026-12-05, before the run): the trained regime (v1: `mini` at 0.77 tokens/param, 200
steps of 8 × 64, rates {1e-3, 3e-3}); the edge rule and its control; copy at batch 16; the
headline and extension worded for what they measure (issue 38; v1's extension was refuted).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import transformer
from experiments import models
from experiments.lab.attention_arms import train_arm, tune_rate, within
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes

ARMS = {"softmax": {}, "softmax-tied": dict(qk_tied=True),
        "rbf-tied": dict(attention="rbf", qk_tied=True),
        "linear-tied": dict(attention="linear", qk_tied=True)}
TIED = ("softmax-tied", "rbf-tied", "linear-tied")
CHOSEN = "psd"  # the arm holding the tied variant chosen on the tuning seed
UNTUNED_CHOICE = "softmax-tied"  # the choice when nothing is tuned (quick runs)
TUNE_SEED = 100
COPY_STEPS = 1000  # seed 100, micro-20, batch 16: softmax copies (EM >= 0.98) at 1.5e-3 to 6e-3
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0)  # times the shape's recipe peak rate; ratio 2, frozen
LOSS_MARGIN = 0.03  # 3% of softmax's loss
EM_MARGIN = 0.1  # 10 points of exact match


@dataclasses.dataclass(frozen=True)
class PsdAttentionSizes(TrainedSizes):
  """What a run of `psd-attention` reads about its size.

  Attributes:
    model: the shared model (`experiments.models.RECIPES`) whose shape every arm is trained
      at from scratch, with the arm's attention (`arm_config`).
    steps: AdamW steps per stdlib run (tuning and reported); None: the steps of `model`'s
      recipe, which trains it at `models.TOKENS_PER_PARAM` tokens per parameter (so the scale
      axis, which replaces `model`, keeps the ratio at every size).
    copy_steps: AdamW steps per copy run.
    batch_size: training windows per step (and sequences per exact-match batch).
    seq_len: the stdlib window length.
    rate_factors: the grid every arm's rate is chosen from on the tuning seed, as multiples of
      `model`'s recipe peak rate (one factor: nothing is tuned).
    extend: how many rates tuning may add beyond a winning edge of the grid (`tune_rate`).
    exact_match_batches: held-out copy batches the exact match is averaged over.
  """

  model: str
  steps: int | None
  copy_steps: int
  batch_size: int
  seq_len: int
  rate_factors: tuple[float, ...]
  extend: int
  exact_match_batches: int

  def __post_init__(self):
    if self.model not in models.RECIPES:
      raise ValueError(f"PsdAttentionSizes.model={self.model!r} has no recipe. Fix: one of "
                       f"experiments.models.RECIPES: {sorted(models.RECIPES)}.")
    r = models.RECIPES[self.model]
    if self.steps is None and (self.batch_size, self.seq_len) != (r.batch_size, r.seq_len):
      raise ValueError(f"PsdAttentionSizes: steps=None trains {self.model!r}'s recipe steps, "
                       f"which count batches of {r.batch_size} × {r.seq_len}, not "
                       f"{self.batch_size} × {self.seq_len}. Fix: use those, or give steps.")

  @property
  def train_steps(self) -> int:
    """`steps`, or (None) the steps of `model`'s recipe."""
    return models.RECIPES[self.model].steps if self.steps is None else self.steps

  @property
  def rates(self) -> tuple[float, ...]:
    """The rate grid: `rate_factors` times `model`'s recipe peak rate."""
    return tuple(f * models.RECIPES[self.model].learning_rate for f in self.rate_factors)

  def train_tokens(self) -> int:
    return self.train_steps * self.batch_size * self.seq_len


QUICK = PsdAttentionSizes(model="mini", steps=30, copy_steps=30, batch_size=8, seq_len=64,
                          rate_factors=(1.0,), extend=0, exact_match_batches=4)
FULL = PsdAttentionSizes(model="micro-20", steps=None, copy_steps=COPY_STEPS, batch_size=16,
                         seq_len=128, rate_factors=RATE_FACTORS, extend=1,
                         exact_match_batches=4)


def arm_config(model: str, arm: str) -> transformer.Config:
  """Arm `arm`'s model at the shape of the shared model `model`: its config with `ARMS[arm]`.

  Example:
    >>> from experiments.claims.psd_attention import arm_config
    >>> cfg = arm_config("small", "rbf-tied")
    >>> cfg.d_model, cfg.n_layers, cfg.attention, cfg.qk_tied
    (128, 4, 'rbf', True)
  """
  return models.RECIPES[model].cfg.replace(**ARMS[arm])


def price(per_seed_arm: dict, per_seed_base: dict) -> dict:
  """Per seed: `loss_ratio = loss_arm / loss_base − 1` and `em_diff = em_arm − em_base`."""
  out = {}
  for seed, m in per_seed_arm.items():
    b = per_seed_base[seed]
    out[seed] = {"loss_ratio": m["loss"] / b["loss"] - 1}
    if "exact_match" in m:
      out[seed]["em_diff"] = m["exact_match"] - b["exact_match"]
  return out


def choose(tuning_loss: dict[str, float | None]) -> str:
  """The tied variant with the lowest tuning-seed loss; `UNTUNED_CHOICE` when none was tuned.

  Example:
    >>> from experiments.claims.psd_attention import choose
    >>> choose({"softmax-tied": 2.1, "rbf-tied": 2.0, "linear-tied": 2.3})
    'rbf-tied'
    >>> choose({"softmax-tied": None, "rbf-tied": None, "linear-tied": None})
    'softmax-tied'
  """
  tuned = {a: v for a, v in tuning_loss.items() if v is not None and np.isfinite(v)}
  return min(tuned, key=tuned.get) if tuned else UNTUNED_CHOICE


def run(spec: Spec) -> dict:
  """Tunes every arm, chooses the tied variant, trains it and softmax; see the docstring."""
  z = spec.sizes
  steps, batch_size, seq_len = z.train_steps, z.batch_size, z.seq_len
  base = arm_config(z.model, "softmax")
  tuned = len(z.rates) > 1
  rate = {}
  for arm in ARMS:
    if tuned:
      spec.log(f"  psd-attention: {arm}: tuning on stdlib, seed {TUNE_SEED}")
    rate[arm] = tune_rate(arm_config(z.model, arm), tuning_seeds=(TUNE_SEED,), grid=z.rates,
                          extend=z.extend, data="stdlib", steps=steps, batch_size=batch_size,
                          seq_len=seq_len)
  chosen = choose({a: (min(rate[a]["losses"]) if rate[a]["losses"] else None) for a in TIED})
  at_edge = [a for a, r in rate.items() if r["at_edge"]]
  runs: dict = {}
  for arm in ("softmax", chosen):
    cfg, lr = arm_config(z.model, arm), rate[arm]["learning_rate"]
    spec.log(f"  psd-attention: {arm}: stdlib at {lr:g}")
    text = train_arm(cfg, spec.seeds, data="stdlib", steps=steps, batch_size=batch_size,
                     seq_len=seq_len, learning_rates=(lr,))
    spec.log(f"  psd-attention: {arm}: copy at {lr:g}")
    copy = train_arm(cfg, spec.seeds, data="task:copy", steps=z.copy_steps,
                     batch_size=batch_size, seq_len=seq_len, learning_rates=(lr,),
                     exact_match=True, em_batches=z.exact_match_batches)
    runs[arm] = {s: {"loss": text["per_seed"][s]["loss"],
                     "diverged": text["per_seed"][s]["diverged"],
                     "copy_loss": copy["per_seed"][s]["loss"],
                     "exact_match": copy["per_seed"][s]["exact_match"]} for s in spec.seeds}
  p = price(runs[chosen], runs["softmax"])
  runs[CHOSEN] = {s: {**runs[chosen][s], **p[s], "rates_at_edge": float(len(at_edge))}
                  for s in spec.seeds}
  del runs[chosen]  # reported once, under the arm the thresholds name

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  tuning_loss = {a: min(r["losses"]) for a, r in rate.items() if r["losses"]}
  why = (f"lowest stdlib loss on tuning seed {TUNE_SEED} at its tuned rate: " + ", ".join(
      f"{a} {tuning_loss[a]:.4f}" for a in TIED) if tuned
      else "not tuned (quick): the direct tied form of softmax")
  notes = [
      f"Chosen guaranteed-PSD variant (arm `{CHOSEN}`): **{chosen}** ({why}).",
      f"Its cost, mean over seeds: stdlib loss {mean(CHOSEN, 'loss'):.4f} vs softmax "
      f"{mean('softmax', 'loss'):.4f} nats/byte, {mean(CHOSEN, 'loss_ratio'):+.2%} of "
      f"softmax's loss (margin {LOSS_MARGIN:.0%}); copy exact match "
      f"{mean(CHOSEN, 'exact_match'):.2f} vs {mean('softmax', 'exact_match'):.2f} "
      f"(margin {EM_MARGIN * 100:.0f} points).",
      ("On the tuning seed alone (one seed, not a verdict), every variant's stdlib loss "
       "against softmax's " + f"{tuning_loss['softmax']:.4f}: " + ", ".join(
           f"{a} {tuning_loss[a] / tuning_loss['softmax'] - 1:+.2%}" for a in TIED) + "."
       if tuned else "Quick: no tuning run, so no variant but the chosen one is trained."),
      {"tuned": rate, "read": f"stdlib validation loss on tuning seed {TUNE_SEED}, the same "
                              f"rate on copy; {list(z.rate_factors)} × the recipe's "
                              f"{models.RECIPES[z.model].learning_rate:g}, extended up to "
                              f"{z.extend} step past a winning edge"},
      *([f"Still at an edge: {', '.join(at_edge)}, so the control fails."] if at_edge else []),
      f"Models: the `{z.model}` shape from scratch (d {base.d_model}, L {base.n_layers}, "
      f"H {base.n_heads}, {models.param_count(z.model):,} parameters untied); stdlib: {steps} "
      f"AdamW steps, batch {batch_size} windows of {seq_len} tokens "
      f"({steps * batch_size * seq_len / models.param_count(z.model):.1f} tokens per "
      f"parameter); copy (16 symbols then their copy): {z.copy_steps} steps of {batch_size}.",
  ]
  return {"setup": {"arms": {a: dict(o) for a, o in ARMS.items()}, "chosen": chosen,
                    "chosen_lr": {a: r["learning_rate"] for a, r in rate.items()},
                    "tuning": rate,
                    "tune_seed": TUNE_SEED, "model_config": base.to_dict()},
          "runs": runs, "notes": notes,
          "effects": [(f"{CHOSEN} − softmax: stdlib loss", CHOSEN, "softmax", "loss"),
                      (f"{CHOSEN} − softmax: copy exact match", CHOSEN, "softmax",
                       "exact_match")]}


THEOREM = ("With tied keys K = Q = X W_Q, each variant's kernel matrix over any input is "
           "symmetric PSD: softmax-tied's G = Q Qᵀ/√dh is a Gram matrix and exp∘G = Σ_n G^{∘n}/n! "
           "is PSD by the Schur product theorem; rbf-tied's exp(−‖q_t − q_s‖²/(2√dh)) is a "
           "Gaussian kernel, PSD for any points (Bochner); linear-tied's Φ(Q) Φ(Q)ᵀ with "
           "Φ = elu + 1 is a Gram matrix. Untied (W_K ≠ W_Q) the softmax kernel is generically "
           "not symmetric. tests/experiments/test_claims_attention.py checks all four in float64 "
           "on random instances, and on the kernels the library's tied model forms.")

CLAIM = Claim(
    id="psd-attention",
    topic="positive definiteness",
    kind="new",
    preface="Kernel-aware attention variants with guaranteed mathematical properties",
    theorem=THEOREM,
    hypothesis=("The guaranteed-PSD attention variant chosen on the tuning seed (of tied "
                "softmax, RBF and elu+1 linear) costs less than "
                f"{LOSS_MARGIN:.0%} of untied softmax's held-out language-modelling loss on "
                "the stdlib corpus: the 95% interval of the paired loss ratio lies below "
                f"+{LOSS_MARGIN:.0%} (micro-20 shape at 20 tokens per parameter, seeds 0–4, "
                "rates tuned on seed 100). Copying is measured apart (an extension)."),
    refuted_if=(f"The 95% interval of the chosen variant's paired loss ratio lies above "
                f"+{LOSS_MARGIN:.0%}."),
    thresholds=(
        Threshold("stdlib loss of the chosen PSD variant / softmax's − 1", arm=CHOSEN,
                  metric="loss_ratio", unit="fraction of softmax's loss",
                  **within(LOSS_MARGIN)),
        Threshold("every arm's tuned rate inside its grid (arms at an edge)", arm=CHOSEN,
                  metric="rates_at_edge", stat="range", supports="== 0", control=True,
                  unit="arms"),
    ),
    extensions=(
        Extension("copy exact match, chosen PSD variant − softmax",
                  f"On the copy task, is the chosen variant's exact match at most "
                  f"{EM_MARGIN * 100:.0f} points below softmax's?",
                  (Threshold("copy exact match: chosen PSD variant − softmax", arm=CHOSEN,
                             metric="em_diff", unit="fraction of sequences",
                             **within(EM_MARGIN, ">")),
                   Threshold("untied softmax learns copy (exact match)", arm="softmax",
                             metric="exact_match", supports=">= 0.5", control=True,
                             unit="fraction of sequences"))),
    ),
    anchors=(
        Anchor("Long Range Arena average, vanilla softmax Transformer", 54.39,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("Long Range Arena average, Performer (positive random features)", 51.41,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("Long Range Arena average, Linear Transformer (elu+1 features)", 50.55,
               "Tay et al. 2021, Long Range Arena, Table 1"),
    ),
    tuning_seeds=(TUNE_SEED,),
    axes=(axes.scale(models.TRAINED["gpt"]),),
    bits_metric=("softmax", "loss"),
    version=2,
    revisions=("v2: the trained regime of issue 38 (micro-20 at 20 tokens per parameter, "
               "scale over pico-20, micro-20, mini-20 at the same ratio; v1: mini at 0.77), a "
               "4-rate grid per width with the edge rule and its control (v1: {1e-3, 3e-3}), "
               "copy at batch 16, and the headline and copy extension named for what they "
               "measure (item 6); the 3% and 10-point margins unchanged",),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
