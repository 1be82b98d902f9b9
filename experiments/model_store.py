"""Committed base models: float16 `params.npz` + `meta.json` under `results/models/`, by hash.

The models of the trained regime (`experiments.models.TRAINED`) are small enough to keep in
the repository (a few hundred kB per seed in float16), so a verdict that reads one replays on
a fresh clone without training it. Each is a folder `results/models/<name>/seed-<k>/` holding

- `params.npz`: every leaf of the parameter tree, named by its path (`blocks/attn/w_q`), in
  float16 (what training wrote, rounded once; every claim reads this rounded model);
- `meta.json`: the recipe and its cache key, the training's losses, the held-out loss and bits
  per byte of the float16 model itself (`heldout`), and `sha256`, the digest of the arrays
  (names, dtypes, shapes and bytes, so it does not depend on the zip container).

`load` refuses a folder whose arrays do not match their digest; `verify` checks every folder
(`python -m experiments models --verify`), and also that its recipe key is the current one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np

MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "results", "models")
DTYPE = np.float16


def digest(arrays) -> str:
  """SHA-256 of named arrays: each name, dtype, shape and raw bytes, in name order.

  Example:
    >>> import numpy as np
    >>> from experiments.model_store import digest
    >>> a = {"w": np.ones((2, 2), np.float16)}
    >>> same, other = {"w": np.ones((2, 2), np.float16)}, {"w": a["w"] * 2}
    >>> digest(a) == digest(same), digest(a) == digest(other)
    (True, False)
  """
  h = hashlib.sha256()
  for name in sorted(arrays):
    a = np.ascontiguousarray(arrays[name])
    h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def folder(name: str, seed: int, root: str | None = None) -> str:
  """`root/<name>/seed-<seed>` (default root `MODELS_DIR`): where the committed model lives."""
  return os.path.join(root or MODELS_DIR, name, f"seed-{seed}")


def rounded(arrays) -> dict[str, np.ndarray]:
  """The arrays as stored: floating leaves in `DTYPE`, others unchanged."""
  return {k: np.asarray(v).astype(DTYPE) if np.issubdtype(np.asarray(v).dtype, np.floating)
          else np.asarray(v) for k, v in arrays.items()}


def save(path: str, arrays, meta: dict) -> dict:
  """Writes `params.npz` (rounded) and `meta.json` (with `sha256`) atomically; returns the meta."""
  arrays = rounded(arrays)
  meta = {**meta, "dtype": np.dtype(DTYPE).name, "sha256": digest(arrays)}
  tmp = f"{path}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  np.savez(os.path.join(tmp, "params.npz"), **arrays)
  with open(os.path.join(tmp, "meta.json"), "w") as f:
    json.dump(meta, f, indent=1, sort_keys=True)
    f.write("\n")
  shutil.rmtree(path, ignore_errors=True)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  os.rename(tmp, path)
  return meta


def read_meta(path: str) -> dict:
  with open(os.path.join(path, "meta.json")) as f:
    return json.load(f)


def load(path: str) -> tuple[dict[str, np.ndarray], dict]:
  """`(arrays, meta)` of a stored model, its arrays checked against `meta["sha256"]`.

  Raises:
    ValueError: the folder is incomplete or its arrays do not match their digest, naming the
      folder and the fix.
  """
  if not os.path.exists(os.path.join(path, "meta.json")):
    raise ValueError(f"{path}: no meta.json, so it is not a stored model. Fix: store it with "
                     "`python -m experiments models --commit NAME`.")
  meta = read_meta(path)
  with np.load(os.path.join(path, "params.npz")) as f:
    arrays = {k: f[k] for k in f.files}
  if digest(arrays) != meta.get("sha256"):
    raise ValueError(f"{path}: params.npz does not match the sha256 in its meta.json (the file "
                     "was changed or truncated). Fix: `git checkout -- " + path + "`, or "
                     "retrain and store it with `python -m experiments models --commit NAME`.")
  return arrays, meta


def stored(root: str | None = None) -> list[tuple[str, int, str]]:
  """`[(name, seed, path)]` of every stored model folder under `root` (`MODELS_DIR`), sorted."""
  root = root or MODELS_DIR
  out = []
  for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    for entry in sorted(os.listdir(os.path.join(root, name))):
      if entry.startswith("seed-") and entry[5:].isdigit():
        out.append((name, int(entry[5:]), os.path.join(root, name, entry)))
  return out


def verify(expected_key, root: str | None = None) -> list[dict]:
  """Checks every stored model: its digest, and that its recipe key is `expected_key(name, seed)`.

  Args:
    expected_key: `(name, seed) -> str | None`, the current recipe's cache key (None: the name
      is no longer a recipe).
    root: the store.

  Returns:
    `[{"name", "seed", "ok", "why"}]`, one per folder; `why` is "" when `ok`.
  """
  rows = []
  for name, seed, path in stored(root):
    try:
      _, meta = load(path)
      want = expected_key(name, seed)
      if want is None:
        why = f"{name!r} is not a recipe of experiments.models.RECIPES"
      elif meta.get("key") != want:
        why = (f"trained under recipe key {meta.get('key')}, the recipe's is now {want}: "
               "retrain and --commit it")
      else:
        why = ""
    except ValueError as e:
      why = str(e)
    rows.append({"name": name, "seed": seed, "ok": not why, "why": why})
  return rows
