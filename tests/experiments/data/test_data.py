"""Data: the split by file, batches as pure functions of (seed, step), the synthetic tasks."""

import hashlib
import os
import re
import zlib

import numpy as np
import pytest
import scipy.stats

from experiments import data


@pytest.fixture(scope="module")
def corpus():
  return data.load_corpus("stdlib", 0.05)


def test_stdlib_split_is_disjoint_by_file_and_complete(corpus):
  files = data.stdlib_files()
  assert len(files) > 500 and all(f.endswith(".py") and "site-packages" not in f for f in files)
  splits = (corpus.train_files, corpus.val_files, corpus.test_files)
  assert sum(map(len, splits)) == len(set().union(*splits))  # no file in two splits
  assert sorted(sum(splits, ())) == files
  assert 0.02 < len(corpus.val_files + corpus.test_files) / len(files) < 0.10
  sizes = {f: data.file_size(f) for f in files}
  for array, names in zip((corpus.train, corpus.val, corpus.test), splits, strict=True):
    assert len(array) == sum(sizes[f] for f in names)
    assert array[:sizes[names[0]]].tobytes() == data.file_bytes(names[0])


def test_folder_glob_and_single_file(tmp_path):
  texts = {f"d/f{i:02d}.txt": f"file {i} ".encode() * (i + 1) for i in range(40)}
  for name, text in texts.items():
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(text)
  folder = data.load_corpus(str(tmp_path / "d"), 0.25)
  globbed = data.load_corpus(str(tmp_path / "d" / "*.txt"), 0.25)
  assert folder.val_files == globbed.val_files and folder.train_files == globbed.train_files
  assert not set(folder.train_files) & set(folder.val_files) and folder.val_files
  expect_val = b"".join(texts["d/" + os.path.basename(f)] for f in folder.val_files)
  assert folder.val.tobytes() == expect_val
  one = data.load_corpus(str(tmp_path / "d" / "f39.txt"), 0.25)
  assert one.train.tobytes() + one.val.tobytes() == texts["d/f39.txt"]
  assert len(one.val) == len(texts["d/f39.txt"]) - int(0.75 * len(texts["d/f39.txt"]))


def test_missing_path_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no such file, folder or glob"):
    data.load_corpus(str(tmp_path / "nope"))
  with pytest.raises(ValueError, match="unknown task"):
    data.source("task:nope", 16)


def test_batches_are_pure_functions_of_seed_and_step(corpus):
  src = data.TextSource(corpus, seq_len=32)
  a, b = src.batch(3, 17, 8), src.batch(3, 17, 8)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert a.tokens.shape == (8, 33) and a.tokens.dtype == np.int32
  assert not np.array_equal(a.tokens, src.batch(3, 18, 8).tokens)
  assert not np.array_equal(a.tokens, src.batch(4, 17, 8).tokens)
  assert not np.array_equal(a.tokens, src.batch(3, 17, 8, "val").tokens)
  train_bytes, val_bytes = corpus.train.tobytes(), corpus.val.tobytes()
  for row in a.tokens:
    assert train_bytes.find(row.astype(np.uint8).tobytes()) >= 0
  for row in src.batch(3, 17, 4, "val").tokens:
    assert val_bytes.find(row.astype(np.uint8).tobytes()) >= 0
  for name in data.TASKS:
    task = data.TaskSource(name)
    np.testing.assert_array_equal(task.batch(1, 5, 4).tokens, task.batch(1, 5, 4).tokens)


def test_unigram_entropy_matches_scipy(corpus):
  counts = np.bincount(corpus.val, minlength=256)
  np.testing.assert_allclose(data.unigram_entropy(corpus.val), scipy.stats.entropy(counts),
                             rtol=1e-12)


def scored(batch):
  """The (input prefix, answer) pairs a batch scores, read from its weights."""
  return [(row[:t + 1], row[t + 1]) for row, w in zip(batch.tokens, batch.weights, strict=True)
          for t in np.flatnonzero(w)]


def test_associative_recall_answers():
  batch = data.associative_recall(np.random.default_rng(0), 64, n_pairs=8, n_queries=4)
  assert batch.weights.sum() == 64 * 4
  for prefix, answer in scored(batch):
    context = prefix[:16].tolist()
    keys, values = context[0::2], context[1::2]
    assert len(set(keys)) == 8 and prefix[16] == data.SEP
    assert answer == values[keys.index(prefix[-1])]


def test_copying_answers():
  batch = data.copying(np.random.default_rng(1), 16, length=12)
  assert batch.weights.sum() == 16 * 12
  for prefix, answer in scored(batch):
    sep = prefix.tolist().index(data.SEP)
    assert answer == prefix[len(prefix) - sep - 1]


def test_modular_addition_answers():
  batch = data.modular_addition(np.random.default_rng(2), 256, modulus=97)
  pairs = scored(batch)
  assert len(pairs) == 256
  for prefix, answer in pairs:
    a, plus, b, equals = (int(x) for x in prefix)
    assert (plus, equals) == (data.PLUS, data.EQUALS) and answer == (a + b) % 97


