"""The `dynamic-sparsity` arms trained and read: recall with distractors, stdlib, keys read.

`RecallSource` is associative recall with distractors between the pairs and the queries (the
claim's context axis); `recall_arms` trains the full / local / MoBA recall arms and `text_arms`
full attention and MoBA on stdlib with the switch (the trained full model read through the
MoBA pattern), each arm at its own rate tuned on the tuning seeds (`tune_and_train`); the
reported runs, their probes and the switch read the split `z.split` (`test` for a verdict).
`keys_read` counts the keys a query actually read from the sown scores; `val_loss` is a
model's held-out loss on a source.
The arms go through `experiments.lab.attention_arms` (`tune_rate`, `train_arm`); the sizes `z`
are the claim's `DynamicSparsitySizes` (read by attribute).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import transformer
from experiments import models
from experiments.data.batch import VOCAB_SIZE, batch_rng
from experiments.data.tasks import SEP, answers_only, associative_recall
from experiments.lab import edge
from experiments.lab.attention_arms import config_at, forward, train_arm, tune_rate


@dataclasses.dataclass(frozen=True)
class RecallSource:
  """Associative recall as a data source (pure in seed, step, split).

  ``k1 v1 … kn vn [d1 … dF] SEP q1 a1 … qm am``: `associative_recall`'s sequence with
  `n_filler` distractors `d` inserted after the last pair, drawn uniformly from the ids that
  are neither a key, a value nor a marker (`[n_keys + n_values, SEP)`), so each query still
  matches exactly one earlier token and full attention can solve it at any length; the
  distance from a key to its query grows by `F`. With `n_filler = 0` (the registered
  layout) the batch is `associative_recall`'s, draw for draw.
  """

  n_pairs: int
  n_queries: int
  n_keys: int
  n_values: int
  n_filler: int = 0

  @property
  def vocab_size(self) -> int:
    return VOCAB_SIZE

  def batch(self, seed: int, step: int, batch_size: int, split: str = "train"):
    rng = batch_rng(seed, step, split)
    b = associative_recall(rng, batch_size, self.n_pairs, self.n_queries, self.n_keys,
                           self.n_values)
    if not self.n_filler:
      return b
    cut = 2 * self.n_pairs
    filler_BF = rng.integers(self.n_keys + self.n_values, SEP, (batch_size, self.n_filler))
    tokens = np.concatenate([b.tokens[:, :cut], filler_BF, b.tokens[:, cut:]], 1)
    return answers_only(tokens, cut + self.n_filler + 2 + 2 * np.arange(self.n_queries))


def keys_read(params, cfg: transformer.Config, tokens_BT) -> dict:
  """Mean keys read per query (over layers, heads, rows) and the fraction of causal keys skipped.

  Counted from the sown scores: every variant leaves `finfo.min` where it computed no score
  (or masked one), so `scores > finfo.min` are exactly the keys a query read.
  """
  scores = np.asarray(models.intermediates(params, cfg, tokens_BT)["blocks"]["attn"]["scores"])
  kr = (scores > np.finfo(np.float32).min).sum(-1).astype(np.float64)
  T = tokens_BT.shape[1]
  mean_keys = float(kr.mean())
  return {"keys_read": mean_keys, "sparsity": 1.0 - mean_keys / ((T + 1) / 2)}


def val_loss(params, cfg: transformer.Config, src, seed: int, *, n_batches: int,
             batch_size: int, split: str = "val") -> float:
  """Mean cross-entropy of a model on `n_batches` held-out batches of `src`'s `split`."""
  apply = forward(cfg)
  losses = []
  for step in range(n_batches):
    b = src.batch(seed, step, batch_size, split)
    logits = apply({"params": params}, b.tokens[:, :-1])
    losses.append(float(transformer.next_token_loss(logits, b.tokens, b.weights)))
  return float(np.mean(losses))


def tune_and_train(cfgs: dict, z, seeds, *, tuning_seeds, log, task: str, **kw) -> dict:
  """Each arm of `cfgs` at its own rate: chosen on the mean `val` loss of `tuning_seeds` over
  `z.rates` (`tune_rate`, the edge rule `z.extend` times), then trained on the reported
  `seeds` at it, read on `z.split`.

  Returns `{"trained": {arm: train_arm's dict}, "lr": {arm: rate}, "tuning": {arm: record or
  None}, "at_edge": [arms whose rate still sits at an edge of its grid, flat arms left out]}`;
  a tuning record gains `"flat"`: its losses span less than `z.flat_nats` (`edge.flat`).
  """
  tuning_seeds = tuple(tuning_seeds)
  if set(tuning_seeds) & set(seeds):
    raise ValueError(f"dynamic-sparsity: seeds {sorted(set(tuning_seeds) & set(seeds))} both "
                     "tune and report. Fix: report other seeds (e.g. 10–14).")
  out = {"trained": {}, "lr": {}, "tuning": {}, "at_edge": []}
  tune = {k: v for k, v in kw.items() if k not in ("exact_match", "em_batches")}
  for arm, cfg in cfgs.items():
    if len(z.rates) > 1:
      log(f"  dynamic-sparsity: {arm}: {task}, tuning on seeds {tuning_seeds}")
    t = tune_rate(cfg, tuning_seeds=tuning_seeds, grid=z.rates, extend=z.extend, **tune)
    log(f"  dynamic-sparsity: {arm}: {task} at {t['learning_rate']:g}")
    out["trained"][arm] = train_arm(cfg, seeds, learning_rates=(t["learning_rate"],),
                                    split=z.split, **kw)
    if t["losses"]:  # a flat arm (`z.flat_nats`) is not counted at an edge
      t["flat"] = edge.flat(t["losses"], t["excluded"], z.flat_nats)
      if t["at_edge"] and not t["flat"]:
        out["at_edge"].append(f"{task} {arm}")
    out["lr"][arm], out["tuning"][arm] = t["learning_rate"], t
  return out


