"""Claim `kv-compression`: can rank shrink the KV cache without changing what the model computes?

    python -m experiments claim kv-compression [--quick]

**The preface's sentence**, "Rank-aware KV cache compression for million-token contexts", in
two clauses (v4), each read on the test split over seeds 10-14: **(1) rank-aware KV cache
compression**: does a latent KV cache of per-head PCA coefficients with loss-aware ranks reach
a measured 8× (against a 16-bit K/V cache) at under 1% loss rise over the uncompressed cache,
read at T = 1024, the longest committed model's length (`llama-mini-long-20`)? **(2) for
(million-token) contexts**: does that cost stay put as the context grows, the 8× loss rise at
T = 1024 less than 0.5% of the loss above the same compression's at T = 128? No committed
model reads a million tokens; the clauses name the longest T measured, and the context axis
(T = 128, 256, 512 on the same model, beside T = 1024) shows the trend against T. Per seed,
no fine-tuning; bases, loss-aware table and quantization steps from training-split
calibration windows. Mathematics settles the exact part (`theorem`); held-out loss does not.

**Extensions** (own verdicts): 16× after a short calibration (`analysis.kv.calibrate`, ≤ 10
min per seed) at ≤ 1%; 32× with 4-bit coefficients, without and with that fit, at ≤ 2%; the
allocation matters (loss-aware beats uniform by ≥ 0.5% of the loss); rank beats bits at equal
bytes (vs a 2-bit KIVI-style cache, by ≥ 0.2%); the 99%-energy key rank grows by < 1
dimension per head over prefixes 16 to 1024.

**Protocol (v4).** `llama-mini-long-20` (llama-mini-20's shape trained at T = 1024, 20 tokens
per parameter), seeds 10-14, windows of 1024 tokens: 4 calibration windows (the loss-aware
table, 8 ranks per head), 8 test windows; 64 test windows of 128 tokens for clause 2. The
fit's Adam rate is chosen on tuning seeds 110 and 111 (their own base models, `val` windows)
from `{1e-3, 3e-3, 1e-2, 3e-2}` by the mean 16× loss rise (`kv_arms.tune_fit_rate`), the grid
extended one step past an edge once (`lab.edge`); a rate still at an edge fails the fitted
extensions' control. The scale axis of v1-v3 (`micro-20` ... `llama-mini-20`, T = 128) is
not read: no other committed model is trained at T = 1024. `--quick`: the `quick` model, one
seed, T = 64, 10-step fits at a fixed rate.

v2, v3 (read at T = 128 on `mini-20`, seeds 0-4) and v4: `revisions`.
"""

from __future__ import annotations

import dataclasses

from experiments import models
from experiments.lab import kv_arms
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold, axes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision

ALLOCS = ("uniform", "greedy", "loss")


