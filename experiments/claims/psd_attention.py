"""Claim `psd-attention`: kernel attention with a guaranteed PSD Gram matrix, and its price.

    python -m experiments claim psd-attention [--quick]

**Clauses** (the headline is their conjunction). ① *Guaranteed mathematical properties*: with
keys tied to the query projection (`Config.qk_tied`, `K = X W_Q`) the kernel matrix of softmax
(`exp(Q Qᵀ/√dh)`, Schur product theorem), of the Gaussian (`rbf`) and of elu+1 linear attention
(`Φ Φᵀ`) is symmetric PSD for every input: settled by proof (`THEOREM`), verified exactly on the
trained models: every kernel matrix the chosen variant forms on 4 test windows of each seed,
rebuilt in float64 from its sown queries, passes `analysis.psd_certificate`
(`lab.tied_kernels`). ② *Kernel-aware attention variants*, usable as attention (could come out
either way): the paired `loss_psd / loss_softmax − 1` of the test-split stdlib loss, `psd` being
the tied variant (`softmax-tied`, `rbf-tied`, `linear-tied`) with the lowest mean loss on the
tuning seeds at its tuned rate, lies below **3% of untied softmax's loss** (v1's margin), refuted
above. **Extension**: copy exact match, chosen variant − softmax, at most 10 points below
(control: softmax learns copy, exact match ≥ 0.5).

**Protocol.** Every arm trains from scratch at the shape of `Sizes.model` with AdamW at a
constant rate (`attention_arms.make_tx`). Its rate is chosen on tuning seeds 110 and 111 (mean
`val` loss) from 0.25, 0.5, 1, 2 × the recipe peak `3e-3 · 64 / d`, the same grid for every
arm; a best rate at an edge extends the grid one step, up to twice; a rate still at an edge
fails the control `rates_at_edge == 0` (blocks ②). Then softmax and the chosen variant train
on seeds 10–14: stdlib at 20 tokens per parameter (the recipe's steps of 16 × 128 tokens), copy
for 1,000 steps at the arm's stdlib rate; losses and exact match read on the `test` split.
`--quick` (`mini`, 30 steps, one rate, `softmax-tied` taken as chosen): indicative only.
Registered at `micro-20` (d 32, L 2, H 4; 409 steps). **Scale axis**: GPT `pico-20`,
`micro-20`, `mini-20`, the whole protocol per size. The Llama family is left out: tied keys
need `n_kv_heads == n_heads`, which is not the family's model.

v2 (2026-12-05): the trained regime (issue 38); v1 ran `mini` at 0.77 tokens/param.
v3 (2026-12-07, before any run of v3; issue 47): the sentence split into clauses ① (proof,
verified on the trained kernels) and ②; fresh seeds 10–14 and tuning seeds 110, 111 (v1, v2:
0–4 and 100); verdicts on the `test` split (`Sizes.split`; v2 read `val`); the edge rule may
extend twice (v2: once). Margins, grid, arms and extension unchanged.
Tests: tests/experiments/claims/test_psd_attention.py, tests/experiments/lab/test_tied_kernels.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import transformer
from experiments import models
from experiments.lab.attention_arms import train_arm, tune_rate, within
from experiments.lab.tied_kernels import certificate
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision

ARMS = {"softmax": {}, "softmax-tied": dict(qk_tied=True),
        "rbf-tied": dict(attention="rbf", qk_tied=True),
        "linear-tied": dict(attention="linear", qk_tied=True)}
TIED = ("softmax-tied", "rbf-tied", "linear-tied")
CHOSEN = "psd"  # the arm holding the tied variant chosen on the tuning seed
UNTUNED_CHOICE = "softmax-tied"  # the choice when nothing is tuned (quick runs)
SEEDS = (10, 11, 12, 13, 14)  # v3: no earlier version ran on them (v1, v2: 0-4)
TUNE_SEEDS = (110, 111)  # v3 (v1, v2: 100)
COPY_STEPS = 1000  # seed 100, micro-20, batch 16: softmax copies (EM >= 0.98) at 1.5e-3 to 6e-3
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0)  # times the shape's recipe peak rate; ratio 2, frozen
LOSS_MARGIN = 0.03  # 3% of softmax's loss
EM_MARGIN = 0.1  # 10 points of exact match
LOSS = "stdlib loss of the chosen PSD variant / softmax's − 1"
PSD = "the chosen variant's trained kernel matrices are symmetric PSD in float64"
EDGE = "every arm's tuned rate inside its grid (arms at an edge)"


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
    kernel_batch: test windows (of `seq_len`) whose kernel matrices are certified per seed.
    split: where the reported runs are read (`val` in v2; `test` from v3); tuning reads `val`.
  """

  model: str
  steps: int | None
  copy_steps: int
  batch_size: int
  seq_len: int
  rate_factors: tuple[float, ...]
  extend: int
  exact_match_batches: int
  kernel_batch: int = 4
  split: str = "val"

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
                          rate_factors=(1.0,), extend=0, exact_match_batches=4, split="test")