def recall_arms(arms: dict, recall, z, seeds, runs: dict, *, tuning_seeds, log) -> dict:
  """Trains the three recall `arms` (configs) on `recall`, each at its own tuned rate.

  Fills `runs` (`{arm: {seed: metrics}}`) and returns the setup: rates, tunings, arms at an
  edge (`tune_and_train`).
  """
  T = z.recall_len - 1  # the model reads all but the last answer
  probe = recall.batch(seeds[0], 99_999, z.recall_probe, z.split).tokens[:, :-1]
  log(f"  dynamic-sparsity: recall ({z.recall_pairs} pairs, T={T}, "
      f"{z.recall_train_steps} steps)")
  t = tune_and_train(arms, z, seeds, tuning_seeds=tuning_seeds, log=log, task="recall",
                     data=recall, steps=z.recall_train_steps, batch_size=z.recall_batch,
                     seq_len=z.recall_len, exact_match=True, em_batches=z.eval_batches)
  for arm, tr in t.pop("trained").items():
    for s in seeds:
      m = tr["per_seed"][s]
      runs[arm][s].update(recall_acc=m["accuracy"], recall_em=m["exact_match"],
                          recall_loss=m["loss"], recall_diverged=m["diverged"],
                          recall_keys=keys_read(tr["params"][s], arms[arm], probe)["keys_read"])
  return t


def text_arms(arms: dict, text, z, seeds, runs: dict, *, tuning_seeds, log) -> dict:
  """Trains `full` and `moba` (`arms`) on `text`, each at its own tuned rate, the sparsity and
  the switch; fills `runs` and returns the setup (`tune_and_train`'s, trained arms left out)."""
  tokens = text.batch(seeds[0], 0, z.text_probe, z.split).tokens[:, :-1]
  log(f"  dynamic-sparsity: stdlib T={z.seq_len}, {z.budget_steps()} steps")
  t = tune_and_train(arms, z, seeds, tuning_seeds=tuning_seeds, log=log, task="stdlib",
                     data=text, steps=z.budget_steps(), batch_size=z.batch_size,
                     seq_len=z.seq_len)
  trained = t.pop("trained")
  for s in seeds:
    full_loss = trained["full"]["per_seed"][s]["loss"]
    moba_loss = trained["moba"]["per_seed"][s]["loss"]
    kr = keys_read(trained["moba"]["params"][s], arms["moba"], tokens)
    runs["full"][s]["loss"] = full_loss
    runs["moba"][s].update(loss=moba_loss, loss_ratio=moba_loss / full_loss - 1,
                           text_keys=kr["keys_read"], sparsity=kr["sparsity"])
    # The same trained full-attention params, read through the MoBA pattern.
    switched = val_loss(trained["full"]["params"][s], arms["moba"], text, s,
                        n_batches=z.eval_batches, batch_size=z.batch_size, split=z.split)
    full_again = val_loss(trained["full"]["params"][s], arms["full"], text, s,
                          n_batches=z.eval_batches, batch_size=z.batch_size, split=z.split)
    runs["switch"][s].update(loss=switched, full_loss=full_again,
                             switch_ratio=switched / full_again - 1)
  return t


def recall_configs(z) -> dict[str, transformer.Config]:
  """The recall arms at `z.model`'s shape, `max_len` reaching the `T` tokens they read.

  `full` causal softmax; `local` a window of `z.recall_window` in blocks of `z.recall_block`;
  `moba` its own block plus the `z.recall_top_k` past blocks its gate picks. Only the
  attention differs (`attention_arms.config_at`); at `mini` the shape is the `tiny` preset.

  Example:
    >>> from types import SimpleNamespace
    >>> from experiments.lab.sparsity import recall_configs
    >>> z = SimpleNamespace(model="llama-mini", recall_len=17, recall_window=4, recall_block=2,
    ...                     recall_top_k=1)
    >>> cfg = recall_configs(z)["moba"]
    >>> cfg.n_heads, cfg.n_kv_heads, cfg.positions, cfg.block_size, cfg.top_k_blocks
    (4, 2, 'rope', 2, 1)
  """
  T = z.recall_len - 1  # the model reads all but the last answer
  return {"full": config_at(T, model=z.model),
          "local": config_at(T, model=z.model, attention="local", window=z.recall_window,
                             block_size=z.recall_block),
          "moba": config_at(T, model=z.model, attention="moba", block_size=z.recall_block,
                            top_k_blocks=z.recall_top_k)}


def recall_source(z) -> RecallSource:
  """The recall data of `z`: its pairs, queries, keys, values and distractors."""
  return RecallSource(z.recall_pairs, z.recall_queries, z.recall_keys, z.recall_values,
                      z.recall_filler)
