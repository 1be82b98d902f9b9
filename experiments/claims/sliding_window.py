"""Claim `sliding-window`: what does skipping every pair farther than w apart cost?

    python -m experiments claim sliding-window [--quick]

**The preface's question.** "Sparse attention (Longformer, BigBird) scales to long documents
by skipping distant token pairs". That skipping makes the work grow as `T · w` instead of `T²`
is fixed by construction (the `theorem`: a query reads at most `w` keys, and after `L` layers
position `t` depends exactly on `t − L(w − 1) … t`), so the question that could come out
either way is the practitioner's: **does a model that never sees a pair farther than `w` apart
lose little against full attention?** Operationalised as the paired cost `loss_local /
loss_full − 1` of blocked sliding-window attention (`w = 32`, blocks of 32) against full causal
softmax attention, both trained alike on the stdlib corpus at `T = 256` (7/8 of the last
query's causal pairs skipped). Supported when the whole 95% interval over seeds 0–4 lies below
**2% of full attention's loss** (≈ 5% perplexity), refuted when it lies above it.

Controls (block the primary): the trained `local` model's receptive field, by `jax.jacrev`
through its `L` blocks, is exactly `L (w − 1)` in every seed; no arm's tuned rate sits at an
edge of its grid (`rates_at_edge == 0`). Extension (own verdict): *where trained full heads
look*: the full model's mean attention mass within the last `w` keys (`analysis.local_mass`)
exceeds one half by more than 5 points.

**Protocol.** Both arms train from scratch at the shape of `Sizes.model` with AdamW at a
constant rate (`attention_arms.make_tx`), batches of 8 × 256 tokens for `steps=None`: 20 tokens
per parameter (`TrainedSizes.budget_steps`, the recipe's steps, as its 16 × 128 holds as many
tokens). Each arm's rate is chosen on seed 100 from `rate_factors` (0.25, 0.5, 1, 2) times the
shape's recipe peak `3e-3 · 64 / d` by the held-out loss; a best rate at an edge extends the grid
one step, once (`tune_rate(extend=1)`). Then seeds 0–4 train at it. Timing (never a verdict):
forward + backward of one attention layer, softmax vs local, at T = 256 … 2048
(`experiments.lab.attention_timing`). `--quick` (`mini`, 30 steps, T = 128, one rate): indicative.
Registered at `micro-20` (d 32, L 2, H 4; 409 steps). **Scale axis**: GPT `pico-20` and
`micro-20`, each at 20 tokens per parameter, the whole protocol per size; `mini-20` (1,298 steps)
and the Llama family are left out by cost, so two sizes give no trend.

v2 (2026-12-05, before the run): the trained regime of issue 38 (v1: `mini` at 2.3 tokens per
parameter, rates {1e-3, 3e-3}, no edge rule); the edge rule and its control; the context axis
(T = 256/512/1024, v1) dropped: at 20 tokens per parameter its six more tuned pairs of runs, at
up to 4× full attention's cost per token, do not fit the run's budget on 2 CPU cores.
Results: `results/sliding-window/`.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import transformer
from experiments import models
from experiments.lab import attention_timing, receptive
from experiments.lab.attention_arms import config_at, train_arm, tune_rate, within
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes

WINDOW = 32
TUNE_SEED = 100
# The arms: attention fields over the size's shape (`arm_config`); only the attention differs.
ARMS = {"full": {}, "local": dict(attention="local", window=WINDOW, block_size=WINDOW)}
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0)  # times the shape's recipe peak rate; ratio 2, frozen
LOSS_MARGIN = 0.02  # 2% of full attention's loss
MASS_MARGIN = 0.05  # 5 points of attention mass above one half


@dataclasses.dataclass(frozen=True)
class SlidingWindowSizes(TrainedSizes):
  """What a run of `sliding-window` reads about its size.

  Attributes:
    model: the shared model (`experiments.models.RECIPES`) whose shape both arms are trained
      at from scratch, with the arm's attention (`arm_config`).
    steps: training steps per run (tuning and reported); None: 20 tokens per parameter of
      `model` (`TrainedSizes.budget_steps`), so the scale axis keeps the ratio at every size.
    batch_size: windows per step.
    seq_len: the training and evaluation length `T`.
    rate_factors: the grid each arm's rate is chosen from on the tuning seed, as multiples of
      `model`'s recipe peak rate (one factor: nothing is tuned).
    extend: how many rates tuning may add beyond a winning edge of the grid (`tune_rate`).
    probe_batch: validation windows the trained heads' attention mass is measured on.
    rf_seq_len: positions of the random input of the receptive-field measurement (more than
      `L (w − 1)`, so the whole reach is seen).
    timing_seq_lens: the `T` of the timing sweep, doubling from the first (the sweep runs
      `T = min, 2·min, … max`); `()`: no timing sweep.
    timing_rounds: timed repetitions per `T`.
  """

  model: str
  steps: int | None
  batch_size: int
  seq_len: int
  rate_factors: tuple[float, ...]
  extend: int
  probe_batch: int
  rf_seq_len: int
  timing_seq_lens: tuple[int, ...]
  timing_rounds: int

  def __post_init__(self):
    if self.model not in models.RECIPES:
      raise ValueError(f"SlidingWindowSizes.model={self.model!r} has no recipe (its peak rate "
                       f"sets the grid). Fix: one of experiments.models.RECIPES: "
                       f"{sorted(models.RECIPES)}.")
    if not self.timing_seq_lens:
      return
    t0 = self.timing_seq_lens[0]
    if self.timing_seq_lens != tuple(t0 * 2**i for i in range(len(self.timing_seq_lens))):
      raise ValueError(f"SlidingWindowSizes.timing_seq_lens={self.timing_seq_lens!r} does not "
                       "double from its first length, but the timing sweep runs T = min, "
                       "2·min, … max. Fix: e.g. (256, 512, 1024, 2048), or () for no sweep.")

  @property
  def rates(self) -> tuple[float, ...]:
    """The rate grid: `rate_factors` times `model`'s recipe peak rate."""
    return tuple(f * models.RECIPES[self.model].learning_rate for f in self.rate_factors)


