"""Claim `dynamic-sparsity`: does a learned block gate (MoBA) find the far key a window misses?

    python -m experiments claim dynamic-sparsity [--quick]

**Clauses** of "Learned dynamic sparsity patterns that adapt to input structure" (the headline
is their conjunction), on multi-query associative recall (`k1 v1 … kn vn SEP q1 a1 … qm am`,
each query's key anew in every sequence, so only an input-dependent choice finds it), at an
equal largest key budget: `moba` (own block plus the top-k past blocks its gate `q · mean(k)`
picks) against `local` (a window as wide) and `full` causal softmax; metric: answer accuracy
on `test` batches, margin **10 points**. ① *Patterns that adapt to input structure*: `moba −
local` above +10. ② *Learned dynamic sparsity* that keeps what attention needs: `moba − full`
above −10. Controls: full attention learns the task (≥ 0.5), the window fails it (`local −
full` ≤ −10; ① only) and every recall arm's tuned rate lies inside its grid. **Extension**:
on stdlib, MoBA (blocks of 16, one picked) costs less than 1% of full attention's loss (control:
both stdlib rates inside their grids); reported beside it, the full model read through MoBA.

**Protocol** (v4, every rule stated before its run). Every arm trains from scratch at the
`micro-20` shape (d 32, L 2, H 4) with AdamW at a constant rate, 20 tokens per parameter in
each task (recall 1,635 steps of 32 × 16 tokens; stdlib 409 of 16 × 128). Each arm of each
task has its own rate from the same grid, 0.25, 0.5, 1, 2 × the recipe's `3e-3 · 64 / d`
(pico-20 3e-3 … 2.4e-2, micro-20 1.5e-3 … 1.2e-2, mini-20 7.5e-4 … 6e-3), chosen by the mean
`val` loss of tuning seeds 110 and 111; a best edge extends the grid a step (×2 or ×½), up to
three times. **Flat-arm rule**: an arm whose mean tuning losses over the rates not excluded span
less than 0.01 nats is flat (its best rate's place is noise) and is not counted at an edge;
every other arm still at an edge fails its control. Reported: seeds 10–14, read on the `test`
split (accuracy, exact match, stdlib loss, keys read, the switch). Recall setting (v1's): 4
pairs of 4 keys and 4 values, 4 queries; blocks of 2, one picked; a window of 4. **Scale
axis**: `pico-20`, `micro-20`, `mini-20` (8× in parameters), the whole protocol per size. The
context axis (`at_length`) is declared without lengths. `--quick`: `mini`, one seed, one rate.

v2 (2026-12-05): the trained regime; v3 (2026-12-06): the edge rule up to three times and the
flat-arm rule, adopted after v2's edge control failed. v4 (2026-12-07, before any run of v4;
issue 47): the sentence in clauses ① and ②, fresh seeds 10–14 and tuning seeds 110, 111 (v1–v3:
0–4 and 100), the `test` split (`Sizes.split`; v3 read `val`), mini-20 on the scale axis; the
flat-arm rule, grids, task, budget and margins as v3. Tests:
tests/experiments/claims/test_dynamic_sparsity.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import transformer
from experiments import data as data_lib
from experiments import models
from experiments.lab.attention_arms import config_at, within
from experiments.lab.sparsity import recall_arms, recall_configs, recall_source, text_arms
from experiments.verdict import Anchor, Claim, Extension, Spec, Threshold, TrainedSizes, axes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision

SEEDS = (10, 11, 12, 13, 14)  # v4: no earlier version ran on them (v1-v3: 0-4)
TUNE_SEEDS = (110, 111)  # v4 (v1-v3: 100)
ACC_MARGIN = 0.1  # 10 points of answer accuracy
LOSS_MARGIN = 0.01  # 1% of full attention's stdlib loss
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0)  # times the shape's recipe peak rate; ratio 2, frozen
FLAT_NATS = 0.01  # an arm whose tuning losses span less is flat: not counted at an edge
LEARNS, FAILS = "full attention learns recall", "the window fails recall"
RECALL_EDGE = "every recall arm's tuned rate inside its grid (arms at an edge)"
ADAPTS = "adapts: moba − local recall accuracy"
READS = "reads what full reads: moba − full recall accuracy"
TEXT_EDGE = "both stdlib arms' tuned rates inside their grids (arms at an edge)"


@dataclasses.dataclass(frozen=True)
class DynamicSparsitySizes(TrainedSizes):
  """What a run of `dynamic-sparsity` reads about its size.

  Attributes:
    model: the shared model (`experiments.models.config`) whose shape every arm of both tasks
      is trained at from scratch, with the arm's attention (`recall_configs`, `text_configs`).
    recall_pairs: key–value pairs per recall sequence.
    recall_queries: queries (scored answers) per sequence.
    recall_keys: distinct key ids the keys are drawn from (without repeats).
    recall_values: distinct value ids.
    recall_block: MoBA's block size on recall (the window is `block · (1 + top_k)`).
    recall_top_k: past blocks MoBA's gate picks on recall.
    recall_steps: training steps per recall run; None: `TOKENS_PER_PARAM` tokens read per
      parameter of `model` (`recall_train_steps`).
    recall_batch: recall sequences per step and per exact-match batch.
    steps: stdlib steps per run; None: `TOKENS_PER_PARAM` tokens per parameter
      (`budget_steps`).
    batch_size: stdlib windows per step and per batch of the switch's losses.
    seq_len: the stdlib length `T`.
    text_block: MoBA's block size on stdlib (one picked past block).
    rate_factors: every arm's grid, as multiples of `model`'s recipe peak rate (one factor:
      nothing is tuned).
    extend: rates tuning may add beyond a winning edge (`attention_arms.tune_rate`).
    eval_batches: held-out batches of the exact match and of the switch's losses.
    recall_probe: recall sequences whose keys read are counted.
    text_probe: stdlib windows whose keys read are counted.
    text: whether the stdlib half runs (False in the runs of `at_length`).
    recall_filler: distractor tokens between the last pair and `SEP` (0: the registered
      layout); `at_length` sets it so that the model reads `T` tokens.
    flat_nats: an arm whose tuning losses span less than this over its grid is flat (it
      learned the same at every rate) and is not counted at an edge (`edge.flat`); 0: never.
    split: where the reported runs are read (`val` up to v3; `test` from v4); tuning reads
      `val`.
  """

  model: str
  recall_pairs: int
  recall_queries: int
  recall_keys: int
  recall_values: int
  recall_block: int
  recall_top_k: int
  recall_steps: int | None
  recall_batch: int
  steps: int | None
  batch_size: int
  seq_len: int
  text_block: int
  rate_factors: tuple[float, ...]
  extend: int
  eval_batches: int
  recall_probe: int
  text_probe: int
  text: bool = True
  recall_filler: int = 0
  flat_nats: float = 0.0
  split: str = "val"

  def __post_init__(self):
    if not (isinstance(self.recall_filler, int) and self.recall_filler >= 0):
      raise ValueError(f"DynamicSparsitySizes.recall_filler={self.recall_filler!r} must be an "
                       "int >= 0. Fix: e.g. 0 (set it through at_length(sizes, T)).")

  @property
  def recall_window(self) -> int:
    """The window with MoBA's largest key budget: its own block plus `top_k` past blocks."""
    return self.recall_block * (1 + self.recall_top_k)

  @property
  def recall_len(self) -> int:
    """Tokens per recall sequence, `2 n + filler + 1 + 2 m` (the model reads all but the last)."""
    return 2 * self.recall_pairs + self.recall_filler + 1 + 2 * self.recall_queries

  @property
  def recall_train_steps(self) -> int:
    """`recall_steps`, or (None) the steps that read `TOKENS_PER_PARAM` tokens per parameter."""
    if self.recall_steps is not None:
      return self.recall_steps
    return math.ceil(models.TOKENS_PER_PARAM * models.param_count(self.model)
                     / (self.recall_batch * (self.recall_len - 1)))

  @property
  def rates(self) -> tuple[float, ...]:
    """The rate grid: `rate_factors` times `model`'s recipe peak rate (`3e-3 · 64 / d`)."""
    peak = models.RECIPES[self.model].learning_rate if self.model in models.RECIPES else 3e-3
    return tuple(f * peak for f in self.rate_factors)