@dataclasses.dataclass(frozen=True)
class KvCompressionSizes(Sizes):
  """What a run of `kv-compression` reads about its size.

  Attributes:
    model: the shared base model (`experiments.models`), one per seed.
    seq_len: `T` of the calibration and evaluation windows of every arm.
    short_len: the shorter evaluation length the 8× compression is also read at (same
      calibration): v4's clause 2, v1-v3's context extension.
    context_lengths: the prefix lengths at which the 99%-energy rank is measured.
    n_calibration: calibration windows (training split) per seed: bases and quantization steps.
    cost_windows: the first this many calibration windows measure the loss-aware table.
    n_eval: evaluation windows (validation files) per seed and length.
    exact_windows: evaluation windows the full-rank control (`exact`) runs on.
    loss_grid: ranks measured per head for the loss-aware allocation's table.
    allocs: the rank allocations measured at 8× (`uniform` and `loss` are needed).
    kivi_bits: the bit widths of the KIVI-style arms (each with its equal-bytes rank arm;
      2 is needed).
    fit_len: `T` of the windows the calibrated arms' projections are fitted on.
    fit_windows: training-split windows the calibrated arms' projections are fitted on
      (`analysis.kv.calibrate`; never the evaluated files).
    fit_batch: windows per Adam step of that fit.
    fit_steps: Adam steps of that fit, per arm and seed.
    fit_learning_rate: Adam's rate for that fit; None (FULL): tuned per size on the tuning
      seed from `fit_rates` (`kv_arms.tune_fit_rate`).
    fit_rates: the increasing, geometric grid that rate is tuned on (extended past an edge
      once); `()` when the rate is fixed.
    split: the split the reported arms are read on: `test` (v4), or `heldout` (the validation
      files v1-v3 read; their rate was tuned on them too); the tuner reads `val` when `test`.
    n_short: evaluation windows at `short_len`; None: `n_eval` (v1-v3).
  """

  model: str
  seq_len: int
  short_len: int
  context_lengths: tuple[int, ...]
  n_calibration: int
  cost_windows: int
  n_eval: int
  exact_windows: int
  loss_grid: int
  allocs: tuple[str, ...]
  kivi_bits: tuple[int, ...]
  fit_len: int
  fit_windows: int
  fit_batch: int
  fit_steps: int
  fit_learning_rate: float | None
  fit_rates: tuple[float, ...] = ()
  split: str = "heldout"
  n_short: int | None = None

  def __post_init__(self):
    if not {"uniform", "loss"} <= set(self.allocs) <= set(ALLOCS) or 2 not in self.kivi_bits:
      raise ValueError(f"KvCompressionSizes: allocs={self.allocs} must include 'uniform' and "
                       f"'loss' (of {ALLOCS}) and kivi_bits={self.kivi_bits} must include 2: "
                       "the thresholds read those arms. Fix: add them.")
    if self.fit_learning_rate is None and len(self.fit_rates) < 4:
      raise ValueError(f"KvCompressionSizes: fit_learning_rate=None asks for a tuned rate, but "
                       f"fit_rates={self.fit_rates} has fewer than 4 rates. Fix: give a grid "
                       "of >= 4 rates, or a fixed fit_learning_rate.")
    rate = self.fit_rates[0] if self.fit_learning_rate is None else self.fit_learning_rate
    if (min(self.fit_len, self.fit_windows, self.fit_batch, self.fit_steps) < 1
        or rate <= 0):
      raise ValueError(f"KvCompressionSizes: fit_len={self.fit_len}, fit_windows="
                       f"{self.fit_windows}, fit_batch="
                       f"{self.fit_batch} and fit_steps={self.fit_steps} must be >= 1 and "
                       f"fit_learning_rate={self.fit_learning_rate} > 0: the calibrated arms "
                       "are extensions' thresholds. Fix: give each a positive value.")


QUICK = KvCompressionSizes(model="quick", seq_len=64, short_len=32, context_lengths=(16, 32, 64),
                           n_calibration=8, cost_windows=8, n_eval=8, exact_windows=4,
                           loss_grid=3, allocs=("uniform", "loss"), kivi_bits=(2,),
                           fit_len=64, fit_windows=8, fit_batch=4, fit_steps=10,
                           fit_learning_rate=1e-2, split="test")
FULL = KvCompressionSizes(model=models.LONG_TRAINED, seq_len=1024, short_len=128,
                          context_lengths=(16, 32, 64, 128, 256, 512, 1024), n_calibration=4,
                          cost_windows=4, n_eval=8, n_short=64, exact_windows=4, loss_grid=8,
                          allocs=ALLOCS, kivi_bits=(4, 2), fit_len=128, fit_windows=128,
                          fit_batch=8, fit_steps=1000, fit_learning_rate=None,
                          fit_rates=(1e-3, 3e-3, 1e-2, 3e-2), split="test")
SEEDS = (10, 11, 12, 13, 14)
TUNE_SEEDS = (110, 111)  # v1-v3: 100


