"""The pinned corpus archives: their SHA-256, a reader that checks it, and the `stdlib` builder.

The `stdlib` corpus is the bytes of Python 3.11.7's standard-library `.py` files, shipped as
`experiments/corpora/python-3.11.7-stdlib.tar.gz`, so the training bytes and the splits are the
same on every interpreter (nothing reads `sysconfig` for data). `read_archive` returns an
archive's members and refuses one whose SHA-256 is not the pinned one. `build_stdlib` makes the
archive from a Python 3.11.7 standard library, byte for byte:

  python -m experiments.data.make_stdlib --root /path/to/lib/python3.11 --out stdlib.tar.gz

(`--root` defaults to the running interpreter's `sysconfig.get_paths()["stdlib"]`; the command
prints the archive's SHA-256 and whether it is the pinned one.) The selection rule
(`stdlib_members`): every `.py` file under the root, walked in sorted order, skipping the
folders `site-packages`, `dist-packages` and `__pycache__` at every depth; plus `idlelib/*.txt`,
IDLE's text documents, which the `lora` claim adapts to (no `.py` corpus contains them).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import os
import tarfile

# experiments/corpora/, beside this package.
CORPORA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora")
STDLIB_ARCHIVE = os.path.join(CORPORA, "python-3.11.7-stdlib.tar.gz")
# CPython 3.11.2's Doc/ sources (prose) and Tools/ scripts (code) of the `mixed` corpus.
CPYTHON_ARCHIVE = os.path.join(CORPORA, "cpython-3.11.2.tar.gz")
# The SHA-256 of each shipped archive; `experiments/corpora/README.md` says how each was made.
SHA256 = {
    STDLIB_ARCHIVE: "c7669b9e59ab0c642ee853b79d65f1e985556407218645d405cc5008582c4d2d",
    CPYTHON_ARCHIVE: "94c110a60d542d0866f339da552823aadbc8948614902c935dffc4b2abee45a0",
}
SKIPPED_FOLDERS = ("site-packages", "dist-packages", "__pycache__")


def sha256_of(path: str) -> str:
  """The hex SHA-256 of the file at `path`."""
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def read_archive(path: str) -> dict[str, bytes]:
  """The regular files of the pinned archive at `path`: `{member name: bytes}`, sorted by name.

  Raises:
    FileNotFoundError: the archive is missing (it ships with the package).
    ValueError: its SHA-256 is not the one pinned in `SHA256` (a changed or damaged file).
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"the corpus archive {path} is missing; the `stdlib` and `mixed` corpora read it. "
        "Fix: install from a checkout (`pip install -e .` reads experiments/corpora/ in place), "
        "build the wheel with MATRICES_WITH_CORPUS=1 (a plain wheel leaves the corpora out), "
        "or restore the file with git.")
  if path not in SHA256:
    raise ValueError(f"{path} is not a pinned corpus archive. Fix: read one of "
                     f"{sorted(SHA256)}, or pin its SHA-256 in experiments.data.pinned.SHA256.")
  with open(path, "rb") as f:
    raw = f.read()
  digest = hashlib.sha256(raw).hexdigest()
  if digest != SHA256[path]:
    raise ValueError(f"the corpus archive {path} has SHA-256 {digest}, not the pinned "
                     f"{SHA256[path]}. Fix: restore it with `git checkout -- {path}`.")
  out = {}
  # One zlib call for the whole stream, then the tar from memory: 3x faster than tarfile's
  # streaming gzip reader.
  with tarfile.open(fileobj=io.BytesIO(gzip.decompress(raw)), mode="r:") as tar:
    for member in tar.getmembers():
      if member.isfile():
        out[member.name] = tar.extractfile(member).read()
  return dict(sorted(out.items()))


def stdlib_members(root: str) -> list[str]:
  """The archive's member names under the standard-library folder `root`, sorted (see above)."""
  names = []
  for folder, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
    names += [os.path.relpath(os.path.join(folder, n), root) for n in files if n.endswith(".py")]
  names += [os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "idlelib", "*.txt"))]
  return sorted(names)


def write_archive(members: dict[str, bytes], out: str) -> str:
  """Writes `members` (`{name: bytes}`) to the tar.gz `out` deterministically; returns its SHA-256.

  The recipe of `cpython-3.11.2.tar.gz`: members in sorted order, each with mode 0644, mtime 0,
  uid/gid 0 and no owner names, in a ustar tar, gzip level 9 with mtime 0 and no file name, so
  the same members give the same bytes.
  """
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for name in sorted(members):
      info = tarfile.TarInfo(name)
      info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
      info.uid = info.gid = 0
      info.uname = info.gname = ""
      tar.addfile(info, io.BytesIO(members[name]))
  with open(out, "wb") as f:
    f.write(gzip.compress(buf.getvalue(), compresslevel=9, mtime=0))
  return sha256_of(out)


def build_stdlib(root: str, out: str) -> str:
  """Builds the `stdlib` archive from the standard library at `root` into `out`; its SHA-256."""
  members = {}
  for name in stdlib_members(root):
    with open(os.path.join(root, name), "rb") as f:
      members[name] = f.read()
  return write_archive(members, out)