QUICK = SlidingWindowSizes(model="mini", steps=30, batch_size=8, seq_len=128,
                           rate_factors=(1.0,), extend=0, probe_batch=4, rf_seq_len=128,
                           timing_seq_lens=(128, 256), timing_rounds=2)
FULL = SlidingWindowSizes(model="micro-20", steps=None, batch_size=8, seq_len=256,
                          rate_factors=RATE_FACTORS, extend=1, probe_batch=4, rf_seq_len=128,
                          timing_seq_lens=(256, 512, 1024, 2048), timing_rounds=3)


def arm_config(model: str, arm: str, seq_len: int) -> transformer.Config:
  """Arm `arm`'s model at the shape of `model`, `ARMS[arm]` applied, reading `seq_len` tokens.

  `attention_arms.config_at`: `max_len` follows `seq_len` past the shape's 256; at `mini`
  it is the `tiny` preset that v1 and quick runs train.

  Example:
    >>> from experiments.claims.sliding_window import arm_config
    >>> cfg = arm_config("llama-small", "local", 256)
    >>> cfg.d_model, cfg.n_layers, cfg.n_kv_heads, cfg.positions, cfg.window, cfg.block_size
    (128, 4, 2, 'rope', 32, 32)
  """
  return config_at(seq_len, model=model, **ARMS[arm])


def timing(ts, rounds: int, *, heads: int = 4, d_head: int = 16) -> dict:
  """`softmax` vs `local` (window 32, blocks of 16) fwd and fwd+bwd, `heads` heads of `d_head`.

  `run` passes its model's query heads and head width (4 × 16 at `mini`): the layer timed is
  the one that model computes (grouped key/value heads are repeated to the query heads
  before the variant runs, as in the model).
  """
  res = attention_timing.run(max(ts), min_t=min(ts), rounds=rounds, heads=heads, d_head=d_head,
                             block_size=16,
                             variants=("softmax", "local"))
  out = {"T": res["T"]}
  for name, row in res["variants"].items():
    out[name] = {k: row.get(k) for k in ("fwd", "bwd", "slope_fwd", "slope_bwd",
                                         "crossover_fwd", "crossover_bwd")}
  return out


