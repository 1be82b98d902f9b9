"""The preface's synthetic tasks, each with an exact answer, as pure functions of `(seed, step)`.

Every task draws one `Batch` from the generator of `(seed, step, split)` and scores only its
answers (`answers_only`); `exact_match` counts the sequences whose every answer is right.

* `recall`: multi-query associative recall, ``k1 v1 … kn vn | q1 a1 … qm am``.
* `copy`: copying / induction, ``x1 … xn | x1 … xn``; every copied token is scored.
* `modadd`: modular addition, ``a + b = c`` with ``c = (a + b) mod p``.
* `dyck`: balanced brackets (Dyck-2): ``s ? y`` where ``y`` says whether ``s`` over ``()[]``
  is balanced; half of the strings are balanced.

Example:
  >>> from experiments.data import source
  >>> b = source("task:modadd", seq_len=0).batch(seed=0, step=0, batch_size=2)
  >>> b.tokens.shape, b.weights.tolist()
  ((2, 5), [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from experiments.data.batch import VOCAB_SIZE, Batch, batch_rng

# Token layout shared by the tasks: small ids are symbols, special tokens sit at the top.
SEP, QUERY, PLUS, EQUALS, OPEN_1, CLOSE_1, OPEN_2, CLOSE_2, NO, YES = range(246, 256)


def answers_only(tokens, answer_cols) -> Batch:
  """A `Batch` scoring exactly the targets at columns `answer_cols` of `tokens`."""
  weights = np.zeros((tokens.shape[0], tokens.shape[1] - 1), np.float32)
  weights[:, np.asarray(answer_cols) - 1] = 1.0
  return Batch(tokens.astype(np.int32), weights)


def associative_recall(rng, batch_size: int, n_pairs: int = 8, n_queries: int = 4,
                       n_keys: int = 64, n_values: int = 64) -> Batch:
  """Multi-query associative recall: ``k1 v1 … kn vn SEP q1 a1 … qm am``.

  Keys are distinct ids in `[0, n_keys)`, values ids in `[n_keys, n_keys + n_values)`; each
  query `q` is one of the keys and its answer `a` the value that followed it. Scored: the
  answers.
  """
  if n_queries > n_pairs or n_keys < n_pairs or n_keys + n_values > SEP:
    raise ValueError(f"recall: need n_queries <= n_pairs <= n_keys and n_keys + n_values <= "
                     f"{SEP}; got {n_queries=}, {n_pairs=}, {n_keys=}, {n_values=}.")
  keys_BN = rng.permuted(np.tile(np.arange(n_keys), (batch_size, 1)), axis=1)[:, :n_pairs]
  values_BN = n_keys + rng.integers(0, n_values, (batch_size, n_pairs))
  which_BM = rng.permuted(np.tile(np.arange(n_pairs), (batch_size, 1)), axis=1)[:, :n_queries]
  context = np.stack([keys_BN, values_BN], -1).reshape(batch_size, 2 * n_pairs)
  queries = np.stack([np.take_along_axis(keys_BN, which_BM, 1),
                      np.take_along_axis(values_BN, which_BM, 1)], -1)
  sep = np.full((batch_size, 1), SEP)
  tokens = np.concatenate([context, sep, queries.reshape(batch_size, 2 * n_queries)], 1)
  return answers_only(tokens, 2 * n_pairs + 2 + 2 * np.arange(n_queries))


def copying(rng, batch_size: int, length: int = 16, n_symbols: int = 32) -> Batch:
  """Copying (induction): ``x1 … xn SEP x1 … xn``; scored: every token of the copy."""
  x_BN = rng.integers(0, n_symbols, (batch_size, length))
  tokens = np.concatenate([x_BN, np.full((batch_size, 1), SEP), x_BN], 1)
  return answers_only(tokens, length + 1 + np.arange(length))


def modular_addition(rng, batch_size: int, modulus: int = 97) -> Batch:
  """Modular addition: ``a PLUS b EQUALS c`` with ``c = (a + b) mod p``; scored: `c`."""
  if not 1 < modulus <= SEP:
    raise ValueError(f"modadd: modulus={modulus} must lie in [2, {SEP}].")
  a_B, b_B = rng.integers(0, modulus, (2, batch_size))
  tokens = np.stack([a_B, np.full(batch_size, PLUS), b_B, np.full(batch_size, EQUALS),
                     (a_B + b_B) % modulus], 1)
  return answers_only(tokens, [4])


def _balanced(rng, n_pairs: int) -> list[int]:
  """A random balanced Dyck-2 word with `n_pairs` pairs (opens and closes by coin flips)."""
  word, stack, opened = [], [], 0
  for _ in range(2 * n_pairs):
    must_close = opened == n_pairs
    if stack and (must_close or rng.random() < 0.5):
      word.append(stack.pop())
    else:
      kind = rng.integers(2)
      word.append((OPEN_1, OPEN_2)[kind])
      stack.append((CLOSE_1, CLOSE_2)[kind])
      opened += 1
  return word


def dyck_is_balanced(word) -> bool:
  """Stack recognizer of Dyck-2 over the tokens `OPEN_1 CLOSE_1 OPEN_2 CLOSE_2`."""
  closer = {OPEN_1: CLOSE_1, OPEN_2: CLOSE_2}
  stack = []
  for t in word:
    if t in closer:
      stack.append(closer[t])
    elif not stack or stack.pop() != t:
      return False
  return not stack


def dyck(rng, batch_size: int, n_pairs: int = 8) -> Batch:
  """Balanced brackets (Dyck-2): ``s QUERY y`` with `y` in {YES, NO}; scored: `y`.

  Half of the words are balanced; the other half are balanced words with one bracket replaced
  by a random other bracket (which always unbalances them, since the counts of one kind then
  differ or a closer is mismatched).
  """
  rows = []
  for _ in range(batch_size):
    word = _balanced(rng, n_pairs)
    if rng.random() < 0.5:
      i = rng.integers(len(word))
      word[i] = rng.choice([t for t in (OPEN_1, CLOSE_1, OPEN_2, CLOSE_2) if t != word[i]])
    rows.append(word + [QUERY, YES if dyck_is_balanced(word) else NO])
  return answers_only(np.array(rows), [2 * n_pairs + 1])


TASKS: dict[str, Callable[..., Batch]] = {
    "recall": associative_recall,
    "copy": copying,
    "modadd": modular_addition,
    "dyck": dyck,
}


@dataclasses.dataclass(frozen=True)
class TaskSource:
  """A synthetic task as a data source; `batch` is pure in `(seed, step, split)`."""

  name: str

  @property
  def vocab_size(self) -> int:
    return VOCAB_SIZE

  def batch(self, seed: int, step: int, batch_size: int, split: str = "train") -> Batch:
    return TASKS[self.name](batch_rng(seed, step, split), batch_size)


def exact_match(logits_BTV, batch: Batch) -> float:
  """Fraction of sequences whose every scored target is the arg-max prediction.

  .. math:: \\mathrm{acc} = \\frac1B \\sum_b \\prod_{t: w_{bt}=1}
     [\\arg\\max_v \\mathrm{logits}_{btv} = y_{bt}]
  """
  pred_BT = np.asarray(logits_BTV).argmax(-1)
  wrong_BT = (pred_BT != batch.tokens[:, 1:]) & (batch.weights > 0)
  return float((~wrong_BT.any(-1)).mean())
