"""Claim `sliding-window`: a window of 32 is enough at T = 256, and it saves time only later.

    python -m experiments claim sliding-window [--quick]

Full run (3 seeds × 2 learning rates × 2 arms at T = 256, `tiny`-sized models, 300 steps, then
a timing sweep T = 256 … 2048): designed for about 8 minutes on 2 idle CPU cores; `--quick`
(one seed, T = 128, 30 steps, timing at T = 128, 256) about 20 s.

Measured, per seed:

* **loss**: full causal softmax attention (`full`) and blocked sliding-window attention
  (`local`, window `w = 32`, blocks of 32, which computes only the blocks inside the window)
  trained alike on the stdlib corpus at T = 256 (same optimizer, same learning-rate grid, the
  best rate per arm); the key number is the paired ratio `loss_local / loss_full − 1`.
* **where trained full heads look**: on validation windows, the mean attention mass of the
  trained `full` model within the last `w` keys (`analysis.local_mass`, every head, layer
  and query row), and the fraction of heads putting more than half their mass there.
* **receptive field**: `∂ h_t / ∂ x_s` through the trained `local` model's L blocks, by
  `jax.jacrev`; the measured reach `max{t − s : ∂h_t/∂x_s ≠ 0}` must be exactly `L (w − 1)`
  and every lag up to it must be reached (`rf_exact`).

Timing (not part of the verdict; in the config's `setup` and the notes): forward + backward
of one attention layer, `softmax` vs `local`, at several T (`experiments.benchmarks.attention`),
the log-log slopes and the crossover T from which the window is faster.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import analysis
import transformer
from experiments import models
from experiments.claims.claim import Anchor, Claim, Sizes, Spec, Threshold
from experiments.lab import attention_timing
from experiments.lab.attention_arms import LEARNING_RATES, base_config, train_arm

WINDOW = 32


@dataclasses.dataclass(frozen=True)
class SlidingWindowSizes(Sizes):
  """What a run of `sliding-window` reads about its size.

  Attributes:
    steps: training steps per run.
    batch_size: windows per step.
    seq_len: the training and evaluation length `T`.
    learning_rates: the grid each arm picks its best rate from.
    probe_batch: validation windows the trained heads' attention mass is measured on.
    rf_seq_len: positions of the random input of the receptive-field measurement (more than
      `L (w − 1)`, so the whole reach is seen).
    timing_seq_lens: the `T` of the timing sweep, doubling from the first (the sweep runs
      `T = min, 2·min, … max`).
    timing_rounds: timed repetitions per `T`.
  """

  steps: int
  batch_size: int
  seq_len: int
  learning_rates: tuple[float, ...]
  probe_batch: int
  rf_seq_len: int
  timing_seq_lens: tuple[int, ...]
  timing_rounds: int

  def __post_init__(self):
    t0 = self.timing_seq_lens[0]
    if self.timing_seq_lens != tuple(t0 * 2**i for i in range(len(self.timing_seq_lens))):
      raise ValueError(f"SlidingWindowSizes.timing_seq_lens={self.timing_seq_lens!r} does not "
                       "double from its first length, but the timing sweep runs T = min, "
                       "2·min, … max. Fix: e.g. (256, 512, 1024, 2048).")


QUICK = SlidingWindowSizes(steps=30, batch_size=8, seq_len=128, learning_rates=(3e-3,),
                           probe_batch=4, rf_seq_len=128, timing_seq_lens=(128, 256),
                           timing_rounds=2)
FULL = SlidingWindowSizes(steps=300, batch_size=8, seq_len=256, learning_rates=LEARNING_RATES,
                          probe_batch=4, rf_seq_len=128, timing_seq_lens=(256, 512, 1024, 2048),
                          timing_rounds=3)


def receptive_field(params, cfg: transformer.Config, seq_len: int, key,
                    window: int | None = None) -> dict:
  """Measured reach of the block stack by gradient, against `L (w − 1)`.

  Args:
    params, cfg: the model (its blocks only: `x_TD` enters the first block).
    seq_len: positions of the random input.
    key: PRNG key of the input.
    window: the `w` to compare with (default `cfg.window`).

  Returns:
    `{"reach": max lag with a nonzero gradient, "expected": L (w − 1), "rf_exact": 1.0 when
    the nonzero lags are exactly 0 … L (w − 1), else 0.0}`.
  """
  f_l = transformer.block_fn(cfg)

  def stack(x_TD):
    for layer in range(cfg.n_layers):
      x_TD = f_l(transformer.layer(params, layer), x_TD)
    return x_TD

  x_TD = jax.random.normal(key, (seq_len, cfg.d_model))
  J_TS = np.abs(np.asarray(jax.jit(jax.jacrev(stack))(x_TD))).sum((1, 3))
  lag_TS = np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :]
  expected = cfg.n_layers * ((window or cfg.window) - 1)
  reach_mask = (lag_TS >= 0) & (lag_TS <= expected)
  nonzero = J_TS > 0
  return {"reach": float(lag_TS[nonzero].max()), "expected": float(expected),
          "rf_exact": float(np.array_equal(nonzero, reach_mask))}


def window_mass(params, cfg: transformer.Config, tokens_BT, window: int) -> dict:
  """Mean mass of trained full-attention heads within the last `window` keys."""
  weights = models.intermediates(params, cfg, tokens_BT)["blocks"]["attn"]["weights"]
  mass_LBH = np.asarray(analysis.local_mass(weights, window))  # mean over query rows
  per_head = mass_LBH.mean(1)  # (L, H)
  return {"local_mass": float(mass_LBH.mean()),
          "heads_mostly_local": float((per_head > 0.5).mean()),
          "local_mass_min_head": float(per_head.min())}


def timing(ts, rounds: int) -> dict:
  """`softmax` vs `local` (window 32, blocks of 16, 4 heads of 16) fwd and fwd+bwd."""
  res = attention_timing.run(max(ts), min_t=min(ts), rounds=rounds, heads=4, d_head=16,
                             block_size=16,
                             variants=("softmax", "local"))
  out = {"T": res["T"]}
  for name, row in res["variants"].items():
    out[name] = {k: row.get(k) for k in ("fwd", "bwd", "slope_fwd", "slope_bwd",
                                         "crossover_fwd", "crossover_bwd")}
  return out


def _t(x) -> str:
  return "never on the grid" if x is None else f"{x:.0f}"


def run(spec: Spec) -> dict:
  """Trains both arms, measures mass and reach, then times; see the module docstring."""
  z = spec.sizes
  steps, batch_size, seq_len, lrs = z.steps, z.batch_size, z.seq_len, z.learning_rates
  arms = {"full": base_config(), "local": base_config(attention="local", window=WINDOW,
                                                       block_size=WINDOW)}
  trained, runs = {}, {}
  for arm, cfg in arms.items():
    spec.log(f"  sliding-window: {arm}: stdlib T={seq_len}")
    trained[arm] = train_arm(cfg, spec.seeds, data="stdlib", steps=steps, batch_size=batch_size,
                             seq_len=seq_len, learning_rates=lrs)
    runs[arm] = {s: {"loss": m["loss"]} for s, m in trained[arm]["per_seed"].items()}
  for s in spec.seeds:
    runs["local"][s]["loss_ratio"] = runs["local"][s]["loss"] / runs["full"][s]["loss"] - 1
    tokens = models.val_tokens(seq_len, z.probe_batch, s)
    runs["full"][s].update(window_mass(trained["full"]["params"][s], arms["full"], tokens,
                                       WINDOW))
    rf = receptive_field(trained["local"]["params"][s], arms["local"], z.rf_seq_len,
                         jax.random.key(s))
    runs["local"][s].update(rf)
  spec.log("  sliding-window: timing softmax vs local")
  tm = timing(z.timing_seq_lens, z.timing_rounds)
  first = spec.seeds[0]

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  loc = tm["local"]
  notes = [
      f"- Loss at T={seq_len}: full {mean('full', 'loss'):.4f}, local (w={WINDOW}) "
      f"{mean('local', 'loss'):.4f}; paired ratio {mean('local', 'loss_ratio'):+.2%}.",
      f"- Trained full-attention heads: {mean('full', 'local_mass'):.1%} of their attention "
      f"mass lies within the last {WINDOW} keys (mean over heads, layers, rows); "
      f"{mean('full', 'heads_mostly_local'):.0%} of heads put more than half there; the least "
      f"local head {mean('full', 'local_mass_min_head'):.1%}.",
      f"- Receptive field of the trained local model by gradient (seed {first}): reach "
      f"{runs['local'][first]['reach']:.0f} = L(w−1) = {runs['local'][first]['expected']:.0f}; "
      f"exact in {int(sum(runs['local'][s]['rf_exact'] for s in spec.seeds))}/"
      f"{len(spec.seeds)} seeds.",
      f"- One attention layer (4 heads × 16, blocks of 16), T = {tm['T']}: fwd+bwd ms softmax "
      + "/".join(f"{x * 1e3:.2f}" for x in tm["softmax"]["bwd"]) + ", local "
      + "/".join(f"{x * 1e3:.2f}" for x in loc["bwd"])
      + f"; log-log slope softmax {tm['softmax']['slope_bwd']:.2f}, local "
      f"{loc['slope_bwd']:.2f}; crossover T (fwd+bwd) {_t(loc['crossover_bwd'])}, forward "
      f"only {_t(loc['crossover_fwd'])} (BigBird advises full attention below 1024 tokens); "
      f"{jax.default_backend()}, machine shared.",
      f"- Learning rate per arm from the grid {list(lrs)}: full {trained['full']['lr']}, local "
      f"{trained['local']['lr']}.",
  ]
  return {"setup": {"window": WINDOW, "chosen_lr": {a: t["lr"] for a, t in trained.items()},
                    "timing": tm, "model_config": arms["local"].to_dict()},
          "runs": runs, "notes": notes,
          "effects": [("local − full: stdlib loss", "local", "full", "loss")]}


CLAIM = Claim(
    id="sliding-window",
    topic="sparsity",
    kind="existing",
    preface=("Sparse attention (Longformer, BigBird) scales to long documents by skipping "
             "distant token pairs"),
    hypothesis=(f"At T = 256 on the stdlib corpus, blocked sliding-window attention with "
                f"w = {WINDOW} is within 2% of full attention's validation loss (tiny model, "
                f"3 seeds, same learning-rate grid) because trained full-attention heads put "
                f"most (> 50%) of their attention mass within the last {WINDOW} keys; the "
                "receptive field after L layers is exactly L·(w − 1), by gradient."),
    refuted_if=("The paired loss ratio's 95% interval lies wholly above +2%, or trained full "
                "heads put less than half their mass within the window (whole interval), or "
                "the measured receptive field differs from L·(w − 1) in any seed."),
    thresholds=(
        Threshold("local / full loss − 1 (stdlib, T = 256)", arm="local", metric="loss_ratio",
                  supports="<= 0.02", refutes="> 0.02"),
        Threshold(f"trained full heads' mass within the last {WINDOW} keys", arm="full",
                  metric="local_mass", supports=">= 0.5", refutes="< 0.5"),
        Threshold("receptive field by gradient is exactly L·(w − 1)", arm="local",
                  metric="rf_exact", stat="range", supports="== 1", refutes="< 1"),
    ),
    anchors=(
        Anchor("Long Range Arena average, BigBird", 55.01,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("Long Range Arena average, Longformer", 53.46,
               "Tay et al. 2021, Long Range Arena, Table 1"),
        Anchor("sequence length below which full attention is advised", "1024 tokens",
               "Zaheer et al. 2020, BigBird (and its Hugging Face implementation notes)"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