def _t(x) -> str:
  return "never on the grid" if x is None else f"{x:.0f}"


def _figure(tm: dict, heads: int, d_head: int) -> dict:
  """`timing.png`, declared as data: forward + backward time of one attention layer against T,
  log-log."""
  ts = tm["T"]
  lines = [{"x": ts, "y": [x * 1e3 for x in tm[name]["bwd"]], "style": f"{marker}-",
            "label": f"{label}: log-log slope {tm[name]['slope_bwd']:.2f}"
            if tm[name]["slope_bwd"] is not None else label}
           for name, label, marker in (("softmax", "full causal softmax", "o"),
                                       ("local", f"sliding window (w = {WINDOW})", "s"))]
  cross = tm["local"]["crossover_bwd"]
  return {"name": "timing.png", "size": [6, 4], "panels": [{
      "lines": lines, "xbase": 2, "ylog_ticks": True, "xticks": ts,
      "xticklabels": [str(t) for t in ts],
      "vlines": [{"x": cross, "color": "grey", "style": ":", "label": f"crossover T = {cross:.0f}"}]
      if cross is not None and cross > ts[0] else [],
      "xlabel": "sequence length T (tokens)", "ylabel": "forward + backward time (ms)",
      "title": f"one attention layer ({heads} heads × {d_head}, blocks of 16, batch 1)\n"
               f"{jax.default_backend()}, shared machine: times are indicative", "legend": 8}]}


def _timing_note(tm: dict | None, heads: int, d_head: int) -> str:
  """The notes' line on the timing sweep (`tm`: `timing`'s dict; None: no sweep at this run)."""
  if tm is None:
    return ("No timing sweep in this run (a run at another length: the registered run times "
            "one attention layer once).")
  loc = tm["local"]
  return (f"One attention layer ({heads} heads × {d_head}, blocks of 16), T = {tm['T']}: "
          "fwd+bwd ms softmax " + "/".join(f"{x * 1e3:.2f}" for x in tm["softmax"]["bwd"])
          + ", local " + "/".join(f"{x * 1e3:.2f}" for x in loc["bwd"])
          + (f"; log-log slope softmax {tm['softmax']['slope_bwd']:.2f}, local "
             f"{loc['slope_bwd']:.2f}" if loc["slope_bwd"] is not None else "")
          + f"; crossover T (fwd+bwd) {_t(loc['crossover_bwd'])}, forward only "
          f"{_t(loc['crossover_fwd'])} (BigBird advises full attention below 1024 tokens); "
          f"{jax.default_backend()}, machine shared, so times are indicative.")


