"""Run folders: where a run writes, what it records of its machine and code, what it saved
for `--resume`, and the committed results (`results/`).

A run writes `runs/claims/ID/<run-id>/` (`new_run_dir`), records the JAX backend and the
versions of the libraries a re-training's numbers depend on (`environment`, Python's included),
the corpus its data is cut from (`corpus_sha256`), and the commit it
ran at (`git_revision`, `-dirty` for uncommitted changes), and saves each extra size's,
length's and budget's findings (`saved_findings`) so that a run can be resumed (`resume_dir`),
also from a kept result, which is never written to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from experiments import jsonio
from experiments.verdict.declare.claim import Claim
from experiments.verdict.running.schema import ENV_VERSIONS

LIBRARIES = tuple(k for k in ENV_VERSIONS if k != "python")  # beside jax: what training runs on


def environment() -> dict:
  """Backend, device and versions. Verdicts replay exactly from kept findings; re-training
  reproduces them only up to drift between library versions (setup.py pins lower bounds), so
  each result names the versions it ran with."""
  import platform
  from importlib import metadata

  import jax

  dev = jax.devices()[0]
  versions = {}
  for name in LIBRARIES:
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      versions[name] = None
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device": getattr(dev, "device_kind", str(dev)), **versions,
          "python": platform.python_version()}


def corpus_sha256() -> str:
  """The SHA-256 of the pinned `stdlib` archive, the corpus every text batch and base model reads
  (`experiments.data.pinned`; its reader checks the file against this value)."""
  from experiments.data import pinned

  return pinned.SHA256[pinned.STDLIB_ARCHIVE]


def git_revision() -> str | None:
  """`HEAD`'s commit (with `-dirty` for uncommitted changes), or None outside a git checkout."""
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                         timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return rev + ("-dirty" if dirty else "")


def new_run_dir(root: str, claim_id: str, quick: bool) -> str:
  """`root/claims/ID/<timestamp>[-quick]`, made unique with a counter if it exists."""
  base = os.path.join(root, "claims", claim_id, time.strftime("%Y%m%d-%H%M%S")
                      + ("-quick" if quick else ""))
  path, n = base, 1
  while os.path.exists(path):
    n += 1
    path = f"{base}-{n}"
  os.makedirs(path)
  return path


# The committed results (`python -m experiments.commands.table` reads them; `--keep` writes them).
RESULTS_DIR = os.path.join(os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 3)),
                           "results")


def saved_findings(run_dir: str) -> list[str]:
  """The findings a run saved for `--resume`, as paths relative to `run_dir`.

  The registered run's `findings.json` (saved when it is no point of an axis), and each axis
  point's (`size-<model>/`, `context-T<T>/`, `budget-x<k>/`, `<axis>-<value>/findings.json`),
  sorted.
  """
  subs = sorted(d for d in os.listdir(run_dir)
                if os.path.isfile(os.path.join(run_dir, d, "findings.json")))
  found = [os.path.join(d, "findings.json") for d in ["", *subs]]
  return [f for f in found if os.path.isfile(os.path.join(run_dir, f))]


def resume_dir(path: str, claim: Claim, quick: bool, seeds, root: str) -> str:
  """Checks that `path` is a run folder of this claim, quick flag and seeds; returns the folder
  the resumed run writes: `path` itself, or for a kept result (`results/<id>/`, which only
  `--keep` writes) a new run folder under `root` holding a copy of its `results.json`, its
  figures and its saved findings."""
  frozen = os.path.join(path, "claim.json")
  if not os.path.exists(frozen):
    raise ValueError(f"--resume {path}: no claim.json there. Fix: give the folder of an earlier "
                     f"run of {claim.id!r} (runs/claims/{claim.id}/<run-id>).")
  old = jsonio.load_strict(frozen)
  if (old.get("id"), old.get("quick"), old.get("seeds")) != (claim.id, quick, list(seeds)):
    raise ValueError(f"--resume {path}: that run is claim {old.get('id')!r}, quick="
                     f"{old.get('quick')}, seeds {old.get('seeds')}; this one is {claim.id!r}, "
                     f"quick={quick}, seeds {list(seeds)}. Fix: resume with the same settings.")
  kept = os.path.realpath(RESULTS_DIR)
  if os.path.commonpath([os.path.realpath(path), kept]) != kept:
    return path
  run_dir = new_run_dir(root, claim.id, quick)
  figures = sorted(n for n in os.listdir(path) if n.endswith(".png"))
  for name in ["results.json", *figures, *saved_findings(path)]:
    if os.path.exists(os.path.join(path, name)):
      os.makedirs(os.path.dirname(os.path.join(run_dir, name)), exist_ok=True)
      shutil.copy2(os.path.join(path, name), os.path.join(run_dir, name))
  return run_dir