def test_dyck_labels_agree_with_reduction():
  """An independent recognizer: delete adjacent '()' and '[]' until nothing changes."""
  chars = {data.OPEN_1: "(", data.CLOSE_1: ")", data.OPEN_2: "[", data.CLOSE_2: "]"}
  batch = data.dyck(np.random.default_rng(3), 400, n_pairs=6)
  labels = []
  for prefix, answer in scored(batch):
    assert prefix[-1] == data.QUERY
    word = "".join(chars[t] for t in prefix[:-1])
    while re.search(r"\(\)|\[\]", word):
      word = re.sub(r"\(\)|\[\]", "", word)
    assert answer == (data.YES if word == "" else data.NO)
    labels.append(answer == data.YES)
  assert 0.4 < np.mean(labels) < 0.6


def test_exact_match_scores_whole_answers():
  batch = data.copying(np.random.default_rng(4), 10, length=5)
  logits = np.eye(256)[batch.tokens[:, 1:]]
  assert data.exact_match(logits, batch) == 1.0
  unscored = np.flatnonzero(batch.weights[0] == 0)[0]
  logits[0, unscored] = np.roll(logits[0, unscored], 1)  # wrong where nothing is scored
  assert data.exact_match(logits, batch) == 1.0
  logits[[1, 2], -1] = np.roll(logits[[1, 2], -1], 1, axis=-1)  # wrong last answer in two rows
  assert data.exact_match(logits, batch) == 0.8


def _write(path, body: bytes):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(body)


