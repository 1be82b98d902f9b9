"""Claim `dynamic-sparsity`: does a learned block gate (MoBA) find the far key a window misses?

    python -m experiments claim dynamic-sparsity [--quick]

**The preface's question.** "Learned dynamic sparsity patterns that adapt to input structure":
a pattern that *adapts to the input* should read the keys this input needs. Operationalised on
multi-query associative recall (`k1 v1 … kn vn SEP q1 a1 … qm am`), where each query's key
sits anew in every sequence, so only an input-dependent choice can find it. At an equal
largest key budget (measured from the sown scores), `moba` (own block plus the top-k past
blocks its gate `q · mean(k)` picks) against `local` (a window as wide), both against `full`
causal softmax, trained alike. Metric: recall **accuracy** on held-out batches, margin **10
points**: **adapts** (`moba − local` above +10) and **reads what full attention reads** (`moba −
full` above −10). Controls, each blocking what needs it: full attention learns the task
(accuracy ≥ 0.5), and the window fails it (`local − full` ≤ −10; only *adapts* needs it).

**Extension** (own verdict): *natural text at the measured sparsity*: on stdlib, MoBA with
blocks of `text_block` and one picked past block costs less than 1% of full attention's loss
(the fraction of causal keys skipped is measured). Reported beside it: the trained full model
read through the MoBA pattern without retraining (`switch`).

**Protocol** (v1). The recall setting was found on tuning seed 100 only: 4 pairs (4 keys, 4
values, 4 queries; 17 tokens), 800 steps at batch 32; MoBA's blocks of 2 with one picked past
block and the window of 4 both give at most 4 keys per query. The rate is tuned on seed 100
for `full` from `{1e-3, 3e-3}` and shared by the three arms (sharing full's rate can only
handicap MoBA). Stdlib: 150 steps, rate tuned alike. Seeds 0–4, every arm from scratch at the
`mini` shape. Scale axis: the whole protocol again at GPT `micro`, `mini`, `small` and Llama
`llama-micro`, `llama-mini`, `llama-small` (RoPE before the variant; each key/value head
repeated to its query heads; keys read are counted on `llama-micro` by tests). Context axis
(never the verdict, `at_length`): `T − 16` distractors between the pairs and the queries at
T = 16, 64, 256, 1024, with tokens per step kept and the rate tuned again per `T`; the answers
seen per step fall as `1/T`, so that trend mixes distance with supervision. `--quick`: one
seed, one rate, 30 steps, indicative only.

Not yet on the trained regime (issue 38): the grid has two rates and no edge rule, and the
stdlib half sees 2.3 tokens per parameter at `mini`; the next registration trains at 20
tokens per parameter with ≥ 4 rates under the edge rule. Results: `results/dynamic-sparsity/`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import transformer
from experiments import data as data_lib
from experiments import models
from experiments.lab.attention_arms import LEARNING_RATES, config_at, within
from experiments.lab.sparsity import RecallSource, recall_arms, text_arms
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold

TUNE_SEED = 100
ACC_MARGIN = 0.1  # 10 points of answer accuracy
LOSS_MARGIN = 0.01  # 1% of full attention's stdlib loss
LEARNS, FAILS = "full attention learns recall", "the window fails recall"


@dataclasses.dataclass(frozen=True)
class DynamicSparsitySizes(Sizes):
  """What a run of `dynamic-sparsity` reads about its size.

  Attributes:
    model: the shared model (`experiments.models.config`) whose shape every arm of both tasks
      is trained at from scratch, with the arm's attention (`recall_configs`,
      `text_configs`); `mini` is the `tiny` preset.
    recall_pairs: key–value pairs per recall sequence.
    recall_queries: queries (scored answers) per sequence.
    recall_keys: distinct key ids the keys are drawn from (without repeats).
    recall_values: distinct value ids.
    recall_block: MoBA's block size on recall (the window is `block · (1 + top_k)`).
    recall_top_k: past blocks MoBA's gate picks on recall.
    recall_steps: training steps per recall run.
    recall_batch: recall sequences per step and per exact-match batch.
    seq_len: the stdlib length `T`.
    text_block: MoBA's block size on stdlib (one picked past block).
    text_steps: training steps per stdlib run.
    text_batch: stdlib windows per step and per batch of the switch's losses.
    learning_rates: the grid rates are chosen from on the tuning seed (one rate: no tuning).
    eval_batches: held-out batches of the exact match and of the switch's losses.
    recall_probe: recall sequences whose keys read are counted.
    text_probe: stdlib windows whose keys read are counted.
    recall_filler: distractor tokens between the last pair and `SEP` (0: the registered
      layout); `at_length` sets it so that the model reads `T` tokens.

  `text_steps = 0` runs no stdlib half (the runs of `at_length`, which measure only the
  primary question).
  """

  model: str
  recall_pairs: int
  recall_queries: int
  recall_keys: int
  recall_values: int
  recall_block: int
  recall_top_k: int
  recall_steps: int
  recall_batch: int
  seq_len: int
  text_block: int
  text_steps: int
  text_batch: int
  learning_rates: tuple[float, ...]
  eval_batches: int
  recall_probe: int
  text_probe: int
  recall_filler: int = 0

  def __post_init__(self):
    for name in ("recall_filler", "text_steps"):
      if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 0):
        raise ValueError(f"DynamicSparsitySizes.{name}={getattr(self, name)!r} must be an int "
                         ">= 0. Fix: e.g. 0 (set recall_filler through at_length(sizes, T)).")

  @property
  def recall_window(self) -> int:
    """The window with MoBA's largest key budget: its own block plus `top_k` past blocks."""
    return self.recall_block * (1 + self.recall_top_k)

  @property
  def recall_len(self) -> int:
    """Tokens per recall sequence, `2 n + filler + 1 + 2 m` (the model reads all but the last)."""
    return 2 * self.recall_pairs + self.recall_filler + 1 + 2 * self.recall_queries


