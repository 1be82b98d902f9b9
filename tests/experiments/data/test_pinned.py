"""The pinned corpus archives: the bytes every base model trained on, checked and rebuilt."""

import glob
import hashlib
import os
import shutil

import numpy as np
import pytest

from experiments import data
from experiments.data import pinned

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
# SHA-256 of the `stdlib` corpus's byte arrays. `train` and `heldout` were taken from the
# corpus as read from Python 3.11.7's `sysconfig` standard library before the archive existed
# (`Corpus.train` and `Corpus.val` then), so the committed base models' training text and
# held-out windows are unchanged; `val` and `test` are the halves `is_test` cuts from `heldout`.
BYTES_SHA256 = {
    "train": "de3f8c26446c9c2a76716ccba3797c64e174e027d6e59ecb1819efd95142d0a5",
    "heldout": "f3011fe4c3752dad749fdb8454b33b2589aea230ac87d278ebfd16b199aa6934",
    "val": "03a7b6f929cd3dfb92695c83690648e00824ddc5c15507f7e636161973f20a2e",
    "test": "73d08eb8ebe58d74ce09a682b66b318dccb66fbb6a72124cd0de09957a612761",
}


@pytest.fixture(scope="module")
def corpus():
  return data.load_corpus("stdlib")


def test_the_stdlib_corpus_is_the_bytes_the_base_models_trained_on(corpus):
  arrays = {"train": corpus.train, "heldout": corpus.heldout, "val": corpus.val,
            "test": corpus.test}
  assert {k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in arrays.items()} == BYTES_SHA256
  assert (len(corpus.val_files), len(corpus.val), len(corpus.test_files), len(corpus.test)) == (
      48, 905_081, 49, 1_164_222)
  # heldout is val and test together, in file order: the validation split before the cut.
  held = sorted(corpus.val_files + corpus.test_files)
  assert corpus.heldout.tobytes() == b"".join(data.file_bytes(f) for f in held)
  prefix = len(data.STDLIB_ARCHIVE) + 1
  assert all(data.is_test(f[prefix:]) for f in corpus.test_files)
  assert not any(data.is_test(f[prefix:]) for f in corpus.val_files)


def test_heldout_windows_are_the_validation_windows_of_before(corpus):
  """`heldout` draws with val's stream over the old validation bytes: the base models' windows."""
  src = data.TextSource(corpus, seq_len=16)
  got = src.batch(0, 3, 4, "heldout").tokens
  starts = data.batch_rng(0, 3, "val").integers(0, len(corpus.heldout) - 17 + 1, 4)
  assert np.array_equal(got, corpus.heldout[starts[:, None] + np.arange(17)].astype(np.int32))
  test = src.batch(0, 3, 4, "test").tokens
  assert not np.array_equal(test, src.batch(0, 3, 4, "val").tokens)
  assert all(corpus.test.tobytes().find(r.astype(np.uint8).tobytes()) >= 0 for r in test)


def test_the_archives_hashes_are_pinned_in_code_and_readme():
  readme = open(os.path.join(data.CORPORA, "README.md")).read()
  for path, digest in pinned.SHA256.items():
    assert pinned.sha256_of(path) == digest
    assert digest in readme and os.path.basename(path) in readme


def test_a_changed_archive_is_refused_naming_the_file_and_the_fix(tmp_path, monkeypatch):
  bad = tmp_path / "python-3.11.7-stdlib.tar.gz"
  shutil.copy(data.STDLIB_ARCHIVE, bad)
  with open(bad, "r+b") as f:
    f.seek(1000)
    f.write(b"x")
  monkeypatch.setitem(pinned.SHA256, str(bad), pinned.SHA256[data.STDLIB_ARCHIVE])
  with pytest.raises(ValueError, match=f"{bad} has SHA-256 [0-9a-f]{{64}}, not the pinned "
                                       f"{pinned.SHA256[data.STDLIB_ARCHIVE]}. Fix: restore"):
    pinned.read_archive(str(bad))


def test_the_builder_selects_by_the_rule_and_writes_the_same_bytes_twice(tmp_path):
  files = {"a.py": b"a = 1\n", "pkg/b.py": b"b = 2\n", "pkg/c.txt": b"not code",
           "site-packages/x.py": b"x", "pkg/__pycache__/y.py": b"y", "dist-packages/z.py": b"z",
           "idlelib/NEWS.txt": b"news", "idlelib/d.py": b"d", "idlelib/sub/e.txt": b"e"}
  for name, body in files.items():
    (tmp_path / "lib" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "lib" / name).write_bytes(body)
  assert pinned.stdlib_members(str(tmp_path / "lib")) == [
      "a.py", "idlelib/NEWS.txt", "idlelib/d.py", "pkg/b.py"]
  one = pinned.build_stdlib(str(tmp_path / "lib"), str(tmp_path / "one.tar.gz"))
  two = pinned.build_stdlib(str(tmp_path / "lib"), str(tmp_path / "two.tar.gz"))
  assert one == two == pinned.sha256_of(str(tmp_path / "two.tar.gz"))
  assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()


def test_the_shipped_archive_holds_the_selection_of_a_3_11_7_stdlib():
  texts = pinned.read_archive(data.STDLIB_ARCHIVE)
  py = [n for n in texts if n.endswith(".py")]
  assert len(py) == 1790 and sum(len(texts[n]) for n in py) == 31_525_224
  assert sorted(n for n in texts if not n.endswith(".py")) == [
      "idlelib/CREDITS.txt", "idlelib/HISTORY.txt", "idlelib/NEWS.txt", "idlelib/NEWS2x.txt",
      "idlelib/README.txt", "idlelib/TODO.txt", "idlelib/extend.txt"]
  assert not any(part in n.split("/") for n in texts for part in pinned.SKIPPED_FOLDERS)


def test_no_data_is_read_from_the_running_interpreter():
  """Only the archive's builder may look at `sysconfig`; every corpus reads the archives."""
  readers = [f for f in glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True)
             if "import sysconfig" in open(f).read()]
  assert [os.path.relpath(f, ROOT) for f in readers] == ["experiments/data/make_stdlib.py"]