def run(spec: Spec) -> dict:
  """Tunes and trains both arms, measures reach and mass, then times; see the docstring."""
  z = spec.sizes
  seq_len = z.seq_len
  arms = {arm: arm_config(z.model, arm, seq_len) for arm in ARMS}
  shape = arms["full"]  # the size's shape: both arms share it
  reach = shape.n_layers * (WINDOW - 1)
  if z.rf_seq_len <= reach:
    raise ValueError(f"sliding-window: rf_seq_len={z.rf_seq_len} must exceed the reach L(w − 1) "
                     f"= {reach} of `{z.model}` (L = {shape.n_layers}), or the "
                     f"measurement cannot see it. Fix: rf_seq_len = {reach + WINDOW} or more.")
  steps = z.budget_steps()
  tuned = len(z.rates) > 1
  data = dict(data="stdlib", steps=steps, batch_size=z.batch_size, seq_len=seq_len)
  trained, runs = {}, {}
  for arm, cfg in arms.items():
    spec.log(f"  sliding-window: {arm}: stdlib T={seq_len}, {steps} steps"
             + (f", rate tuned on seed {TUNE_SEED}" if tuned else ""))
    rate = tune_rate(cfg, tuning_seeds=(TUNE_SEED,), grid=z.rates, extend=z.extend, **data)
    trained[arm] = {**train_arm(cfg, spec.seeds, learning_rates=(rate["learning_rate"],),
                                **data), "tuning": rate}
    runs[arm] = {s: {"loss": m["loss"], "diverged": m["diverged"]}
                 for s, m in trained[arm]["per_seed"].items()}
  at_edge = [a for a, t in trained.items() if t["tuning"]["at_edge"]]
  for s in spec.seeds:
    runs["local"][s]["loss_ratio"] = runs["local"][s]["loss"] / runs["full"][s]["loss"] - 1
    runs["local"][s]["rates_at_edge"] = float(len(at_edge))
    tokens = models.val_tokens(seq_len, z.probe_batch, s)
    runs["full"][s].update(receptive.window_mass(trained["full"]["params"][s], arms["full"], tokens,
                                       WINDOW))
    rf = receptive.receptive_field(trained["local"]["params"][s], arms["local"], z.rf_seq_len,
                         jax.random.key(s))
    runs["local"][s].update(rf)
  tm, figures = None, []
  if z.timing_seq_lens:
    spec.log("  sliding-window: timing softmax vs local")
    tm = timing(z.timing_seq_lens, z.timing_rounds, heads=shape.n_heads, d_head=shape.d_head)
    figures.append(_figure(tm, shape.n_heads, shape.d_head))
  first = spec.seeds[0]

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  skipped = 1 - WINDOW / seq_len
  params = models.param_count(z.model)
  notes = [
      f"Models: the `{z.model}` shape from scratch ({models.family(shape)}: d "
      f"{shape.d_model}, L {shape.n_layers}, H {shape.n_heads} on {shape.n_kv_heads} key/value "
      f"heads, {shape.positions} positions; {params:,} parameters at max_len 256), both arms "
      f"alike but for the attention: {steps} AdamW steps of {z.batch_size} × {seq_len} tokens, "
      f"{steps * z.batch_size * seq_len / params:.1f} tokens per parameter.",
      f"Loss at T = {seq_len} ({steps} steps, batch {z.batch_size}): full "
      f"{mean('full', 'loss'):.4f}, local (w = {WINDOW}) {mean('local', 'loss'):.4f} nats; "
      f"paired cost {mean('local', 'loss_ratio'):+.2%} of full attention's loss (margin "
      f"{LOSS_MARGIN:.0%}). The last query skips {skipped:.0%} of its causal keys.",
      f"Trained full-attention heads: {mean('full', 'local_mass'):.1%} of their attention "
      f"mass lies within the last {WINDOW} keys (mean over heads, layers, rows); "
      f"{mean('full', 'heads_mostly_local'):.0%} of heads put more than half there; the least "
      f"local head {mean('full', 'local_mass_min_head'):.1%}.",
      f"Receptive field of the trained local model by gradient (seed {first}): reach "
      f"{runs['local'][first]['reach']:.0f} = L(w−1) = {runs['local'][first]['expected']:.0f}; "
      f"exact in {int(sum(runs['local'][s]['rf_exact'] for s in spec.seeds))}/"
      f"{len(spec.seeds)} seeds.",
      _timing_note(tm, shape.n_heads, shape.d_head),
      {"tuned": {a: t["tuning"] for a, t in trained.items()},
       "read": f"stdlib loss on tuning seed {TUNE_SEED}; {list(z.rate_factors)} × the recipe's "
               f"{models.RECIPES[z.model].learning_rate:g}, extended up to {z.extend} step past "
               "a winning edge"},
  ]
  if at_edge:
    notes.append(f"Still at an edge: {', '.join(at_edge)}, so the control fails.")
  return {"setup": {"window": WINDOW, "tune_seed": TUNE_SEED,
                    "chosen_lr": {a: t["tuning"]["learning_rate"] for a, t in trained.items()},
                    "tuning": {a: t["tuning"] for a, t in trained.items()},
                    "timing": tm, "model_config": arms["local"].to_dict()},
          "runs": runs, "notes": notes, "figures": figures,
          "effects": [("local − full: stdlib loss", "local", "full", "loss")]}