def at_length(sizes: KvCompressionSizes, T: int) -> KvCompressionSizes:
  """The sizes of a run at context length `T` (`Claim.at_length`, the context axis).

  What changes with `T`: the model (full sizes: `llama-mini-long-20`, llama-mini-20's shape
  trained at T = 1024 and 20 tokens per parameter, for every `T`; quick sizes keep the quick
  model, `T ≤ 64`), the calibration and evaluation windows (`seq_len = T`, so the 8× loss
  rise, the primary effect, is read at `T`), the shorter length (`short_len`: kept where it is
  below `T` and `n_short` is set, as in v4's `FULL`; else `T / 2`) and the prefixes of the
  99%-energy rank (doubling from the shortest up to `T`). The window counts (`n_calibration`,
  `cost_windows`, `n_eval`) scale by `seq_len / T`, so the tokens calibrated on and measured
  per seed stay about those of `sizes`, never below `min(n, 4)` windows (on 2 windows of 1024
  the loss table chose worse ranks). The fit keeps its windows (`fit_len`, `fit_windows`,
  `fit_batch`, `fit_steps`): the projections are position-free (keys before RoPE), so they are
  fitted on short windows at every `T` and read at `T`: calibrate short, deploy long.

  Raises:
    ValueError: `T` is outside `[16, trained length of the model]` (`models.model_at_length`).

  Example:
    >>> at_length(FULL, 1024) == FULL
    True
    >>> z = at_length(FULL, 128)
    >>> z.model, z.seq_len, z.short_len, z.n_eval, z.n_short, z.n_calibration, z.cost_windows
    ('llama-mini-long-20', 128, 64, 64, 64, 32, 32)
  """
  short_of = "llama-mini-20" if sizes.model == models.LONG_TRAINED else sizes.model  # its twin
  model = models.model_at_length("kv-compression", short_of, T, quick_model=QUICK.model)

  def windows(n):  # about n · seq_len tokens in windows of T, at least min(n, 4) windows
    return max(min(n, 4), round(n * sizes.seq_len / T))

  start = min(sizes.context_lengths)
  prefixes = {start * 2**i for i in range(T.bit_length()) if start * 2**i <= T} | {T}
  n_eval, n_calibration = windows(sizes.n_eval), windows(sizes.n_calibration)
  short = sizes.short_len if sizes.n_short and sizes.short_len < T else T // 2
  return dataclasses.replace(
      sizes, model=model, seq_len=T, short_len=short, context_lengths=tuple(sorted(prefixes)),
      n_calibration=n_calibration, cost_windows=min(windows(sizes.cost_windows), n_calibration),
      n_eval=n_eval, exact_windows=min(sizes.exact_windows, n_eval))


def run(spec: Spec) -> dict:
  """Measures every arm for every seed; see the module docstring."""
  z = spec.sizes
  runs: dict = {}
  chosen: dict = {}
  cfg = None
  tuned = None
  if z.fit_learning_rate is None:  # FULL: the fit's rate, chosen on the tuning seeds
    tuned = kv_arms.tune_fit_rate(z, CLAIM.tuning_seeds, extend=1, log=spec.log)
    z = dataclasses.replace(z, fit_learning_rate=tuned["learning_rate"] if tuned else None)
  for seed, (params, cfg) in zip(spec.seeds, models.base_models(z.model, spec.seeds),
                                 strict=True):
    spec.log(f"  kv-compression: seed {seed}")
    per_arm, ranks = kv_arms.measure_seed(params, cfg, seed, z, log=spec.log)
    for name, _ in kv_arms.FITTED:  # the fitted extensions' edge control
      if name in per_arm:
        per_arm[name]["edge_lr"] = float(bool(tuned and tuned["at_edge"]))
    for arm, m in per_arm.items():
      runs.setdefault(arm, {})[seed] = m
    chosen[seed] = ranks
  notes = kv_arms.notes(runs, chosen, z, cfg, spec.seeds)
  effects = [("16×: SVD − fitted projections (loss rise)", "r16-loss", "r16-cal", "loss_rise"),
             ("32× 4-bit: SVD − fitted projections (loss rise)", "r32q4-loss", "r32q4-cal",
              "loss_rise"),
             ("8×: greedy − loss-aware (loss rise)", "r8-greedy", "r8-loss", "loss_rise"),
             ("8×: uniform − greedy (loss rise)", "r8-uniform", "r8-greedy", "loss_rise"),
             *[(f"{b}-bit KIVI − rank at equal bytes (loss rise)", f"kivi{b}", f"rank@kivi{b}",
                "loss_rise") for b in z.kivi_bits if b != 2]]
  return {"setup": {"model_config": cfg.to_dict(), "ranks": chosen, "fit_tuning": tuned,
                    "fit_learning_rate": z.fit_learning_rate},
          "split": "test" if z.split == "test" else "val",  # v1-v3: the validation files
          "runs": runs, "figures": [kv_arms.figure(runs, spec.seeds, z, cfg.d_head)],
          "notes": notes,
          "effects": [e for e in effects if e[1] in runs and (e[2] is None or e[2] in runs)]}


THEOREM = ("Per head the cache stores c = k P for an orthonormal basis P (PᵀP = I) and attention "
           "reads k̂ = c Pᵀ. At full rank P Pᵀ = I, so k̂ = k and the latent model computes the "
           "model's logits (up to float rounding). At rank r with P_r the top-r eigenvectors of "
           "the calibration keys' second moment M, the mean squared reconstruction error is the "
           "sum of M's dropped eigenvalues, the least of any rank-r orthogonal projection "
           "(Eckart–Young–Mirsky); likewise for values. Neither fixes the held-out loss: that "
           "depends on how attention and the later layers use the dropped directions on text "
           "the bases never saw. tests/experiments/claims/test_kv_compression.py checks both "
           "on random instances in float64.")