TEXT_TOP_K = 1

QUICK = DynamicSparsitySizes(model="mini", recall_pairs=4, recall_queries=4, recall_keys=4,
                             recall_values=4, recall_block=2, recall_top_k=1, recall_steps=30,
                             recall_batch=16, steps=30, batch_size=8, seq_len=128,
                             text_block=16, rate_factors=(1.0,), extend=0, eval_batches=4,
                             recall_probe=8, text_probe=4, split="test")
FULL = DynamicSparsitySizes(model="micro-20", recall_pairs=4, recall_queries=4, recall_keys=4,
                            recall_values=4, recall_block=2, recall_top_k=1, recall_steps=None,
                            recall_batch=32, steps=None, batch_size=16, seq_len=128,
                            text_block=16, rate_factors=RATE_FACTORS, extend=3,
                            eval_batches=4, recall_probe=8, text_probe=4, flat_nats=FLAT_NATS,
                            split="test")


def at_length(sizes: DynamicSparsitySizes, T: int) -> DynamicSparsitySizes:
  """`sizes` at context length `T`: recall with distractors between the pairs and the queries.

  The model reads `T` tokens (a sequence is `T + 1`: the last answer is only predicted). The
  pairs stay at the start and the queries at the end; `T − (2 n + 2 m)` distractors fill the gap
  (`recall_filler`), so every key lies about `T` positions before its query. The key budget is
  `sizes`'s, so at long `T` both read a far smaller fraction of the sequence. `recall_batch`
  shrinks so the tokens read per step stay what they are in `sizes` (at least one sequence) and
  the steps are `sizes`'s (so the tokens per parameter too); `eval_batches` grows so the
  answers scored stay as many; `recall_probe` shrinks like the batch. The model and the rate
  grid are kept (the rates are tuned again at `T`). The stdlib half is not run (`text=False`).

  Args:
    sizes: the claim's `FULL` (or `QUICK`) sizes.
    T: tokens the model reads: at least `2 n + 2 m` (the layout without filler), a multiple
      of `recall_block`.

  Returns:
    The sizes of the run at `T`.

  Example:
    >>> from experiments.claims import dynamic_sparsity as ds
    >>> z = ds.at_length(ds.FULL, 256)
    >>> z.recall_len - 1, z.recall_filler, z.recall_batch, z.eval_batches, z.recall_steps, z.text
    (256, 240, 2, 64, 1635, False)
  """
  bare = 2 * sizes.recall_pairs + 2 * sizes.recall_queries
  if not isinstance(T, int) or isinstance(T, bool) or T < bare or T % sizes.recall_block:
    raise ValueError(f"dynamic-sparsity: context length T={T!r} must hold the recall layout "
                     f"({sizes.recall_pairs} pairs, SEP, {sizes.recall_queries} queries: "
                     f"T >= {bare}) and be a multiple of MoBA's blocks ({sizes.recall_block}). "
                     f"Fix: e.g. T = {max(bare, 64)}, 256 or 1024.")
  if T > bare and sizes.recall_keys + sizes.recall_values >= data_lib.SEP:
    raise ValueError(f"dynamic-sparsity: recall_keys + recall_values = "
                     f"{sizes.recall_keys + sizes.recall_values} leaves no id below SEP = "
                     f"{data_lib.SEP} for the distractors at T={T}. Fix: fewer keys or values.")
  if T == sizes.recall_len - 1:  # the sizes' own length: their run (the runner reuses it)
    return sizes
  tokens = sizes.recall_batch * (sizes.recall_len - 1)
  batch = max(1, tokens // T)
  answers_scored = sizes.eval_batches * sizes.recall_batch
  return dataclasses.replace(
      sizes, recall_filler=T - bare, recall_batch=batch, recall_steps=sizes.recall_train_steps,
      eval_batches=-(-answers_scored // batch),
      recall_probe=max(1, sizes.recall_probe * (sizes.recall_len - 1) // T), text=False)


def run(spec: Spec) -> dict:
  """Recall, then (unless `text` is False) stdlib and the switch; see the module docstring."""
  z = spec.sizes
  runs = {arm: {s: {} for s in spec.seeds}
          for arm in ("full", "local", "moba") + (("switch",) if z.text else ())}
  rec = recall_arms(recall_configs(z), recall_source(z), z, spec.seeds, runs,
                    tuning_seeds=TUNE_SEEDS, log=spec.log)
  txt = text_arms(text_configs(z), data_lib.source("stdlib", z.seq_len), z, spec.seeds,
                  runs, tuning_seeds=TUNE_SEEDS, log=spec.log) if z.text else None
  for s in spec.seeds:
    runs["moba"][s]["recall_rates_at_edge"] = float(len(rec["at_edge"]))
    if txt:
      runs["moba"][s]["text_rates_at_edge"] = float(len(txt["at_edge"]))

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  arms = ("full", "local", "moba")
  filler = (f", {z.recall_filler} distractors between the pairs and SEP"
            if z.recall_filler else "")
  shape = recall_configs(z)["full"]
  n = models.param_count(z.model)
  recall_steps = z.recall_train_steps
  notes = [
      f"Models: the `{z.model}` shape from scratch ({models.family(shape)}: d "
      f"{shape.d_model}, L {shape.n_layers}, H {shape.n_heads} on {shape.n_kv_heads} key/value "
      f"heads, {shape.positions} positions; {n:,} parameters at max_len 256), every arm alike "
      "but for the attention, AdamW at a constant rate.",
      f"Recall ({z.recall_pairs} pairs from {z.recall_keys} keys, {z.recall_values} values, "
      f"{z.recall_queries} queries; {z.recall_len} tokens{filler}; {recall_steps} steps, "
      f"batch {z.recall_batch}: {recall_steps * z.recall_batch * (z.recall_len - 1) / n:.1f} "
      f"tokens read and {recall_steps * z.recall_batch * z.recall_queries / n:.1f} scored "
      f"answers per parameter): accuracy (chance {1 / z.recall_values:.2f}) " + ", ".join(
          f"{a} {mean(a, 'recall_acc'):.3f}" for a in arms) + "; exact match " + ", ".join(
          f"{a} {mean(a, 'recall_em'):.3f}" for a in arms)
      + f"; local is a window of {z.recall_window}, moba blocks of {z.recall_block} with "
      f"top-{z.recall_top_k}; keys read per query (measured): " + ", ".join(
          f"{a} {mean(a, 'recall_keys'):.2f}" for a in arms) + ".",
  ]
  if txt:
    steps = z.budget_steps()
    notes += [
        f"Stdlib at T = {z.seq_len} ({steps} steps, batch {z.batch_size}: "
        f"{z.train_tokens() / n:.1f} tokens per parameter): full {mean('full', 'loss'):.4f}, "
        f"moba (blocks of {z.text_block}, top-{TEXT_TOP_K}) {mean('moba', 'loss'):.4f} nats "
        f"per byte, paired cost {mean('moba', 'loss_ratio'):+.2%} of full's loss (margin "
        f"{LOSS_MARGIN:.0%}) at a measured {mean('moba', 'sparsity'):.1%} of causal keys "
        f"skipped ({mean('moba', 'text_keys'):.1f} keys per query of "
        f"{(z.seq_len + 1) / 2:.1f}).",
        f"Switching the trained full model to moba without retraining: loss "
        f"{mean('switch', 'full_loss'):.4f} → {mean('switch', 'loss'):.4f} "
        f"({mean('switch', 'switch_ratio'):+.2%}).",
    ]
  else:
    notes.append("No stdlib half in this run (a run at another length measures only the "
                 "primary question).")
  rule = (f"mean val loss on tuning seeds {TUNE_SEEDS}, each arm apart; {list(z.rate_factors)} × "
          f"the recipe's peak, extended up to {z.extend} step(s) past a winning edge"
          + (f", an arm spanning < {z.flat_nats:g} nats flat" if z.flat_nats else ""))
  notes += [{"tuned": r["tuning"], "read": f"{task}: {rule}", "fixed": f"{task}, not tuned (quick)"}
            for task, r in (("recall", rec), ("stdlib", txt)) if r]
  edges = rec["at_edge"] + (txt["at_edge"] if txt else [])
  if edges:
    notes.append(f"Still at an edge: {', '.join(edges)}.")
  effects = [("recall exact match: moba − local", "moba", "local", "recall_em")]
  if txt:
    effects += [("stdlib: moba − full loss", "moba", "full", "loss"),
                ("switch to moba without retraining: loss ratio", "switch", None,
                 "switch_ratio")]
  return {"setup": {"recall": {**rec, "window": z.recall_window, "length": z.recall_len,
                               "steps": recall_steps},
                    "text": txt and {**txt, "top_k": TEXT_TOP_K, "steps": z.budget_steps()},
                    "tuning_seeds": list(TUNE_SEEDS),
                    "model_config": shape.to_dict()},
          "runs": runs, "notes": notes, "effects": effects, "split": z.split}


CLAIM = Claim(
    id="dynamic-sparsity",
    topic="sparsity",
    kind="new",
    preface="Learned dynamic sparsity patterns that adapt to input structure",
    hypothesis=("At an equal largest key budget, MoBA's learned block gate adapts to where each "
                "sequence's key sits: on associative recall (full run: "
                f"{FULL.recall_pairs} pairs, budget {FULL.recall_window} keys of "
                f"{FULL.recall_len} tokens) its test-split answer accuracy is ① more than "
                f"{ACC_MARGIN * 100:.0f} points above a sliding window's and ② less than "
                f"{ACC_MARGIN * 100:.0f} points below full attention's (micro-20 shape at 20 "
                "tokens per parameter, seeds 10–14, each arm's rate tuned on seeds 110 and "
                "111)."),
    refuted_if=(f"The 95% interval of moba − local accuracy lies below +{ACC_MARGIN * 100:.0f} "
                f"points, or that of moba − full below −{ACC_MARGIN * 100:.0f} points, while the "
                "controls they need hold."),
    thresholds=(
        Threshold.beyond(ADAPTS, arm="moba",
                         metric="recall_acc", baseline="local", margin=ACC_MARGIN,
                         direction=">", needs=(LEARNS, FAILS, RECALL_EDGE),
                         unit="fraction of answers"),
        Threshold(READS, arm="moba",
                  metric="recall_acc", baseline="full", needs=(LEARNS, RECALL_EDGE),
                  unit="fraction of answers", **within(ACC_MARGIN, ">")),
        Threshold(LEARNS, arm="full", metric="recall_acc", supports=">= 0.5", control=True,
                  unit="fraction of answers"),
        Threshold(FAILS, arm="local", metric="recall_acc", baseline="full",
                  supports=f"<= {-ACC_MARGIN}", control=True, unit="fraction of answers"),
        Threshold(RECALL_EDGE, arm="moba", metric="recall_rates_at_edge", stat="range",
                  supports="== 0", control=True, unit="arms"),
    ),
    extensions=(
        Extension("natural text at the measured sparsity",
                  f"On stdlib, does MoBA (one picked past block) cost less than "
                  f"{LOSS_MARGIN:.0%} of full attention's loss?",
                  (Threshold("moba / full loss − 1 (stdlib)", arm="moba", metric="loss_ratio",
                             unit="fraction of full attention's loss", **within(LOSS_MARGIN)),
                   Threshold(TEXT_EDGE, arm="moba", metric="text_rates_at_edge", stat="range",
                             supports="== 0", control=True, unit="arms"))),
    ),
    anchors=(
        Anchor("MoBA: continued training needed; LM loss close to full attention at ~81% "
               "sparsity", "trained with MoBA, not switched",
               "Lu et al. 2025, MoBA: Mixture of Block Attention for Long-Context LLMs"),
        Anchor("NSA: natively trainable sparse attention matches/exceeds full attention",
               "trained end to end", "Yuan et al. 2025, Native Sparse Attention"),
    ),
    clauses=(
        Clause("patterns that adapt to input structure: moba's gate finds the key a window "
               f"as wide misses (more than {ACC_MARGIN * 100:.0f} points above it)", (ADAPTS,)),
        Clause("learned dynamic sparsity that keeps what attention reads (less than "
               f"{ACC_MARGIN * 100:.0f} points below full attention)", (READS,)),
    ),
    seeds=SEEDS,
    tuning_seeds=TUNE_SEEDS,
    axes=(axes.scale(models.TRAINED["gpt"]), axes.context((), at_length)),
    bits_metric=("full", "loss"),
    version=4,
    revisions=("v2: the trained regime of issue 38: micro-20 at 20 tokens per parameter in "
               "both tasks (v1: mini, recall 3.1 and stdlib 1.2 tokens per parameter), every "
               "arm tuned apart on a 4-rate ratio-2 grid with the edge rule and its controls "
               "(v1: full's rate of {1e-3, 3e-3}, shared), scale over pico-20 and micro-20 "
               "(mini-20 and so the trend left out by cost), the context axis dropped by cost; "
               "task, key budget, metric and margins unchanged",
               "v3: the edge rule extends up to three times (v2: once; v2's run was "
               "inconclusive by its edge control alone) and an arm whose tuning losses span "
               "less than 0.01 nats is flat, not counted at an edge; nothing else changed",
               Revision(4, "protocol",
                        "issue 47, registered before any run of v4: v3's flat-arm rule was "
                        "adopted after v2's result, so v4 confirms on fresh seeds 10-14 and "
                        "tuning seeds 110, 111 (v1-v3: 0-4 and 100), the rate chosen on their "
                        "mean val loss; the rules stated before the run: every arm of each "
                        "task tuned apart on 0.25, 0.5, 1, 2 x the recipe's 3e-3 * 64 / d, a "
                        "best edge extended up to three times, an arm whose mean tuning losses "
                        "span < 0.01 nats flat (not counted at an edge); the sentence in two "
                        "clauses (1 adapts: moba - local; 2 keeps what full reads: moba - "
                        "full); reported accuracy, losses, keys read and the switch read on "
                        "the test split (v3: val); mini-20 joins the scale axis (pico-20, "
                        "micro-20, mini-20; v2, v3 left it out by cost). Task, key budget, "
                        "grids, margins, controls and extension as v3")),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)


def text_configs(z: DynamicSparsitySizes) -> dict[str, transformer.Config]:
  """The stdlib arms at `z.model`'s shape: `full`, and `moba` (blocks of `z.text_block`,
  `TEXT_TOP_K` picked past blocks)."""
  return {"full": config_at(z.seq_len, model=z.model),
          "moba": config_at(z.seq_len, model=z.model, attention="moba", block_size=z.text_block,
                            top_k_blocks=TEXT_TOP_K)}
