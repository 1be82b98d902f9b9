"""Claim `adaptive-rank`: does the KV rank a sequence needs vary, and can a causal policy use it?

    python -m experiments claim adaptive-rank [--quick]

Full run (3 seeds, the shared `small` models, 256 validation sequences of 128 tokens each):
about 3–6 minutes on 2 idle CPU cores; `--quick` (the `quick` model, 64 sequences of 64
tokens) about 20 s.

Per seed, nested per-head PCA bases of the cached keys and values come from calibration
windows of the training split (`analysis.kv`), and every held-out sequence's loss is measured
with every head at each rank of a grid (`kv.rank_losses`; the bases are nested, so rank `r`
keeps the first `r` directions). Then:

* **oracle rank** (`kv.oracle_rank`): per sequence the smallest grid rank whose loss is within
  1% of its full-rank loss; its coefficient of variation over the sequences says whether the
  need varies; its correlation with the full-rank loss tests the preface's premise that hard
  inputs need high rank (Pearson and Spearman, reported whatever they are);
* **equal budget**: a budget of `ρ` coefficients per head per token on average
  (`kv.floats_per_token`); *uniform* gives every sequence rank `ρ`; the *oracle* distributes
  the budget over sequences greedily on their true loss curves (`budget_ranks`); the *causal
  policy* does the same on the curves of each sequence's first `prefix_len` tokens only (the
  rank is fixed at prefill), and is scored on the whole sequence. `recovery = (uniform −
  policy) / (uniform − oracle)` is the fraction of the oracle's gain it keeps. The key budget
  is rank 8 of 32 (4× fewer coefficients); 4 and 16 are reported too.

The control: the oracle must gain over uniform at the key budget (else recovery is undefined).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import scipy.stats

import transformer
from analysis import kv
from experiments import models
from experiments.claims.claim import Anchor, Claim, Sizes, Spec, Threshold
from transformer import latent


@dataclasses.dataclass(frozen=True)
class AdaptiveRankSizes(Sizes):
  """What a run of `adaptive-rank` reads about its size.

  Attributes:
    model: the shared base model (`experiments.models`), one per seed.
    seq_len: tokens per held-out sequence.
    n_sequences: held-out (validation-split) sequences per seed.
    prefix_len: tokens of each sequence the causal policy reads.
    n_calibration: training-split windows the PCA bases are computed from.
  """

  model: str
  seq_len: int
  n_sequences: int
  prefix_len: int
  n_calibration: int


QUICK = AdaptiveRankSizes(model="quick", seq_len=64, n_sequences=64, prefix_len=17,
                          n_calibration=8)
FULL = AdaptiveRankSizes(model="small", seq_len=128, n_sequences=256, prefix_len=33,
                         n_calibration=32)


def budget_ranks(losses_NB, ranks, budget: float) -> np.ndarray:
  """Per sequence a rank of `ranks` with mean rank `≤ budget`, greedy on the loss curves.

  All sequences start at `ranks[0]`; repeatedly, the one upgrade to the next grid rank with
  the largest loss drop per added rank is taken while the mean rank stays within the budget.

  Args:
    losses_NB: `(len(ranks), B)` losses of each sequence at each rank (increasing ranks).
    ranks: the grid.
    budget: average rank allowed per sequence.

  Returns:
    `(B,)` chosen ranks.

  Example:
    >>> import numpy as np
    >>> losses = np.array([[3.0, 2.0], [1.0, 1.9], [0.9, 1.8]])  # ranks 1, 2, 4
    >>> budget_ranks(losses, [1, 2, 4], 1.5).tolist()  # sequence 0 gains most from rank 2
    [2, 1]
  """
  losses_NB = np.asarray(losses_NB, np.float64)
  ranks = np.asarray(ranks)
  n, B = losses_NB.shape
  idx = np.zeros(B, int)
  spent, cap = float(ranks[0]) * B, float(budget) * B + 1e-9
  if spent > cap:
    raise ValueError(f"budget_ranks: budget={budget} is below the smallest rank {ranks[0]}.")
  while True:
    up = idx < n - 1
    nxt = np.minimum(idx + 1, n - 1)
    cost = np.where(up, ranks[nxt] - ranks[idx], np.inf)
    gain = losses_NB[idx, np.arange(B)] - losses_NB[nxt, np.arange(B)]
    score = np.where(up & (spent + cost <= cap), gain / cost, -np.inf)
    b = int(np.argmax(score))
    if not np.isfinite(score[b]):
      return ranks[idx]
    spent += cost[b]
    idx[b] += 1


def picked_loss(losses_NB, ranks, chosen_B) -> float:
  """Mean over sequences of each one's loss at its chosen rank."""
  row = np.searchsorted(np.asarray(ranks), np.asarray(chosen_B))
  return float(np.asarray(losses_NB)[row, np.arange(len(chosen_B))].mean())