PRIMARY = "loss rise at a measured 8×, T = 1024 (16-bit coefficients, loss-aware ranks)"
GROWTH = "8× loss rise: T = 1024 − T = 128 (same compression)"

def _goal(rise: str, ratio_name: str, arm: str, ratio: int, limit: float) -> tuple:
  """A compression goal's thresholds: `arm`'s loss rise below `limit` (the margin, a fraction
  of the uncompressed loss), with its measured ratio at least `ratio` on every seed (control)."""
  return (Threshold(rise, arm=arm, metric="loss_rise", supports=f"< {limit}",
                    refutes=f"> {limit}", margin=limit, unit="fraction of the uncompressed loss"),
          Threshold(ratio_name, arm=arm, metric="kv_compression", stat="range",
                    supports=f">= {ratio}", control=True, unit="×"))


def _fit_edge(arm: str) -> Threshold:
  """The fitted arms' edge control: the tuned fit rate is inside its (extended) grid."""
  return Threshold("fit rate inside its tuning grid (1 = at an edge)", arm=arm,
                   metric="edge_lr", stat="range", supports="== 0", control=True)


CLAIM = Claim(
    id="kv-compression",
    reads_base=True,
    topic="full rank & causality",
    kind="new",
    preface="Rank-aware KV cache compression for million-token contexts",
    theorem=THEOREM,
    hypothesis=("On test-split text at T = 1024 with no fine-tuning, a latent KV cache of "
                "per-head PCA coefficients (bases from disjoint calibration text) with "
                "loss-aware ranks reaches a measured 8× against a 16-bit K/V cache at a loss "
                "rise below 1% of the uncompressed cache's loss, and that rise is less than "
                "0.5% of the loss above the same compression's at T = 128 (whole 95% "
                "intervals over seeds 10-14)."),
    refuted_if=("The 95% interval of the loss rise at a measured 8× at T = 1024 lies above 1% "
                "of the uncompressed loss, or that of its excess over T = 128 above 0.5%."),
    thresholds=(
        *_goal(PRIMARY, "measured ratio at target 8", "r8-loss", 8, 0.01),
        Threshold(GROWTH, arm="r8-loss", baseline="short-r8-loss", metric="loss_rise",
                  supports="< 0.005", refutes="> 0.005", margin=0.005,
                  unit="fraction of the uncompressed loss"),
        Threshold("full-rank latent model reproduces the logits", arm="exact",
                  metric="max_logit_error_rel", stat="range", supports="<= 1e-5", control=True,
                  unit="of the largest |logit|"),
    ),
    extensions=(
        Extension("16× after a short calibration",
                  "With each head's down and up projections fitted to the uncompressed model's "
                  "next-token distribution on training-split text (`analysis.kv.calibrate`, "
                  "at most 10 minutes per seed on 2 CPU cores), does a measured 16× cache "
                  "cost less than 1% of the uncompressed loss?",
                  (*_goal("loss rise at a measured 16× (fitted projections)",
                          "measured ratio at target 16", "r16-cal", 16, 0.01),
                   Threshold("fit time per seed", arm="r16-cal", metric="fit_s", stat="range",
                             supports="<= 600", control=True, unit="s"), _fit_edge("r16-cal"))),
        Extension("32× with 4-bit coefficients",
                  "With 4-bit coefficients at 8× fewer dimensions (a measured 32×), is the loss "
                  "rise below 2% of the uncompressed loss?",
                  _goal("loss rise at a measured 32× (4-bit, loss-aware ranks)",
                        "measured ratio at target 32", "r32q4-loss", 32, 0.02)),
        Extension("32× with 4-bit coefficients after a short calibration",
                  "With the projections of the 32× 4-bit cache fitted as in the 16× extension "
                  "(the 4-bit steps measured again for the fitted projections), is the loss "
                  "rise below 2% of the uncompressed loss?",
                  (*_goal("loss rise at a measured 32× (4-bit, fitted projections)",
                          "measured ratio at target 32 (fitted)", "r32q4-cal", 32, 0.02),
                   _fit_edge("r32q4-cal"))),
        Extension("the allocation matters",
                  "At 8×, do loss-aware ranks (Palu's method) beat equal ranks in every head "
                  "by at least 0.5% of the loss (half the primary's tolerance)?",
                  (Threshold.beyond("8×: uniform − loss-aware ranks (loss rise)",
                                    arm="r8-uniform", baseline="r8-loss", metric="loss_rise",
                                    margin=0.005, unit="fraction of the uncompressed loss"),)),
        Extension("rank beats bits at equal bytes",
                  "At the measured bytes of a 2-bit KIVI-style cache, is the loss-aware "
                  "low-rank cache's loss rise lower by at least 0.2% of the loss?",
                  (Threshold.beyond("2-bit KIVI − low rank at equal bytes (loss rise)",
                                    arm="kivi2", baseline="rank@kivi2", metric="loss_rise",
                                    margin=0.002, unit="fraction of the uncompressed loss"),)),
        Extension("the key rank does not grow with the context",
                  "Does the rank holding 99% of the key energy grow by less than one dimension "
                  "per head from the shortest measured prefix (16) to the longest (1024)?",
                  (Threshold("99%-energy key rank: longest − shortest prefix", arm="context",
                             metric="key_rank99_growth", supports="< 1", refutes="> 1",
                             margin=1.0, unit="dimensions per head"),)),
    ),
    anchors=(
        Anchor("Palu: KV cache compressed by low-rank projection", "91.25% (≈ 11×) with "
               "quantization, small perplexity rise", "Chang et al. 2024, Palu: Compressing "
               "KV-Cache with Low-Rank Projection"),
        Anchor("Eigen Attention: KV cache reduction from low-rank attention", "up to 40%",
               "Saxena et al. 2024, Eigen Attention: Attention in Low-Rank Space for KV Cache "
               "Compression"),
        Anchor("MLA: KV cache reduction vs MHA (trained from scratch)", "93.3% (≈ 14×)",
               "DeepSeek-AI 2024, DeepSeek-V2"),
        Anchor("KIVI: 2-bit KV cache without fine-tuning", "≈ 2.6× less peak memory, small "
               "accuracy loss", "Liu et al. 2024, KIVI"),
    ),
    clauses=(
        Clause("Rank-aware KV cache compression: a latent cache of per-head PCA coefficients "
               "with loss-aware ranks reaches a measured 8× at under 1% loss rise, read at "
               "T = 1024 (the longest committed model's length, the longest T measured)",
               (PRIMARY,)),
        Clause("for million-token contexts: read as a cost that does not grow with the "
               "context, the 8× loss rise at T = 1024 less than 0.5% of the loss above its "
               "value at T = 128 (no committed model reads more than 1024 tokens; the "
               "context axis shows the trend over T = 128 ... 1024)", (GROWTH,)),
    ),
    seeds=SEEDS,
    tuning_seeds=TUNE_SEEDS,
    axes=(axes.context((128, 256, 512, 1024), at_length),),
    version=4,
    revisions=("v2: registered on the trained regime (mini-20 at 20 tokens per parameter; v1 "
               "read `small` at 0.95); the fit rate tuned per size on the tuning seed with the "
               "edge rule and an edge control; the context axis dropped (its long model is not "
               "trained at the regime)",
               "v3: after v2's exactness control failed at 1.1e-4 logits on the trained models, "
               "whose logits are tens, that control reads the error relative to the largest "
               "|logit|, <= 1e-5 (float32 rounding at that scale); sizes too narrow for a 16x "
               "cache measure the primary alone instead of failing",
               Revision(4, "protocol", (
                   "issue 47: v2->v3 replaced a failed absolute control with a relative one on "
                   "the same seeds, so v4 confirms on fresh ones: seeds 10-14 (their committed "
                   "base models), the fit rate tuned on tuning seeds 110 and 111 (mean 16x loss "
                   "rise on their val windows; v1-v3 tuned on seed 100's held-out windows) on "
                   "the same grid and edge rule, the verdict read on the test split. The "
                   "sentence is read in two clauses: (1) 8x at under 1% loss rise, now at "
                   "T = 1024 on llama-mini-long-20 (the longest committed model; v1-v3 read "
                   "T = 128 on mini-20, against 'million-token contexts'); (2) that rise less "
                   "than 0.5% above the same compression's at T = 128 (64 test windows of 128; "
                   "v1-v3's context extension read it at T/2 as an extension). The context axis "
                   "reads T = 128, 256, 512, 1024 on that model; the scale axis is dropped (no "
                   "other committed model is trained at T = 1024); the key-rank extension "
                   "keeps its threshold. Registered before any run of v4."))),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