FULL = PsdAttentionSizes(model="micro-20", steps=None, copy_steps=COPY_STEPS, batch_size=16,
                         seq_len=128, rate_factors=RATE_FACTORS, extend=2,
                         exact_match_batches=4, split="test")


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


def kernel_metrics(params, cfg: transformer.Config, z: PsdAttentionSizes, seed: int) -> dict:
  """The certificate of a trained model's kernel matrices on `z.kernel_batch` windows of
  `z.split` (`lab.tied_kernels.certificate`): `psd_exact`, `min_eig_rel`, `asymmetry`."""
  return certificate(params, cfg, models.val_tokens(z.seq_len, z.kernel_batch, seed,
                                                    split=z.split))


def run(spec: Spec) -> dict:
  """Tunes every arm, chooses the tied variant, trains it and softmax; see the docstring."""
  z = spec.sizes
  steps, batch_size, seq_len = z.train_steps, z.batch_size, z.seq_len
  base = arm_config(z.model, "softmax")
  tuned = len(z.rates) > 1
  rate = {}
  for arm in ARMS:
    if tuned:
      spec.log(f"  psd-attention: {arm}: tuning on stdlib, seeds {TUNE_SEEDS}")
    rate[arm] = tune_rate(arm_config(z.model, arm), tuning_seeds=TUNE_SEEDS, grid=z.rates,
                          extend=z.extend, data="stdlib", steps=steps, batch_size=batch_size,
                          seq_len=seq_len)
  chosen = choose({a: (min(rate[a]["losses"]) if rate[a]["losses"] else None) for a in TIED})
  at_edge = [a for a, r in rate.items() if r["at_edge"]]
  runs: dict = {}
  for arm in ("softmax", chosen):
    cfg, lr = arm_config(z.model, arm), rate[arm]["learning_rate"]
    spec.log(f"  psd-attention: {arm}: stdlib at {lr:g}")
    text = train_arm(cfg, spec.seeds, data="stdlib", steps=steps, batch_size=batch_size,
                     seq_len=seq_len, learning_rates=(lr,), split=z.split)
    spec.log(f"  psd-attention: {arm}: copy at {lr:g}")
    copy = train_arm(cfg, spec.seeds, data="task:copy", steps=z.copy_steps,
                     batch_size=batch_size, seq_len=seq_len, learning_rates=(lr,),
                     exact_match=True, em_batches=z.exact_match_batches, split=z.split)
    runs[arm] = {s: {"loss": text["per_seed"][s]["loss"],
                     "diverged": text["per_seed"][s]["diverged"],
                     "copy_loss": copy["per_seed"][s]["loss"],
                     "exact_match": copy["per_seed"][s]["exact_match"],
                     **kernel_metrics(text["params"][s], cfg, z, s)} for s in spec.seeds}
  p = price(runs[chosen], runs["softmax"])
  runs[CHOSEN] = {s: {**runs[chosen][s], **p[s], "rates_at_edge": float(len(at_edge))}
                  for s in spec.seeds}
  del runs[chosen]  # reported once, under the arm the thresholds name

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  def min_of(arm, k):
    return float(np.min([runs[arm][s][k] for s in spec.seeds]))

  def max_of(arm, k):
    return float(np.max([runs[arm][s][k] for s in spec.seeds]))

  tuning_loss = {a: min(r["losses"]) for a, r in rate.items() if r["losses"]}
  why = (f"lowest mean stdlib loss on tuning seeds {TUNE_SEEDS} at its tuned rate: " + ", ".join(
      f"{a} {tuning_loss[a]:.4f}" for a in TIED) if tuned
      else "not tuned (quick): the direct tied form of softmax")
  notes = [
      f"Chosen guaranteed-PSD variant (arm `{CHOSEN}`): **{chosen}** ({why}).",
      f"Its cost, mean over seeds: stdlib loss {mean(CHOSEN, 'loss'):.4f} vs softmax "
      f"{mean('softmax', 'loss'):.4f} nats/byte, {mean(CHOSEN, 'loss_ratio'):+.2%} of "
      f"softmax's loss (margin {LOSS_MARGIN:.0%}); copy exact match "
      f"{mean(CHOSEN, 'exact_match'):.2f} vs {mean('softmax', 'exact_match'):.2f} "
      f"(margin {EM_MARGIN * 100:.0f} points).",
      ("On the tuning seeds alone (not a verdict), every variant's mean stdlib loss "
       "against softmax's " + f"{tuning_loss['softmax']:.4f}: " + ", ".join(
           f"{a} {tuning_loss[a] / tuning_loss['softmax'] - 1:+.2%}" for a in TIED) + "."
       if tuned else "Quick: no tuning run, so no variant but the chosen one is trained."),
      f"Kernel certificate (float64, {z.kernel_batch} {z.split} windows of {seq_len} per "
      f"seed, every layer and head): chosen variant {mean(CHOSEN, 'psd_exact'):.0%} of its "
      f"matrices symmetric PSD (least λ_min/λ_max {min_of(CHOSEN, 'min_eig_rel'):.2e}); "
      f"untied softmax {mean('softmax', 'psd_exact'):.0%} (largest asymmetry "
      f"‖K − Kᵀ‖/‖K‖ {max_of('softmax', 'asymmetry'):.2e}: no guarantee).",
      {"tuned": rate, "read": f"mean stdlib validation loss on tuning seeds {TUNE_SEEDS}, the same "
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
                    "tuning_seeds": list(TUNE_SEEDS), "model_config": base.to_dict()},
          "runs": runs, "notes": notes, "split": z.split,
          "effects": [(f"{CHOSEN} − softmax: stdlib loss", CHOSEN, "softmax", "loss"),
                      (f"{CHOSEN} − softmax: copy exact match", CHOSEN, "softmax",
                       "exact_match")]}


