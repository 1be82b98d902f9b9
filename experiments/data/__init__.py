"""Data: byte-level text and the preface's synthetic tasks, as pure functions of `(seed, step)`.

Every source returns a `Batch`: `tokens (B, T+1)` int32 (the model reads `tokens[:, :-1]` and
predicts `tokens[:, 1:]`) and `weights (B, T)` float32 (1 where a target is scored). A batch
depends only on `(seed, step, split)`, so a resumed or re-run job sees the identical stream and
there is no loader state to checkpoint.

One module per concern, every name re-exported here (`from experiments.data import X`):

* `batch`: `Batch`, the generator of a batch (`batch_rng`), the vocabulary and the splits;
  `no_test`, the block inside which every tuner runs and no `test` batch is drawn.
* `text`: byte-level corpora (`stdlib`, `mixed`, any file, folder or glob), read once and
  split by file (`load_corpus`, `corpus_card`), and random windows of them (`TextSource`).
* `pinned`: the shipped corpus archives, their SHA-256 checked as they are read
  (`read_archive`), and the `stdlib` archive's builder (`python -m experiments.data.make_stdlib`).
* `tasks`: the synthetic tasks `recall`, `copy`, `modadd`, `dyck` (`TaskSource`), each with an
  exact answer, and their metric `exact_match`.

`source` picks one from the `--data` spec.

Example:
  >>> from experiments.data import source
  >>> source("stdlib", seq_len=64).batch(seed=0, step=7, batch_size=8).tokens.shape
  (8, 65)
  >>> source("task:copy", seq_len=0).batch(seed=0, step=7, batch_size=8).tokens.shape
  (8, 33)
"""

from __future__ import annotations

from experiments.data.batch import SPLITS, VOCAB_SIZE, Batch, batch_rng, check_split, no_test
from experiments.data.pinned import CORPORA, CPYTHON_ARCHIVE, STDLIB_ARCHIVE, read_archive
from experiments.data.tasks import (
  CLOSE_1,
  CLOSE_2,
  EQUALS,
  NO,
  OPEN_1,
  OPEN_2,
  PLUS,
  QUERY,
  SEP,
  TASKS,
  YES,
  TaskSource,
  answers_only,
  associative_recall,
  copying,
  dyck,
  dyck_is_balanced,
  exact_match,
  modular_addition,
)
from experiments.data.text import (
  CODE_SUFFIXES,
  MIXED_TEST,
  MIXED_VAL,
  PROSE_SUFFIXES,
  Corpus,
  Files,
  TextSource,
  archive_split,
  archive_texts,
  corpus_card,
  file_bytes,
  file_kind,
  file_size,
  is_binary,
  is_test,
  is_validation,
  load_corpus,
  mixed_files,
  read_files,
  resolve_files,
  scan_files,
  stdlib_files,
  text_source,
  unigram_entropy,
)

__all__ = ["CLOSE_1", "CLOSE_2", "CODE_SUFFIXES", "CORPORA", "CPYTHON_ARCHIVE", "EQUALS",
           "MIXED_TEST", "MIXED_VAL", "NO", "OPEN_1", "OPEN_2", "PLUS", "PROSE_SUFFIXES", "QUERY",
           "SEP", "SPLITS", "STDLIB_ARCHIVE", "TASKS", "VOCAB_SIZE", "YES", "Batch", "Corpus",
           "Files", "TaskSource", "TextSource", "answers_only", "archive_split", "archive_texts",
           "associative_recall", "batch_rng", "check_split", "copying", "corpus_card", "dyck",
           "dyck_is_balanced", "exact_match", "file_bytes", "file_kind", "file_size",
           "is_binary", "is_test", "is_validation", "load_corpus", "mixed_files",
           "modular_addition", "no_test", "read_archive", "read_files", "resolve_files",
           "scan_files", "source", "stdlib_files", "text_source", "unigram_entropy"]


def source(spec: str, seq_len: int, val_fraction: float = 0.05) -> TextSource | TaskSource:
  """The data source named on the command line: `task:NAME` or a text spec (`stdlib`, path)."""
  if spec.startswith("task:"):
    name = spec.removeprefix("task:")
    if name not in TASKS:
      raise ValueError(f"--data {spec!r}: unknown task. Fix: use one of "
                       f"{['task:' + t for t in TASKS]}.")
    return TaskSource(name)
  return text_source(spec, seq_len, val_fraction)