def test_folders_skip_hidden_folders_and_binary_files_and_say_so(tmp_path):
  root = str(tmp_path / "corpus")
  texts = {"a.txt": b"alpha\n" * 50, "sub/b.md": b"beta\n" * 50, "sub/c.py": b"x = 1\n" * 50}
  for name, body in texts.items():
    _write(os.path.join(root, name), body)
  _write(os.path.join(root, ".git/objects/pack.idx"), b"\0\1\2" * 10)
  _write(os.path.join(root, ".git/HEAD"), b"ref: refs/heads/main\n")
  _write(os.path.join(root, ".env"), b"SECRET=1\n")
  _write(os.path.join(root, "img/logo.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
  found = data.scan_files(root)
  assert [os.path.relpath(f, root) for f in found.files] == ["a.txt", "sub/b.md", "sub/c.py"]
  assert (found.skipped_hidden, found.skipped_binary) == (3, 1)
  assert found.note() == "read 3 text files; skipped 3 hidden and 1 binary files"
  corpus = data.load_corpus(root, 0.7)  # sub/b.md is held out at 0.7
  assert corpus.note == found.note()
  assert sorted(corpus.train_files + corpus.val_files) == found.files
  assert len(corpus.train) + len(corpus.val) == sum(map(len, texts.values()))
  # A glob skips binary files the same way.
  assert data.scan_files(os.path.join(root, "**", "*")).skipped_binary == 1


def test_binary_files_and_empty_folders_are_refused(tmp_path):
  binary = str(tmp_path / "weights.bin")
  _write(binary, b"\0" * 100)
  with pytest.raises(ValueError, match="binary file"):
    data.load_corpus(binary)
  empty = str(tmp_path / "empty")
  os.makedirs(empty)
  with pytest.raises(ValueError, match="the folder is empty"):
    data.scan_files(empty)
  only_binary = str(tmp_path / "bins")
  _write(os.path.join(only_binary, "x.bin"), b"\0")
  _write(os.path.join(only_binary, ".git/HEAD"), b"ref")
  with pytest.raises(ValueError, match=r"empty: it holds no text files \(skipped 1 hidden and 1 "
                                       "binary files\\)"):
    data.scan_files(only_binary)


# ------------------------------------------------------------------------------ the corpora


def test_stdlib_corpus_is_unchanged(corpus):
  """The split every base model trains on: the original rule, and its files as pinned on 3.11.7
  (read from the shipped archive, so on every interpreter)."""
  files = data.stdlib_files()
  root = os.path.commonpath(files)
  assert root == data.STDLIB_ARCHIVE
  held = tuple(f for f in files if zlib.crc32(os.path.relpath(f, root).encode()) % 10_000 < 500)
  assert tuple(sorted(corpus.val_files + corpus.test_files)) == held
  assert corpus.train_files == tuple(f for f in files if f not in set(held))

  def digest(names):
    return hashlib.sha256("\n".join(os.path.relpath(f, root) for f in names).encode())

  assert (len(corpus.train_files), len(held)) == (1693, 97)
  assert (len(corpus.train), len(corpus.heldout)) == (29_455_921, 2_069_303)
  assert digest(corpus.train_files).hexdigest().startswith("1e9062adc91684a6")
  assert digest(held).hexdigest().startswith("9888c633cb493bed")


@pytest.fixture(scope="module")
def mixed():
  return data.load_corpus("mixed")


def test_mixed_splits_are_disjoint_by_file_complete_and_deterministic(corpus, mixed):
  splits = data.mixed_files()
  assert splits == data.mixed_files()  # no hidden state
  names = {s: set(f) for s, f in splits.items()}
  assert not names["train"] & names["val"] and not names["train"] & names["test"]
  assert not names["val"] & names["test"] and names["test"]
  archive = set(data.archive_texts())
  assert names["train"] | names["val"] | names["test"] == set(data.stdlib_files()) | archive
  # The stdlib part keeps the base models' split; the archive's files split by their names.
  assert splits["train"][:len(corpus.train_files)] == corpus.train_files
  assert splits["val"][:len(corpus.val_files)] == corpus.val_files
  assert splits["test"][:len(corpus.test_files)] == corpus.test_files
  prefix = len(data.CPYTHON_ARCHIVE) + 1
  for split, files in splits.items():
    assert all(data.archive_split(f[prefix:]) == split for f in files if f in archive)
  assert [data.archive_split(f"Doc/{n}.rst") for n in ("tutorial/index", "tutorial/classes",
                                                       "bugs")] == ["train", "val", "test"]
  assert (mixed.train_files, mixed.val_files, mixed.test_files) == (
      splits["train"], splits["val"], splits["test"])
  texts = data.archive_texts()
  assert mixed.test.tobytes() == b"".join(data.file_bytes(f) for f in mixed.test_files)
  assert len(mixed.train) == len(corpus.train) + sum(
      len(texts[f]) for f in splits["train"] if f in archive)


def test_mixed_corpus_card_counts_code_and_prose(mixed):
  """Every split holds both; prose is 2-8% of train (the stdlib dominates it), 20-45% of val
  and 8-30% of test."""
  card = data.corpus_card("mixed")
  assert card["spec"] == "mixed" and sorted(card["splits"]) == ["test", "train", "val"]
  arrays = {"train": mixed.train, "val": mixed.val, "test": mixed.test}
  ranges = {"train": (0.02, 0.08), "val": (0.20, 0.45), "test": (0.08, 0.30)}
  for split, row in card["splits"].items():
    assert row["code_bytes"] + row["prose_bytes"] == len(arrays[split])
    assert row["other_bytes"] == 0 and row["code_files"] > 0 and row["prose_files"] > 0
    assert row["code_files"] + row["prose_files"] == row["files"]
    lo, hi = ranges[split]
    assert lo < row["prose_fraction"] < hi, (split, row)
    assert row["prose_fraction"] == pytest.approx(row["prose_bytes"] / len(arrays[split]))
  prose = [f for f in mixed.test_files if data.file_kind(f) == "prose"]
  assert prose and all(f.endswith(".rst") for f in prose)
  stdlib_card = data.corpus_card("stdlib")["splits"]
  assert all(stdlib_card[s]["prose_bytes"] == 0 for s in ("train", "val", "test"))


def test_mixed_test_split_shares_no_file_with_the_stdlib_train_or_val_split(corpus, mixed):
  stdlib = set(corpus.train_files) | set(corpus.val_files)
  assert not set(mixed.test_files) & stdlib
  archive = [f for f in mixed.test_files if f.startswith(data.CPYTHON_ARCHIVE + "/")]
  assert set(mixed.test_files) == set(archive) | set(corpus.test_files)
  seen = {hashlib.sha256(data.file_bytes(f)).digest() for f in stdlib}
  assert not any(hashlib.sha256(data.file_bytes(f)).digest() in seen for f in archive)


def test_test_split_batches_and_clear_errors(tmp_path, corpus, mixed):
  src = data.TextSource(mixed, seq_len=32)
  batch = src.batch(0, 3, 4, "test")
  assert not np.array_equal(batch.tokens, src.batch(0, 3, 4, "val").tokens)
  for row in batch.tokens:
    assert mixed.test.tobytes().find(row.astype(np.uint8).tobytes()) >= 0
  (tmp_path / "d").mkdir()
  for i in range(40):
    (tmp_path / "d" / f"f{i:02d}.txt").write_bytes(b"some text " * 10)
  with pytest.raises(ValueError, match="no test split"):
    data.text_source(str(tmp_path / "d"), 32, 0.25).batch(0, 3, 4, "test")
  with pytest.raises(ValueError, match="split='holdout' is unknown"):
    src.batch(0, 3, 4, "holdout")
  with pytest.raises(FileNotFoundError, match="corpus archive .* is missing"):
    data.archive_texts(str(tmp_path / "gone.tar.gz"))
  (tmp_path / "other.tar.gz").write_bytes(b"")
  with pytest.raises(ValueError, match="not a pinned corpus archive"):
    data.archive_texts(str(tmp_path / "other.tar.gz"))
  with pytest.raises(ValueError, match="load_corpus\\('mixed'\\)"):
    data.scan_files("mixed")