THEOREM = ("Blocked sliding-window attention with window w lets query t read only keys s with "
           "t − w < s ≤ t: at most w keys per query, so it forms at most T·(⌈(w−1)/b⌉ + 1)·b "
           "scores with blocks of b, growing as T·w rather than T(T+1)/2. One layer's output at "
           "t is a function of positions t − w + 1 … t alone, so after L layers h_t depends on "
           "x_s exactly for t − L(w − 1) ≤ s ≤ t (each block passes its window on, and the "
           "residual path keeps every lag up to it). tests/experiments/test_claims_attention.py "
           "checks the keys read, the independence from keys outside the window, and the reach "
           "L(w − 1) in float64 on random instances.")

CLAIM = Claim(
    id="sliding-window",
    topic="sparsity",
    kind="existing",
    preface=("Sparse attention (Longformer, BigBird) scales to long documents by skipping "
             "distant token pairs"),
    theorem=THEOREM,
    hypothesis=(f"Skipping every pair farther than w = {WINDOW} apart costs less than "
                f"{LOSS_MARGIN:.0%} of full attention's validation loss: blocked sliding-window "
                "attention and full causal attention, trained alike on the stdlib corpus at the "
                f"T = {FULL.seq_len} (micro-20 shape at 20 tokens per parameter, seeds 0–4, "
                "rates tuned on seed 100), differ by a paired loss ratio whose 95% interval "
                f"lies below +{LOSS_MARGIN:.0%}."),
    refuted_if=(f"The 95% interval of the paired loss ratio local / full − 1 lies above "
                f"+{LOSS_MARGIN:.0%}, while the trained local model's receptive field is "
                "exactly L·(w − 1) in every seed."),
    thresholds=(
        Threshold("cost of skipping distant pairs: local / full loss − 1", arm="local",
                  metric="loss_ratio", unit="fraction of full attention's loss",
                  **within(LOSS_MARGIN)),
        Threshold("the local model skips distant pairs (receptive field by gradient "
                  "is exactly L·(w − 1))", arm="local", metric="rf_exact", stat="range",
                  supports="== 1", control=True, unit="1 = exact in the seed"),
        Threshold("every arm's tuned rate inside its grid (arms at an edge)", arm="local",
                  metric="rates_at_edge", stat="range", supports="== 0", control=True,
                  unit="arms"),
    ),
    extensions=(
        Extension("where trained full heads look",
                  f"Do trained full-attention heads put most of their mass (more than half, by "
                  f"more than {MASS_MARGIN * 100:.0f} points) within the last {WINDOW} keys?",
                  (Threshold.beyond(f"trained full heads' mass within the last {WINDOW} keys",
                                    arm="full", metric="local_mass", reference=0.5,
                                    margin=MASS_MARGIN, direction=">",
                                    unit="fraction of attention mass"),)),
    ),
    anchors=(
        Anchor("Long Range Arena average, BigBird", 55.01,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("Long Range Arena average, Longformer", 53.46,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("sequence length below which full attention is advised", "1024 tokens",
               "Zaheer et al. 2020, BigBird (and its Hugging Face implementation notes)"),
    ),
    tuning_seeds=(TUNE_SEED,),
    axes=(axes.scale(models.TRAINED["gpt"][:2]),),
    bits_metric=("full", "loss"),
    version=2,
    revisions=("v2: the trained regime of issue 38 (micro-20 at 20 tokens per parameter, "
               "scale over pico-20 and micro-20 at the same ratio; v1: mini at 2.3), a 4-rate "
               "grid per width with the edge rule and its control (v1: {1e-3, 3e-3}); the "
               "context axis dropped by cost; window, margins and extension unchanged",),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