def full_bases(params, cfg: transformer.Config, calibration_tokens) -> latent.Compression:
  """Nested PCA bases of keys and values at full rank (float32), from calibration text."""
  mk, mv = kv.kv_moments(params, cfg, np.asarray(calibration_tokens))
  full = ((cfg.d_head,) * cfg.n_kv_heads,) * cfg.n_layers
  return latent.make_compression(kv.pca_bases(mk)[0], kv.pca_bases(mv)[0], full, full, 32)


def batched_rank_losses(params, cfg, comp, tokens_BT1, ranks, batch_size: int = 64):
  """`kv.rank_losses` over batches of `batch_size` sequences: `(len(ranks), B)`."""
  tokens_BT1 = np.asarray(tokens_BT1)
  parts = [kv.rank_losses(params, cfg, comp, jnp.asarray(tokens_BT1[i:i + batch_size]), ranks)
           for i in range(0, len(tokens_BT1), batch_size)]
  return np.concatenate(parts, 1)


def measure(losses_NB, prefix_NB, ranks, budgets: dict, d_head: int, tol: float = 0.01) -> dict:
  """The claim's numbers from full-sequence and prefix loss curves (see the module docstring).

  Args:
    losses_NB: `(len(ranks), B)` whole-sequence losses per rank.
    prefix_NB: the same for each sequence's prefix.
    ranks: the grid (increasing, ending at `d_head`).
    budgets: `{arm: average rank}`, each rank on the grid.
    d_head: head width.
    tol: the oracle's "within 1%".

  Returns:
    `{"oracle": {...}, arm: {...} for each budget}`.
  """
  oracle = kv.oracle_rank(losses_NB, ranks, tol)
  rule = kv.oracle_rank(prefix_NB, ranks, tol)
  full = losses_NB[-1]
  out = {"rank_cv": float(oracle.std() / oracle.mean()), "rank_mean": float(oracle.mean()),
         "rank_std": float(oracle.std()),
         "frac_full_rank": float((oracle == d_head).mean()),
         "pearson_loss_rank": float(scipy.stats.pearsonr(full, oracle)[0])
         if oracle.std() > 0 else float("nan"),
         "spearman_loss_rank": float(scipy.stats.spearmanr(full, oracle)[0])
         if oracle.std() > 0 else float("nan"),
         "prefix_rule_rank_mean": float(rule.mean()),
         "prefix_rule_loss_rise": picked_loss(losses_NB, ranks, rule) / float(full.mean()) - 1,
         "prefix_rule_agreement": float((rule == oracle).mean()),
         "loss_full": float(full.mean())}
  per_budget = {}
  for arm, rho in budgets.items():
    uniform = float(losses_NB[list(ranks).index(rho)].mean())
    orc = picked_loss(losses_NB, ranks, budget_ranks(losses_NB, ranks, rho))
    pol_ranks = budget_ranks(prefix_NB, ranks, rho)
    pol = picked_loss(losses_NB, ranks, pol_ranks)
    gain = uniform - orc
    per_budget[arm] = {"rank": float(rho), "uniform_loss": uniform, "oracle_loss": orc,
                       "policy_loss": pol, "oracle_gain": gain, "policy_gain": uniform - pol,
                       "recovery": (uniform - pol) / gain if gain > 0 else float("nan"),
                       "policy_rank_mean": float(pol_ranks.mean())}
  return {"oracle": out, **per_budget}


def _figure(curves: dict, run_dir: str) -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  oracle, full = curves["oracle"], curves["full"]
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
  ax1.hist(oracle, bins=np.arange(0.5, oracle.max() + 1.5), color="C0")
  ax1.set(xlabel="oracle rank (smallest within 1% of full rank)", ylabel="sequences",
          title="rank each sequence needs")
  ax2.scatter(full, oracle + np.random.default_rng(0).uniform(-0.2, 0.2, len(oracle)), s=6)
  ax2.set(xlabel="full-rank loss (nats/token)", ylabel="oracle rank", title="difficulty vs rank")
  fig.tight_layout()
  fig.savefig(f"{run_dir}/adaptive_rank.png", dpi=110)
  plt.close(fig)
  return "adaptive_rank.png"


