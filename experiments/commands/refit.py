"""Refits kept results with the current statistics and schema, without running anything.

    python -m experiments.commands.refit            # rewrite results/*/ in place
    python -m experiments.commands.refit --check    # exit 1 if any kept result would change

Each claim's `results/<id>/` is read in the current schema (`schema.load_results`: a version 1
file becomes version 2, its report's notes and figures lifted into it), refitted by
`experiments.verdict.running.refit` (every axis's fit recomputed from the kept rows and findings),
and written back with its report made again from the file alone and its axis figures drawn
again. The verdict and everything else stay as they were; a second run changes nothing.

A number counts as unchanged within `REL_TOL` of the kept one: a fit's last bit moves with the
numpy/scipy build (a slope of -0.19130378484411883 refits to ...886 on numpy 2.4), and a
check that failed on that would fail every fresh install, not a stale result.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.verdict.running.folders import RESULTS_DIR
from experiments.verdict.running.refit import frozen_claim, redraw, refit_results, rendered
from experiments.verdict.running.schema import load_results

REL_TOL = 1e-9  # far below the 4 significant digits any table or report shows


def same(a, b, rel_tol: float = REL_TOL) -> bool:
  """`a == b` for JSON trees, floats compared to `rel_tol` (`None`/ints/strings exactly)."""
  if isinstance(a, float) or isinstance(b, float):
    return (isinstance(a, (int, float)) and isinstance(b, (int, float))
            and not isinstance(a, bool) and not isinstance(b, bool)
            and math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0))
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(same(a[k], b[k], rel_tol) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(same(x, y, rel_tol) for x, y in zip(a, b, strict=True))
  return type(a) is type(b) and a == b


def refit_kept(claim_id: str, root: str = RESULTS_DIR, *, write: bool = True) -> bool:
  """Refits `root/<claim_id>/`; returns whether its `results.json` or `report.md` changed."""
  folder = os.path.join(root, claim_id)
  path = os.path.join(folder, "results.json")
  if not os.path.exists(path):
    return False
  on_disk = jsonio.load_strict(path)
  new = refit_results(frozen_claim(CLAIMS[claim_id], folder), load_results(folder), folder)
  with open(os.path.join(folder, "report.md")) as f:
    text = f.read()
  text_new = rendered(CLAIMS[claim_id], new, folder)
  changed = not same(new, on_disk) or text_new != text
  if changed and write:
    jsonio.dump_strict(new, path)
    with open(os.path.join(folder, "report.md"), "w") as f:
      f.write(text_new)
    redraw(CLAIMS[claim_id], new, folder)
  return changed


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.commands.refit", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--check", action="store_true", help="exit 1 if a kept result would change")
  p.add_argument("--results", default=RESULTS_DIR)
  args = p.parse_args(argv)
  stale = [cid for cid in CLAIMS if refit_kept(cid, args.results, write=not args.check)]
  for cid in stale:
    print(f"{cid}: {'would change' if args.check else 'refitted'}")
  return 1 if args.check and stale else 0


if __name__ == "__main__":
  sys.exit(main())