TEXT_TOP_K = 1
# Recall context T of a full run (tokens read): 16 is the registered layout, then 4x, 16x, 64x.
CONTEXT_LENGTHS = (16, 64, 256, 1024)

QUICK = DynamicSparsitySizes(model="mini", recall_pairs=4, recall_queries=4, recall_keys=4,
                             recall_values=4, recall_block=2, recall_top_k=1, recall_steps=30,
                             recall_batch=16, seq_len=128, text_block=16, text_steps=30,
                             text_batch=8, learning_rates=(3e-3,), eval_batches=4,
                             recall_probe=8, text_probe=4)
FULL = DynamicSparsitySizes(model="mini", recall_pairs=4, recall_queries=4, recall_keys=4,
                            recall_values=4, recall_block=2, recall_top_k=1, recall_steps=800,
                            recall_batch=32, seq_len=128, text_block=16, text_steps=150,
                            text_batch=8, learning_rates=LEARNING_RATES, eval_batches=4,
                            recall_probe=8, text_probe=4)


def at_length(sizes: DynamicSparsitySizes, T: int) -> DynamicSparsitySizes:
  """`sizes` at context length `T`: recall with distractors between the pairs and the queries.

  The model reads `T` tokens (a sequence is `T + 1`: the last answer is only predicted). The
  pairs stay at the start and the queries at the end; `T − (2 n + 2 m)` distractors fill the gap
  (`recall_filler`), so every key lies about `T` positions before its query. The key budget is
  `sizes`'s (the window and MoBA's blocks and top-k), so at long `T` both read a far smaller
  fraction of the sequence. `recall_batch` shrinks so the tokens read per step stay what they
  are in `sizes` (at least one sequence); `eval_batches` grows so the answers scored stay as
  many; `recall_probe` shrinks like the batch. The model (`sizes.model`), steps and the rate
  grid are kept (the rate is tuned again at `T` on the tuning seed). The stdlib half is not
  run (`text_steps = 0`): only the primary question is measured against `T`. The model's
  `max_len` follows `T` in `run` (`recall_configs`).

  Args:
    sizes: the claim's `FULL` (or `QUICK`) sizes.
    T: tokens the model reads: at least `2 n + 2 m` (the layout without filler), a multiple
      of `recall_block`.

  Returns:
    The sizes of the run at `T`.

  Example:
    >>> from experiments.claims import dynamic_sparsity as ds
    >>> z = ds.at_length(ds.FULL, 256)
    >>> z.recall_len - 1, z.recall_filler, z.recall_batch, z.eval_batches, z.text_steps
    (256, 240, 2, 64, 0)
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
      sizes, recall_filler=T - bare, recall_batch=batch,
      eval_batches=-(-answers_scored // batch),
      recall_probe=max(1, sizes.recall_probe * (sizes.recall_len - 1) // T), text_steps=0)


def run(spec: Spec) -> dict:
  """Recall, then (unless `text_steps = 0`) stdlib and the switch; see the module docstring."""
  z = spec.sizes
  text = z.text_steps > 0
  runs = {arm: {s: {} for s in spec.seeds}
          for arm in ("full", "local", "moba") + (("switch",) if text else ())}
  rec = recall_arms(recall_configs(z), recall_source(z), z, spec.seeds, runs,
                    tune_seed=TUNE_SEED, log=spec.log)
  txt = text_arms(text_configs(z), data_lib.source("stdlib", z.seq_len), z, spec.seeds,
                  runs, tune_seed=TUNE_SEED, log=spec.log) if text else None

  def mean(arm, k):
    return float(np.mean([runs[arm][s][k] for s in spec.seeds]))

  tuned = len(z.learning_rates) > 1

  def losses(t):
    return (": losses " + ", ".join(f"{v:.3f}" for v in t["val_loss"])) if t else ""

  rates = f"recall {rec['lr']:g} (full's{losses(rec['tuning'])})" + (
      f", stdlib {txt['lr']:g} (full's{losses(txt['tuning'])}), each shared by every arm of "
      "its task" if text else ", shared by every arm")
  arms = ("full", "local", "moba")
  filler = (f", {z.recall_filler} distractors between the pairs and SEP"
            if z.recall_filler else "")
  shape = recall_configs(z)["full"]
  notes = [
      f"- Models: the `{z.model}` shape from scratch ({models.family(shape)}: d "
      f"{shape.d_model}, L {shape.n_layers}, H {shape.n_heads} on {shape.n_kv_heads} key/value "
      f"heads, {shape.positions} positions; {models.param_count(z.model):,} parameters at "
      "max_len 256), every arm alike but for the attention.",
      f"- Recall ({z.recall_pairs} pairs from {z.recall_keys} keys, {z.recall_values} values, "
      f"{z.recall_queries} queries; {z.recall_len} tokens{filler}; {z.recall_steps} steps, "
      f"batch {z.recall_batch}): accuracy (chance {1 / z.recall_values:.2f}) " + ", ".join(
          f"{a} {mean(a, 'recall_acc'):.3f}" for a in arms) + "; exact match " + ", ".join(
          f"{a} {mean(a, 'recall_em'):.3f}" for a in arms)
      + f"; local is a window of {z.recall_window}, moba blocks of {z.recall_block} with "
      f"top-{z.recall_top_k}; keys read per query (measured): " + ", ".join(
          f"{a} {mean(a, 'recall_keys'):.2f}" for a in arms) + ".",
  ]
  if text:
    sparsity = mean("moba", "sparsity")
    notes += [
        f"- Stdlib at T = {z.seq_len} ({z.text_steps} steps, batch {z.text_batch}): full "
        f"{mean('full', 'loss'):.4f}, moba (blocks of {z.text_block}, top-{TEXT_TOP_K}) "
        f"{mean('moba', 'loss'):.4f} nats, paired cost {mean('moba', 'loss_ratio'):+.2%} of "
        f"full's loss (margin {LOSS_MARGIN:.0%}) at a measured {sparsity:.1%} of causal keys "
        f"skipped ({mean('moba', 'text_keys'):.1f} keys per query of "
        f"{(z.seq_len + 1) / 2:.1f}).",
        f"- Switching the trained full model to moba without retraining: loss "
        f"{mean('switch', 'full_loss'):.4f} → {mean('switch', 'loss'):.4f} "
        f"({mean('switch', 'switch_ratio'):+.2%}).",
    ]
  else:
    notes.append("- No stdlib half in this run (a run at another length measures only the "
                 "primary question).")
  notes.append((f"- Rates chosen on tuning seed {TUNE_SEED} from {list(z.learning_rates)}: "
                if tuned else "- Not tuned (quick): ") + rates + ".")
  effects = [("recall exact match: moba − local", "moba", "local", "recall_em")]
  if text:
    effects += [("stdlib: moba − full loss", "moba", "full", "loss"),
                ("switch to moba without retraining: loss ratio", "switch", None,
                 "switch_ratio")]
  return {"setup": {"recall": {"rate": rec["lr"], "tuning": rec["tuning"],
                               "window": z.recall_window, "length": z.recall_len},
                    "text": txt and {"rate": txt["lr"], "tuning": txt["tuning"],
                                     "top_k": TEXT_TOP_K},
                    "tune_seed": TUNE_SEED,
                    "model_config": shape.to_dict()},
          "runs": runs, "notes": notes, "effects": effects}


CLAIM = Claim(
    id="dynamic-sparsity",
    topic="sparsity",
    kind="new",
    preface="Learned dynamic sparsity patterns that adapt to input structure",
    hypothesis=("At an equal largest key budget, MoBA's learned block gate adapts to where each "
                "sequence's key sits: on associative recall (full run: "
                f"{FULL.recall_pairs} pairs, budget {FULL.recall_window} keys of "
                f"{FULL.recall_len} tokens) its answer accuracy is more than "
                f"{ACC_MARGIN * 100:.0f} points above a sliding window's and less than "
                f"{ACC_MARGIN * 100:.0f} points below full attention's (tiny model, seeds 0–4, "
                "rate tuned on seed 100)."),
    refuted_if=(f"The 95% interval of moba − local accuracy lies below +{ACC_MARGIN * 100:.0f} "
                f"points, or that of moba − full below −{ACC_MARGIN * 100:.0f} points, while the "
                "controls they need hold."),
    thresholds=(
        Threshold.beyond("adapts: moba − local recall accuracy", arm="moba",
                         metric="recall_acc", baseline="local", margin=ACC_MARGIN,
                         direction=">", needs=(LEARNS, FAILS), unit="fraction of answers"),
        Threshold("reads what full reads: moba − full recall accuracy", arm="moba",
                  metric="recall_acc", baseline="full", needs=(LEARNS,),
                  unit="fraction of answers", **within(ACC_MARGIN, ">")),
        Threshold(LEARNS, arm="full", metric="recall_acc", supports=">= 0.5", control=True,
                  unit="fraction of answers"),
        Threshold(FAILS, arm="local", metric="recall_acc", baseline="full",
                  supports=f"<= {-ACC_MARGIN}", control=True, unit="fraction of answers"),
    ),
    extensions=(
        Extension("natural text at the measured sparsity",
                  f"On stdlib, does MoBA (one picked past block) cost less than "
                  f"{LOSS_MARGIN:.0%} of full attention's loss?",
                  (Threshold("moba / full loss − 1 (stdlib)", arm="moba", metric="loss_ratio",
                             unit="fraction of full attention's loss", **within(LOSS_MARGIN)),)),
    ),
    anchors=(
        Anchor("MoBA: continued training needed; LM loss close to full attention at ~81% "
               "sparsity", "trained with MoBA, not switched",
               "Lu et al. 2025, MoBA: Mixture of Block Attention for Long-Context LLMs"),
        Anchor("NSA: natively trainable sparse attention matches/exceeds full attention",
               "trained end to end", "Yuan et al. 2025, Native Sparse Attention"),
    ),
    tuning_seeds=(TUNE_SEED,),
    scale_models=models.CPU_SCALE["gpt"] + models.CPU_SCALE["llama"],
    run=run,
    QUICK=QUICK,
    FULL=FULL,
    context_lengths=CONTEXT_LENGTHS,
    at_length=at_length,
)


def recall_configs(z: DynamicSparsitySizes) -> dict[str, transformer.Config]:
  """The recall arms at `z.model`'s shape, `max_len` reaching the `T` tokens they read.

  `full` causal softmax; `local` a window of `z.recall_window` in blocks of `z.recall_block`;
  `moba` its own block plus the `z.recall_top_k` past blocks its gate picks. Only the
  attention differs (`attention_arms.config_at`); at `mini` the shape is the `tiny` preset.

  Example:
    >>> from experiments.claims import dynamic_sparsity as ds
    >>> import dataclasses
    >>> cfg = ds.recall_configs(dataclasses.replace(ds.FULL, model="llama-mini"))["moba"]
    >>> cfg.n_heads, cfg.n_kv_heads, cfg.positions, cfg.block_size, cfg.top_k_blocks
    (4, 2, 'rope', 2, 1)
  """
  T = z.recall_len - 1  # the model reads all but the last answer
  return {"full": config_at(T, model=z.model),
          "local": config_at(T, model=z.model, attention="local", window=z.recall_window,
                             block_size=z.recall_block),
          "moba": config_at(T, model=z.model, attention="moba", block_size=z.recall_block,
                            top_k_blocks=z.recall_top_k)}


def text_configs(z: DynamicSparsitySizes) -> dict[str, transformer.Config]:
  """The stdlib arms at `z.model`'s shape: `full`, and `moba` (blocks of `z.text_block`,
  `TEXT_TOP_K` picked past blocks)."""
  return {"full": config_at(z.seq_len, model=z.model),
          "moba": config_at(z.seq_len, model=z.model, attention="moba", block_size=z.text_block,
                            top_k_blocks=TEXT_TOP_K)}


def recall_source(z: DynamicSparsitySizes) -> RecallSource:
  """The recall data of `z`: its pairs, queries, keys, values and distractors."""
  return RecallSource(z.recall_pairs, z.recall_queries, z.recall_keys, z.recall_values,
                      z.recall_filler)