def run(spec: Spec) -> dict:
  """Measures every seed; see the module docstring."""
  z = spec.sizes
  name, seq_len, n_seq, prefix_len, n_cal = (z.model, z.seq_len, z.n_sequences, z.prefix_len,
                                             z.n_calibration)
  runs: dict = {}
  curves = None
  cfg = None
  for seed, (params, cfg) in zip(spec.seeds, models.base_models(name, spec.seeds), strict=True):
    spec.log(f"  adaptive-rank: seed {seed}")
    dh = cfg.d_head
    ranks = sorted({r for r in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if r <= dh} | {dh})
    budgets = {"budget-eighth": dh // 8, "budget-quarter": dh // 4, "budget-half": dh // 2}
    comp = full_bases(params, cfg, models.windows(seed, seq_len, n_cal, "train")[:, :-1])
    ev = models.windows(seed, seq_len, n_seq, "val")
    losses = batched_rank_losses(params, cfg, comp, ev, ranks)
    prefix = batched_rank_losses(params, cfg, comp, ev[:, :prefix_len], ranks)
    for arm, m in measure(losses, prefix, ranks, budgets, dh).items():
      runs.setdefault(arm, {})[seed] = m
    if curves is None:
      curves = {"oracle": kv.oracle_rank(losses, ranks), "full": losses[-1]}
  figure = _figure(curves, spec.run_dir)
  key = "budget-quarter"

  def mean(arm, metric):
    return float(np.mean([runs[arm][s][metric] for s in spec.seeds]))

  notes = [
      f"- Models: the shared `{name}` models; {n_seq} validation-file sequences of {seq_len} "
      f"tokens per seed; bases from {n_cal} training-split windows; rank grid {ranks}; the "
      f"causal policy reads the first {prefix_len} tokens.",
      f"- Oracle rank: mean {mean('oracle', 'rank_mean'):.2f}, CV "
      f"{mean('oracle', 'rank_cv'):.3f}, at full rank for "
      f"{mean('oracle', 'frac_full_rank'):.0%} of sequences.",
      f"- Difficulty vs needed rank: Pearson {mean('oracle', 'pearson_loss_rank'):+.3f}, "
      f"Spearman {mean('oracle', 'spearman_loss_rank'):+.3f} (full-rank loss vs oracle rank).",
      "- Equal budget (mean loss, nats/token): " + "; ".join(
          f"rank {mean(b, 'rank'):.0f}: uniform {mean(b, 'uniform_loss'):.4f}, oracle "
          f"{mean(b, 'oracle_loss'):.4f}, causal policy {mean(b, 'policy_loss'):.4f} "
          f"(recovery {mean(b, 'recovery'):.2f})" for b in runs if b.startswith("budget")) + ".",
      f"- The within-1% rule applied to the prefix: mean rank "
      f"{mean('oracle', 'prefix_rule_rank_mean'):.2f} (oracle "
      f"{mean('oracle', 'rank_mean'):.2f}), agrees with the oracle on "
      f"{mean('oracle', 'prefix_rule_agreement'):.0%} of sequences, loss rise "
      f"{mean('oracle', 'prefix_rule_loss_rise'):+.2%} over full rank.",
  ]
  return {"setup": {"ranks": ranks, "budgets": budgets, "model_config": cfg.to_dict()},
          "runs": runs, "figures": [figure], "notes": notes,
          "effects": [("Pearson(full-rank loss, oracle rank)", "oracle", None,
                       "pearson_loss_rank"),
                      ("Spearman(full-rank loss, oracle rank)", "oracle", None,
                       "spearman_loss_rank"),
                      *[(f"recovery at {b}", b, None, "recovery") for b in runs
                        if b.startswith("budget") and b != key],
                      *[(f"policy − uniform loss at {b}", b, None, "policy_gain")
                        for b in runs if b.startswith("budget")]]}


CLAIM = Claim(
    id="adaptive-rank",
    topic="decomposition",
    kind="new",
    preface=("Adaptive rank allocation—easy inputs get low-rank attention, hard inputs get "
             "full rank"),
    hypothesis=("The KV rank a held-out sequence needs (smallest uniform rank within 1% of its "
                "full-rank loss) varies across sequences with coefficient of variation ≥ 0.3, "
                "and a causal policy that allocates ranks from each sequence's prefix recovers "
                "≥ 50% of the oracle's loss gain over uniform rank at an equal average budget "
                "(rank Dh/4: 8 of 32)."),
    refuted_if=("The coefficient of variation of the needed rank is below 0.3, or the causal "
                "policy recovers less than half of the oracle's gain (whole 95% interval)."),
    thresholds=(
        Threshold("coefficient of variation of the oracle rank", arm="oracle", metric="rank_cv",
                  supports=">= 0.3", refutes="< 0.3"),
        Threshold("causal policy's recovery of the oracle gain (budget: rank Dh/4)",
                  arm="budget-quarter", metric="recovery", supports=">= 0.5", refutes="< 0.5"),
        Threshold("oracle gains over uniform at the key budget", arm="budget-quarter",
                  metric="oracle_gain", stat="range", supports="> 0", control=True),
    ),
    anchors=(
        Anchor("adaptive per-input computation", "easy inputs exit early at equal accuracy",
               "Schuster et al. 2022, Confident Adaptive Language Modeling (CALM)"),
        Anchor("rank allocation across heads/layers (static, not per input)", "Fisher-based "
               "search beats uniform", "Chang et al. 2024, Palu"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
