"""Byte-level text corpora: files, the `stdlib` and `mixed` corpora, and random windows of them.

Text is bytes (vocabulary 256). The default corpus is Python 3.11.7's standard-library `.py`
sources, shipped as a pinned archive, in sorted order, split **by file**; any file, folder or
glob works the same way (train and validation). The bytes are read once into one array per split.

Corpora (`--data NAME`), both read from archives that ship with the package
(`experiments/corpora/`, see its README; `experiments.data.pinned` checks each one's SHA-256 as
it reads it), so they are the same bytes on every interpreter and nothing is downloaded:

* `stdlib`: Python 3.11.7's standard-library `.py` files (code only, 1,790 files,
  31,525,224 bytes). A hash of each file's name (`is_validation`) holds out 97 files, and a
  second, independent hash (`is_test`) splits those into `val` (48 files, 905,081 bytes: every
  tuning decision reads it) and `test` (49 files, 1,164,222 bytes: verdicts only). Every shared
  base model (`experiments.models`) trains on the train split (1,693 files, 29,455,921 bytes),
  so it never changes; `heldout` is `val` and `test` together, the windows the base models'
  held-out numbers were measured on.
* `mixed`: code and English prose, split train/val/test by file. Its code is `stdlib` (the same
  train/val/test files) plus CPython 3.11.2's `Tools/` scripts; its prose is CPython 3.11.2's
  own documentation sources (tutorial, FAQ, HOWTOs, language reference, …; `.rst`). No `val` or
  `test` file is in any base model's training text. `corpus_card` counts its code and prose
  bytes per split.

Example:
  >>> from experiments.data import text_source
  >>> src = text_source("stdlib", seq_len=64)
  >>> src.batch(seed=0, step=7, batch_size=8).tokens.shape
  (8, 65)
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import os
import zlib
from typing import NamedTuple

import numpy as np

from experiments.data.batch import VOCAB_SIZE, Batch, batch_rng, check_split
from experiments.data.pinned import CPYTHON_ARCHIVE, STDLIB_ARCHIVE, read_archive

MIXED_TEST, MIXED_VAL = 0.2, 0.1  # fractions of the archive's files held out, by name hash
CODE_SUFFIXES = (".py",)
PROSE_SUFFIXES = (".rst", ".txt", ".md")


def stdlib_files() -> list[str]:
  """The `stdlib` corpus's files, sorted: `archive_texts(STDLIB_ARCHIVE)` keys of its `.py` files.

  A key is `STDLIB_ARCHIVE/NAME`, with NAME the file's path under Python 3.11.7's `lib/python3.11`.
  """
  return [f for f in archive_texts(STDLIB_ARCHIVE) if f.endswith(".py")]


def is_binary(path: str, probe: int = 8192) -> bool:
  """Whether the file at `path` looks binary: a NUL byte in its first `probe` bytes."""
  with open(path, "rb") as f:
    return b"\0" in f.read(probe)


class Files(NamedTuple):
  """The text files a `--data` spec names, and how many it skipped (hidden or binary)."""

  files: list[str]
  skipped_hidden: int
  skipped_binary: int

  def note(self) -> str:
    """A one-line account of what was read and skipped (empty when nothing was skipped)."""
    if not (self.skipped_hidden or self.skipped_binary):
      return ""
    return (f"read {len(self.files)} text files; skipped {self.skipped_hidden} hidden and "
            f"{self.skipped_binary} binary files")


def scan_files(spec: str) -> Files:
  """The sorted text files named by `spec`: `stdlib`, a file, a folder (recursive) or a glob.

  Folders and globs skip hidden entries (names starting with `.`, such as `.git`, and all
  below them) and binary files (`is_binary`); `Files` counts what was skipped. A file named
  explicitly must be text.

  Raises:
    FileNotFoundError: if `spec` names nothing.
    ValueError: if `spec` is a binary file, or a folder or glob with no text file in it.

  Example:
    >>> import os, tempfile
    >>> from experiments.data import scan_files
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, ".git"))
    >>> for name, body in [("a.txt", b"hi"), (".git/HEAD", b"ref"), ("b.bin", b"\\0\\1")]:
    ...   with open(os.path.join(root, name), "wb") as f:
    ...     _ = f.write(body)
    >>> found = scan_files(root)
    >>> [os.path.basename(f) for f in found.files], found.skipped_hidden, found.skipped_binary
    (['a.txt'], 1, 1)
  """
  if spec == "stdlib":
    return Files(stdlib_files(), 0, 0)
  if spec == "mixed":
    raise ValueError("--data 'mixed' is not a folder: part of it is read from an archive. "
                     "Fix: read it with `load_corpus('mixed')` (`--split val` in `eval`).")
  if os.path.isfile(spec):
    if is_binary(spec):
      raise ValueError(f"--data {spec!r} is a binary file (it holds NUL bytes). Fix: pass a "
                       "text file, a folder of text files, or a glob such as 'docs/**/*.md'.")
    return Files([spec], 0, 0)
  hidden = 0
  if os.path.isdir(spec):
    candidates = []
    for folder, dirs, names in os.walk(spec):
      for d in [d for d in dirs if d.startswith(".")]:
        hidden += sum(len(n) for _, _, n in os.walk(os.path.join(folder, d)))
      dirs[:] = sorted(d for d in dirs if not d.startswith("."))
      hidden += sum(n.startswith(".") for n in names)
      candidates += [os.path.join(folder, n) for n in names if not n.startswith(".")]
    what = "folder"
  else:
    matches = [f for f in glob.glob(spec, recursive=True) if os.path.isfile(f)]
    candidates = matches
    what = "glob"
    if not matches:
      raise FileNotFoundError(
          f"--data {spec!r}: no such file, folder or glob match. Fix: pass 'stdlib', 'mixed', an "
          "existing text file, a folder of text files, or a glob such as 'docs/**/*.md'.")
  files = sorted(f for f in candidates if not is_binary(f))
  found = Files(files, hidden, len(candidates) - len(files))
  if not files:
    detail = f" ({found.note().split('; ')[1]})" if found.note() else ""
    raise ValueError(f"--data {spec!r}: the {what} is empty: it holds no text files{detail}. "
                     "Fix: pass a folder that contains text files.")
  return found


def resolve_files(spec: str) -> list[str]:
  """The sorted text files named by `spec` (see `scan_files`)."""
  return scan_files(spec).files


def is_validation(name: str, val_fraction: float) -> bool:
  """Whether the file called `name` (relative to the corpus root) belongs to validation.

  A hash of the name decides, so the split is the same on every machine and every run.
  """
  return zlib.crc32(name.encode()) % 10_000 < val_fraction * 10_000


def is_test(name: str) -> bool:
  """Whether the held-out file called `name` (see `is_validation`) is a `test` file, not `val`.

  The first bit of the SHA-256 of the name decides: a hash unrelated to `is_validation`'s
  CRC-32, so about half the held-out files (56% of the `stdlib` held-out bytes) are `test`.

  Example:
    >>> from experiments.data import is_test
    >>> is_test("doctest.py"), is_test("pickle.py")
    (True, False)
  """
  return hashlib.sha256(name.encode()).digest()[0] < 128


@dataclasses.dataclass(frozen=True)
class Corpus:
  """The bytes of a corpus, read once: one uint8 array per split, and the files of each.

  `test` is None for a corpus without a test split (every corpus but `stdlib` and `mixed`).
  `heldout` (only `stdlib`'s) is the `val` and `test` files' bytes together, in file order: the
  validation split before its test half was cut from it, on which the committed base models'
  held-out numbers were measured (`TextSource.batch(..., "heldout")`).
  """

  train: np.ndarray
  val: np.ndarray
  train_files: tuple[str, ...]
  val_files: tuple[str, ...]
  note: str = ""  # what the scan skipped (`Files.note`)
  test: np.ndarray | None = None
  test_files: tuple[str, ...] = ()
  heldout: np.ndarray | None = None


@functools.lru_cache(maxsize=2)
def archive_texts(path: str = CPYTHON_ARCHIVE) -> dict[str, bytes]:
  """The files of the corpus archive at `path`: `{path/member: bytes}`, in sorted order.

  The keys are the archive's path joined with each member's name, so they name the file and
  the archive it is in. `path` is one of the pinned archives (`pinned.SHA256`).

  Raises:
    FileNotFoundError: if the archive is missing (it ships with the package).
    ValueError: if its SHA-256 is not the pinned one.

  Example:
    >>> from experiments.data import archive_texts, CPYTHON_ARCHIVE
    >>> texts = archive_texts()
    >>> texts[CPYTHON_ARCHIVE + "/Doc/tutorial/index.rst"].splitlines()[0]
    b'.. _tutorial-index:'
  """
  return {f"{path}/{name}": text for name, text in read_archive(path).items()}


def file_bytes(f: str) -> bytes:
  """The bytes of `f`: a path, or an `archive_texts` key."""
  for archive in (STDLIB_ARCHIVE, CPYTHON_ARCHIVE):
    if f.startswith(archive + "/"):
      return archive_texts(archive)[f]
  with open(f, "rb") as fh:
    return fh.read()


def file_size(f: str) -> int:
  """The size in bytes of `f`: a path, or an `archive_texts` key."""
  if f.startswith((STDLIB_ARCHIVE + "/", CPYTHON_ARCHIVE + "/")):
    return len(file_bytes(f))
  return os.path.getsize(f)


def read_files(files) -> np.ndarray:
  """The bytes of `files` (paths, or `archive_texts` keys), concatenated in the given order."""
  chunks = [np.frombuffer(file_bytes(f), np.uint8) for f in files]
  return np.concatenate(chunks) if chunks else np.zeros((0,), np.uint8)


def file_kind(name: str) -> str:
  """`code` (`.py`), `prose` (`.rst`, `.txt`, `.md`) or `other`, by the file name's suffix."""
  if name.endswith(CODE_SUFFIXES):
    return "code"
  return "prose" if name.endswith(PROSE_SUFFIXES) else "other"


def archive_split(name: str) -> str:
  """The split of the `mixed` corpus that the archive file `name` (its member name) belongs to.

  A hash of the name decides, as in `is_validation` but salted so the two rules are unrelated:
  `test` for the first `MIXED_TEST` of the hash range, `val` for the next `MIXED_VAL`, else
  `train`.

  Example:
    >>> from experiments.data import archive_split
    >>> [archive_split(f"Doc/{n}.rst") for n in ("tutorial/index", "tutorial/classes", "bugs")]
    ['train', 'val', 'test']
  """
  u = zlib.crc32(f"mixed/{name}".encode()) % 10_000
  if u < MIXED_TEST * 10_000:
    return "test"
  return "val" if u < (MIXED_TEST + MIXED_VAL) * 10_000 else "train"


def mixed_files(val_fraction: float = 0.05) -> dict[str, tuple[str, ...]]:
  """The files of each split of the `mixed` corpus: `{"train", "val", "test": files}`.

  Each split is `load_corpus("stdlib", val_fraction)`'s files of that split plus the CPython
  archive's files of that split (`archive_split`). At the default `val_fraction` (the one every
  base model trains with) no `val` or `test` file is in any base model's training text.
  """
  stdlib = load_corpus("stdlib", val_fraction)
  prefix = len(CPYTHON_ARCHIVE) + 1
  by_split = {"train": [], "val": [], "test": []}
  for f in archive_texts():
    by_split[archive_split(f[prefix:])].append(f)
  return {"train": stdlib.train_files + tuple(by_split["train"]),
          "val": stdlib.val_files + tuple(by_split["val"]),
          "test": stdlib.test_files + tuple(by_split["test"])}


def _stdlib_corpus(val_fraction: float) -> Corpus:
  """`load_corpus("stdlib")`: train by `is_validation`, the held-out files val/test by `is_test`."""
  files = stdlib_files()
  prefix = len(STDLIB_ARCHIVE) + 1
  held = tuple(f for f in files if is_validation(f[prefix:], val_fraction))
  train = tuple(f for f in files if not is_validation(f[prefix:], val_fraction))
  val = tuple(f for f in held if not is_test(f[prefix:]))
  test = tuple(f for f in held if is_test(f[prefix:]))
  return Corpus(read_files(train), read_files(val), train, val, test=read_files(test),
                test_files=test, heldout=read_files(held))


@functools.lru_cache(maxsize=4)
def load_corpus(spec: str = "stdlib", val_fraction: float = 0.05) -> Corpus:
  """Reads the files of `spec` once and splits them into train and validation by file.

  The result is cached per process (runs and evaluations in one process share the bytes).

  A file goes to validation when a hash of its path (relative to the files' common folder)
  falls below `val_fraction`, so no file is
  in both splits. A single file has nothing to split by, so its last `val_fraction` of bytes
  is the validation text instead.

  `stdlib` and `mixed` cut their held-out files into `val` and `test` (`is_test`,
  `mixed_files`), and read the pinned archives.

  Args:
    spec: `stdlib`, `mixed`, a path to a file, a folder, or a glob.
    val_fraction: target fraction of files (or bytes, for one file) held out.

  Returns:
    A `Corpus`.
  """
  if not 0 < val_fraction < 1:
    raise ValueError(f"val_fraction={val_fraction} must lie in (0, 1). Fix: use e.g. 0.05.")
  if spec == "stdlib":
    return _stdlib_corpus(val_fraction)
  if spec == "mixed":
    files = mixed_files(val_fraction)
    return Corpus(read_files(files["train"]), read_files(files["val"]), files["train"],
                  files["val"], test=read_files(files["test"]), test_files=files["test"])
  found = scan_files(spec)
  files = found.files
  if len(files) == 1:
    data = read_files(files)
    cut = int(len(data) * (1 - val_fraction))
    return Corpus(data[:cut], data[cut:], tuple(files), tuple(files), found.note())
  root = os.path.commonpath(files)
  held_out = {f: is_validation(os.path.relpath(f, root), val_fraction) for f in files}
  val = tuple(f for f in files if held_out[f])
  train = tuple(f for f in files if not held_out[f])
  if not val or not train:
    raise ValueError(f"--data {spec!r}: {len(files)} files give an empty split at "
                     f"val_fraction={val_fraction}. Fix: add files or change val_fraction.")
  return Corpus(read_files(train), read_files(val), train, val, found.note())


def corpus_card(spec: str = "mixed", val_fraction: float = 0.05) -> dict:
  """Files and bytes of code and prose in each split of `load_corpus(spec, val_fraction)`.

  Code and prose are told apart by suffix (`file_kind`); a file of neither kind counts as
  `other_bytes`.

  Returns:
    `{"spec", "splits": {split: {"files", "code_files", "prose_files", "code_bytes",
    "prose_bytes", "other_bytes", "prose_fraction"}}}` with `prose_fraction` the prose bytes
    over all bytes of the split; `test` only where the corpus has one.

  Example:
    >>> from experiments.data import corpus_card
    >>> card = corpus_card("mixed")
    >>> sorted(card["splits"]), card["splits"]["test"]["code_files"] > 0
    (['test', 'train', 'val'], True)
  """
  corpus = load_corpus(spec, val_fraction)
  parts = {"train": corpus.train_files, "val": corpus.val_files}
  if corpus.test is not None:
    parts["test"] = corpus.test_files
  if parts["train"] == parts["val"]:  # one file, split by bytes: count the arrays
    sizes = {"train": {parts["train"][0]: len(corpus.train)},
             "val": {parts["val"][0]: len(corpus.val)}}
  else:
    sizes = {split: {f: file_size(f) for f in files} for split, files in parts.items()}
  splits = {}
  for split, size in sizes.items():
    kinds = {f: file_kind(f) for f in size}
    by = {k: sum(n for f, n in size.items() if kinds[f] == k) for k in ("code", "prose", "other")}
    total = sum(by.values())
    splits[split] = {"files": len(size),
                     "code_files": sum(k == "code" for k in kinds.values()),
                     "prose_files": sum(k == "prose" for k in kinds.values()),
                     "code_bytes": by["code"], "prose_bytes": by["prose"],
                     "other_bytes": by["other"],
                     "prose_fraction": by["prose"] / total if total else 0.0}
  return {"spec": spec, "splits": splits}


def unigram_entropy(data: np.ndarray) -> float:
  """Entropy in nats of the byte frequencies of `data` (the loss of the best 0-context model)."""
  p = np.bincount(data, minlength=VOCAB_SIZE) / len(data)
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


@dataclasses.dataclass(frozen=True)
class TextSource:
  """Random windows of `seq_len + 1` bytes of a corpus; `batch` is pure in `(seed, step)`."""

  corpus: Corpus
  seq_len: int

  @property
  def vocab_size(self) -> int:
    return VOCAB_SIZE

  def batch(self, seed: int, step: int, batch_size: int, split: str = "train") -> Batch:
    """`batch_size` windows of `split`: `train`, `val`, `test`, or `heldout` (`Corpus.heldout`,
    drawn by `val`'s stream, so the base models' held-out windows are the ones they were
    measured on). `test` and `heldout` are refused inside a tuner (`data.batch.no_test`)."""
    check_split(split)  # refuses an unknown split, and test bytes inside a tuner
    rng = batch_rng(seed, step, "val" if split == "heldout" else split)
    data = {"train": self.corpus.train, "val": self.corpus.val, "test": self.corpus.test,
            "heldout": self.corpus.heldout}[split]
    if data is None:
      raise ValueError(f"split={split!r}: this corpus has no {split} split. Fix: use --data "
                       f"{'stdlib or mixed' if split == 'test' else 'stdlib'}, or split 'val'.")
    span = self.seq_len + 1
    if len(data) < span:
      raise ValueError(f"the {split} text has {len(data)} bytes, fewer than seq_len + 1 = "
                       f"{span}. Fix: lower --seq-len or pass more text.")
    starts_B = rng.integers(0, len(data) - span + 1, batch_size)
    tokens = data[starts_B[:, None] + np.arange(span)[None, :]].astype(np.int32)
    return Batch(tokens, np.ones((batch_size, self.seq_len), np.float32))


def text_source(spec: str = "stdlib", seq_len: int = 64, val_fraction: float = 0.05):
  """A `TextSource` over `load_corpus(spec, val_fraction)`."""
  return TextSource(load_corpus(spec, val_fraction), seq_len)
