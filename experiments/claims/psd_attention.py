"""Claim `psd-attention`: what does attention with a guaranteed PSD kernel cost?

    python -m experiments claim psd-attention [--quick]

**The preface's question.** "Kernel-aware attention variants with guaranteed mathematical
properties": the guarantee itself is mathematics (the `theorem`): when keys use the query
projection (`Config.qk_tied`, `K = X W_Q`) the kernel matrix of softmax (`exp(Q Qᵀ/√dh)`,
Schur product theorem), of the Gaussian (`rbf`) and of elu+1 linear attention (`Φ Φᵀ`) is
symmetric positive semi-definite for every input. What could come out either way is whether
such a variant is still a usable attention: **does the guaranteed-PSD variant cost little
language-modelling loss against ordinary (untied) softmax attention?** Operationalised as the
paired cost `loss_psd / loss_softmax − 1` on the stdlib corpus, where `psd` is the tied
variant chosen *before* the reported runs: the one of `softmax-tied`, `rbf-tied`,
`linear-tied` with the lowest validation loss on tuning seed 100 (at its tuned rate). A
practitioner picks the best variant of a family; picking it on the tuning seed keeps the
reported seeds out of the choice. Supported when the whole 95% interval lies below a margin
of **3% of softmax's loss** (the budget registered before the first run and kept: a variant
dearer than that is not one a practitioner would trade for a guarantee); refuted when it
lies above it. What would have refuted it: the best guaranteed variant costing more than 3%
of the loss.

**Extension** (its own verdict, never the headline): *copying survives the guarantee*: on
the `copy` task (16 symbols, then their copy), the chosen variant's exact match (every copied
token right, `experiments.data.exact_match`, on held-out batches) is at most 10 points below
softmax's (one sequence in ten). Control: untied softmax learns copy (exact match ≥ 0.5), or
the comparison reads nothing; it blocks only this extension.

Rates: every arm's rate is chosen from `{1e-3, 3e-3}` by its stdlib validation loss on tuning
seed 100 (the same rate is used on copy); those four tuning runs also choose the variant. Then
only softmax and the chosen variant are trained on seeds 0–4 (the tuning seed's losses of the
other variants are reported in the notes, one seed, not a verdict: training all four on the
reported seeds does not fit the 4-minute budget). On seed 100, softmax learned copy in 300
steps at batch 8 (exact match 1.0 at both rates), so the copy control can pass.
`--quick` (one seed, one rate 3e-3, 30 steps) tunes nothing and takes `softmax-tied` as the
chosen variant, so its verdict is indicative only.

Full run: 4 arms × 2 rates tuned on seed 100 (200 steps, stdlib windows of 64, batch 8), then
softmax and the chosen variant on seeds 0–4: stdlib 200 steps and copy 300 steps, each arm
trained from scratch at the `mini` shape (the `tiny` preset: d 64, L 2, H 4; `Sizes.model`).

**Scale axis** (`scale_models`: the GPT family's `micro`, `mini`, `small`, 42k–859k
parameters; the verdict is read at `mini`, the registered size, which trains exactly the
model of the registered results). Each other size reruns the whole protocol at that shape:
its own rates and its own variant chosen on seed 100, then softmax and that variant on
seeds 0–4; only the shape changes (`arm_config`). The Llama family is left out: its sizes
use grouped-query attention (K = H/2 key/value heads), and tied keys have no meaning there.
`K = X W_Q` has H heads; keeping K of them would make all but one query head per group score
another head's queries, a kernel `exp(q_h q_h'ᵀ/√dh)` that is not symmetric, so not PSD (the
model refuses `qk_tied` unless `n_kv_heads == n_heads`). Giving the Llama arms H key/value heads
would train a model that is not the family's (its `model_card` parameter count would be
wrong) and would take grouped-query attention away from the baseline. RoPE alone would not
be a problem: it rotates the tied query and key at a position by the same `R_t`, so the
kernel is still the Gram matrix of the rotated queries.

Cost, an **estimate** (steps × step time measured at load ≈ 5 on the 2 shared cores; one step
of 5 vmapped runs, batch 8 × 64: `micro` 0.08 s, `mini` 0.15 s, `small` 0.63 s). Per size:
800 tuning steps of 2 runs, 1,000 steps of 5 runs and 8 compilations of ≈ 25–30 s each,
about 5 min at `micro`, 8 min at `mini` (the registered run recorded 587 s) and 17 min at
`small`, so ≈ 30 min for the three. `--quick` runs one size (`mini`), as before and with the
same numbers: 79 s of wall time, 53 s of CPU time at load ≈ 3.4.

Result with the scale axis (git fdb98f9, 1,996 s wall for the three sizes at load 6–8; the
registered `mini` numbers are the committed ones, reproduced exactly): **supported at every
size**. The cost of the guarantee is +0.92% [0.47, 1.37] at `micro` (variant chosen on seed
100: `softmax-tied`), +1.25% [0.48, 2.03] at `mini` (`linear-tied`, the verdict) and +1.43%
[1.08, 1.79] at `small` (`linear-tied`); the slope, +0.16% [−0.03, +0.36] of softmax's loss per
e-fold of parameters, shows no trend at three sizes, though every size's mean sits higher
than the one before. The copy extension (read at `mini`) stays refuted; at `small` too the
linear variant copies nothing while softmax copies everything (exact-match gap −1.0); at
`micro` softmax itself does not learn copy in 300 steps (exact match 0), so there the
control would block it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import transformer
from experiments import models
from experiments.lab.attention_arms import LEARNING_RATES, train_arm, tune_rate, within
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold

ARMS = {"softmax": {}, "softmax-tied": dict(qk_tied=True),
        "rbf-tied": dict(attention="rbf", qk_tied=True),
        "linear-tied": dict(attention="linear", qk_tied=True)}
TIED = ("softmax-tied", "rbf-tied", "linear-tied")
CHOSEN = "psd"  # the arm holding the tied variant chosen on the tuning seed
UNTUNED_CHOICE = "softmax-tied"  # the choice when nothing is tuned (quick runs)
TUNE_SEED = 100
LOSS_MARGIN = 0.03  # 3% of softmax's loss
EM_MARGIN = 0.1  # 10 points of exact match


@dataclasses.dataclass(frozen=True)
class PsdAttentionSizes(Sizes):
  """What a run of `psd-attention` reads about its size.

  Attributes:
    model: the shared model (`experiments.models.RECIPES`) whose shape every arm is trained
      at from scratch, with the arm's attention (`arm_config`); `mini` is the `tiny` preset.
    steps: AdamW steps per stdlib run (tuning and reported).
    copy_steps: AdamW steps per copy run.
    batch_size: training windows per step (and sequences per exact-match batch).
    seq_len: the stdlib window length.
    learning_rates: the grid every arm's rate is chosen from on the tuning seed (one rate:
      nothing is tuned).
    exact_match_batches: held-out copy batches the exact match is averaged over.
  """

  model: str
  steps: int
  copy_steps: int
  batch_size: int
  seq_len: int
  learning_rates: tuple[float, ...]
  exact_match_batches: int


QUICK = PsdAttentionSizes(model="mini", steps=30, copy_steps=30, batch_size=8, seq_len=64,
                          learning_rates=(3e-3,), exact_match_batches=4)
FULL = PsdAttentionSizes(model="mini", steps=200, copy_steps=300, batch_size=8, seq_len=64,
                         learning_rates=LEARNING_RATES, exact_match_batches=4)


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
  steps, batch_size, seq_len = z.steps, z.batch_size, z.seq_len
  base = arm_config(z.model, "softmax")
  tuned = len(z.learning_rates) > 1
  rate = {}
  for arm in ARMS:
    if tuned:
      spec.log(f"  psd-attention: {arm}: tuning on stdlib, seed {TUNE_SEED}")
    rate[arm] = tune_rate(arm_config(z.model, arm), tuning_seeds=(TUNE_SEED,),
                          grid=z.learning_rates, data="stdlib", steps=steps,
                          batch_size=batch_size, seq_len=seq_len)
  chosen = choose({a: (min(rate[a]["tuning"]["val_loss"]) if rate[a]["tuning"] else None)
                   for a in TIED})
  runs: dict = {}
  for arm in ("softmax", chosen):
    cfg, lr = arm_config(z.model, arm), rate[arm]["lr"]
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
  runs[CHOSEN] = {s: {**runs[chosen][s], **p[s]} for s in spec.seeds}
  del runs[chosen]  # reported once, under the arm the thresholds name

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  tuning_loss = {a: min(r["tuning"]["val_loss"]) for a, r in rate.items() if r["tuning"]}
  why = (f"lowest stdlib loss on tuning seed {TUNE_SEED} at its tuned rate: " + ", ".join(
      f"{a} {tuning_loss[a]:.4f}" for a in TIED) if tuned
      else "not tuned (quick): the direct tied form of softmax")
  notes = [
      f"- Chosen guaranteed-PSD variant (arm `{CHOSEN}`): **{chosen}** ({why}).",
      f"- Its price, mean over seeds: stdlib loss {mean(CHOSEN, 'loss'):.4f} vs softmax "
      f"{mean('softmax', 'loss'):.4f} nats, a cost of {mean(CHOSEN, 'loss_ratio'):+.2%} of "
      f"softmax's loss (margin {LOSS_MARGIN:.0%}); copy exact match "
      f"{mean(CHOSEN, 'exact_match'):.2f} vs {mean('softmax', 'exact_match'):.2f} "
      f"(margin {EM_MARGIN * 100:.0f} points).",
      ("- On the tuning seed alone (one seed, not a verdict), every variant's stdlib loss "
       "against softmax's " + f"{tuning_loss['softmax']:.4f}: " + ", ".join(
           f"{a} {tuning_loss[a] / tuning_loss['softmax'] - 1:+.2%}" for a in TIED) + "."
       if tuned else "- Quick: no tuning run, so no variant but the chosen one is trained."),
      (f"- Rates chosen on tuning seed {TUNE_SEED} from {list(z.learning_rates)} (stdlib "
       "validation loss; the same rate on copy): " if tuned else
       "- Not tuned (quick), every arm at: ") + ", ".join(
          f"{a} {r['lr']:g}" for a, r in rate.items()) + ".",
      f"- Models: the `{z.model}` shape from scratch (d {base.d_model}, L {base.n_layers}, "
      f"H {base.n_heads}, {models.param_count(z.model):,} parameters untied); stdlib: {steps} "
      f"AdamW steps, batch {batch_size} windows of {seq_len} tokens; copy (16 symbols then "
      f"their copy): {z.copy_steps} steps.",
  ]
  return {"setup": {"arms": {a: dict(o) for a, o in ARMS.items()}, "chosen": chosen,
                    "chosen_lr": {a: r["lr"] for a, r in rate.items()},
                    "tuning": {a: r["tuning"] for a, r in rate.items()},
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
                f"{LOSS_MARGIN:.0%} of untied softmax's validation loss on the stdlib corpus: "
                "the 95% interval of the paired loss ratio lies below "
                f"+{LOSS_MARGIN:.0%} (tiny model, seeds 0–4, rates tuned on seed 100)."),
    refuted_if=(f"The 95% interval of the chosen variant's paired loss ratio lies above "
                f"+{LOSS_MARGIN:.0%}."),
    thresholds=(
        Threshold("cost of the PSD guarantee: chosen tied variant / softmax loss − 1 (stdlib)",
                  arm=CHOSEN, metric="loss_ratio", unit="fraction of softmax's loss",
                  **within(LOSS_MARGIN)),
    ),
    extensions=(
        Extension("copying survives the guarantee",
                  f"Is the chosen variant's copy exact match at most {EM_MARGIN * 100:.0f} points "
                  "below softmax's?",
                  (Threshold("chosen tied variant − softmax: copy exact match", arm=CHOSEN,
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
    scale_models=models.CPU_SCALE["gpt"],
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