THEOREM = ("With tied keys K = Q = X W_Q, each variant's kernel matrix over any input is "
           "symmetric PSD: softmax-tied's G = Q Qᵀ/√dh is a Gram matrix and exp∘G = Σ_n G^{∘n}/n! "
           "is PSD by the Schur product theorem; rbf-tied's exp(−‖q_t − q_s‖²/(2√dh)) is a "
           "Gaussian kernel, PSD for any points (Bochner); linear-tied's Φ(Q) Φ(Q)ᵀ with "
           "Φ = elu + 1 is a Gram matrix. Untied (W_K ≠ W_Q) the softmax kernel is generically "
           "not symmetric. tests/experiments/claims/test_psd_attention.py checks all four in "
           "float64 on random instances and on the kernels the library's tied model forms; "
           "tests/experiments/lab/test_tied_kernels.py checks the certificate the run applies "
           "to every trained model.")

CLAIM = Claim(
    id="psd-attention",
    topic="positive definiteness",
    kind="new",
    preface="Kernel-aware attention variants with guaranteed mathematical properties",
    theorem=THEOREM,
    hypothesis=("① With tied keys every kernel matrix the chosen variant forms is symmetric "
                "PSD (proof; verified in float64 on the trained models of every seed). ② The "
                "guaranteed-PSD variant chosen on the tuning seeds (of tied softmax, RBF and "
                f"elu+1 linear) costs less than {LOSS_MARGIN:.0%} of untied softmax's "
                "test-split stdlib loss: the 95% interval of the paired loss ratio lies below "
                f"+{LOSS_MARGIN:.0%} (micro-20 shape at 20 tokens per parameter, seeds 10–14, "
                "rates tuned on seeds 110 and 111). Copying is measured apart (an extension)."),
    refuted_if=("Any seed's chosen variant forms a kernel matrix that is not symmetric PSD in "
                f"float64 (①), or the 95% interval of its paired loss ratio lies above "
                f"+{LOSS_MARGIN:.0%} (②)."),
    thresholds=(
        Threshold(LOSS, arm=CHOSEN, metric="loss_ratio", unit="fraction of softmax's loss",
                  needs=(EDGE,), **within(LOSS_MARGIN)),
        Threshold(PSD, arm=CHOSEN, metric="psd_exact", stat="range", supports="== 1",
                  refutes="< 1", needs=(), unit="fraction of kernel matrices certified"),
        Threshold(EDGE, arm=CHOSEN, metric="rates_at_edge", stat="range", supports="== 0",
                  control=True, unit="arms"),
    ),
    clauses=(
        Clause("with guaranteed mathematical properties: with tied keys every kernel matrix "
               "is symmetric PSD", (PSD,),
               proof="Gram matrix, Schur product theorem (softmax), Bochner (Gaussian), "
                     "Φ Φᵀ (elu+1): symmetric PSD for every input; see the theorem"),
        Clause(f"kernel-aware attention variants, usable as attention: the chosen one costs "
               f"less than {LOSS_MARGIN:.0%} of softmax's loss", (LOSS,)),
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
    seeds=SEEDS,
    tuning_seeds=TUNE_SEEDS,
    axes=(axes.scale(models.TRAINED["gpt"]),),
    bits_metric=("softmax", "loss"),
    key=LOSS,
    version=3,
    revisions=("v2: the trained regime of issue 38 (micro-20 at 20 tokens per parameter, "
               "scale over pico-20, micro-20, mini-20 at the same ratio; v1: mini at 0.77), a "
               "4-rate grid per width with the edge rule and its control (v1: {1e-3, 3e-3}), "
               "copy at batch 16, and the headline and copy extension named for what they "
               "measure (item 6); the 3% and 10-point margins unchanged",
               Revision(3, "protocol",
                        "issue 47, registered before any run of v3: the sentence split into "
                        "two clauses, ① guaranteed properties (proof; verified in float64 on "
                        "every trained kernel matrix of the chosen variant, a new threshold) "
                        "and ② the loss price (v2's primary, 3% margin); fresh seeds 10-14 and "
                        "tuning seeds 110, 111 (v1, v2: 0-4 and 100), the rate chosen on their "
                        "mean; reported losses and exact match read on the test split (v2: "
                        "val); the edge rule may extend twice (v2: once). Arms, grid, margins "
                        "and the copy extension unchanged")),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
