"""Every kept version of each claim, and the rule that a re-registration runs on fresh seeds.

`results/<id>/` holds only the latest kept result of a claim; `results/history.json` holds one
entry per version ever kept: `{claim id: [{"version", "seeds", "tuning_seeds", "verdict",
"ran_at"}, ...]}` (the seeds and tuning seeds every kept run of that version used, its last
kept verdict and the commit that run was made at). It was derived once from the git history
of `results/<id>/results.json` (`from_git`) and grows at each `--keep` (`record`).

The rule (`check_fresh`): a version registered after an earlier version's result was kept
reads its verdict on seeds and tuning seeds that no earlier kept version ran on; a result was
seen, so reusing its seeds would re-draw, not confirm. Results kept before the rule stay kept,
and a version already kept may be kept again (an axis added onto it).
"""

from __future__ import annotations

import json
import os
import subprocess

from experiments import jsonio
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running.folders import RESULTS_DIR

HISTORY = "history.json"  # under the results folder


def entry(results: dict) -> dict:
  """A kept `results.json`'s history entry."""
  return {"version": results.get("version", 1), "seeds": sorted(results["seeds"]),
          "tuning_seeds": sorted(results["tuning_seeds"]), "verdict": results["verdict"],
          "ran_at": results.get("git")}


def merge(entries) -> list[dict]:
  """One entry per version, in version order: seeds and tuning seeds the union over the runs
  kept under it, verdict and `ran_at` the last one's."""
  out: dict[int, dict] = {}
  for e in entries:
    was = out.get(e["version"])
    out[e["version"]] = {**e, **({
        "seeds": sorted(set(was["seeds"]) | set(e["seeds"])),
        "tuning_seeds": sorted(set(was["tuning_seeds"]) | set(e["tuning_seeds"]))} if was else {})}
  return [out[v] for v in sorted(out)]


def load(root: str = RESULTS_DIR) -> dict[str, list[dict]]:
  """`root/history.json` (`{}` when absent)."""
  path = os.path.join(root, HISTORY)
  return jsonio.load_strict(path) if os.path.exists(path) else {}


def kept(claim_id: str, root: str = RESULTS_DIR) -> list[dict]:
  """The kept versions of `claim_id`: its history and its current `results/<id>/results.json`."""
  now = os.path.join(root, claim_id, "results.json")
  current = [entry(jsonio.load_strict(now))] if os.path.exists(now) else []
  return merge([*load(root).get(claim_id, ()), *current])


def check_fresh(claim, seeds, root: str = RESULTS_DIR) -> None:
  """Refuses to keep `claim` run on `seeds` when that breaks the fresh-seeds rule.

  A version already kept passes (it was kept before; an axis added onto it is no new reading).
  A new version must be later than every kept one, say why it was registered with a
  `Revision`, and use reported and tuning seeds that no earlier kept version used.

  Raises:
    ValueError: one line naming the overlapping seeds (or what is missing) and the fix.
  """
  versions = kept(claim.id, root)
  if any(e["version"] == claim.version for e in versions):
    return
  head = f"--keep: {claim.id!r} v{claim.version}"
  newest = max((e["version"] for e in versions), default=0)
  if claim.version < newest:
    raise ValueError(f"{head} is older than its kept v{newest}. Fix: register the change as "
                     f"v{newest + 1}.")
  if versions and claim.version > 1 and not isinstance(claim.revisions[-1], Revision):
    raise ValueError(f"{head} is revised by a line, not a Revision. Fix: revisions=(..., "
                     f"Revision({claim.version}, 'defect' | 'protocol', why, test=...)).")
  used: dict[int, set[int]] = {}
  for e in versions:
    for s in (*e["seeds"], *e["tuning_seeds"]):
      used.setdefault(s, set()).add(e["version"])
  mine = {int(s) for s in (*seeds, *claim.tuning_seeds)}
  overlap = sorted(mine & set(used))
  if overlap:
    first = _free(set(used), len(seeds), 10)
    tune = _free(set(used) | set(range(first, first + len(seeds))),
                 len(claim.tuning_seeds) or 1, 110)
    raise ValueError(
        f"{head} runs on seeds {overlap} that kept "
        f"{', '.join(f'v{v}' for v in sorted(set().union(*(used[s] for s in overlap))))} ran on "
        f"(reported or "
        f"tuning); a re-registration is confirmed on fresh seeds. Fix: register seeds and "
        f"tuning_seeds outside {sorted(used)}, e.g. seeds {first}-{first + len(seeds) - 1} "
        f"and tuning seeds from {tune}.")


def _free(taken: set[int], n: int, start: int) -> int:
  """The first of `start, start + 10, ...` that begins `n` consecutive seeds none `taken`."""
  while taken & set(range(start, start + n)):
    start += 10
  return start


def record(claim_id: str, root: str = RESULTS_DIR) -> list[dict]:
  """Adds the current kept result of `claim_id` to `root/history.json` (before a keep replaces
  it); returns the claim's history."""
  hist = load(root)
  hist[claim_id] = kept(claim_id, root)
  if hist[claim_id]:
    write(hist, os.path.join(root, HISTORY))
  return hist[claim_id]


def write(hist: dict[str, list[dict]], path: str) -> None:
  """Writes the history as strict JSON, one line per kept version."""
  blocks = [f" {json.dumps(cid)}: [\n" + ",\n".join(f"  {jsonio.dumps_line(e)}" for e in es)
            + "\n ]" for cid, es in hist.items()]
  with open(path, "w") as f:
    f.write("{\n" + ",\n".join(blocks) + "\n}\n")


def from_git(claim_ids, repo: str | None = None) -> dict[str, list[dict]]:
  """Every version of each claim that `results/<id>/results.json` held in any commit, merged.

  How `results/history.json` was made, once (issue 47):
  `history.write(history.from_git(CLAIMS), "results/history.json")`.
  """
  repo = repo or os.path.dirname(RESULTS_DIR)

  def git(*args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout

  out = {}
  for cid in claim_ids:
    path = f"results/{cid}/results.json"
    found = []
    for commit in git("log", "--reverse", "--format=%H", "--", path).split():
      try:
        found.append(entry(json.loads(git("show", f"{commit}:{path}"))))
      except subprocess.CalledProcessError:  # the commit deleted it
        continue
    if found:
      out[cid] = merge(found)
  return out


def verdict_path(claim_id: str, root: str = RESULTS_DIR) -> str:
  """The verdicts of every kept version, oldest first, for a table cell.

  Example: `v1 inconclusive → v2 inconclusive → v3 refuted` (the last is the current one).
  """
  return " → ".join(f"v{e['version']} {e['verdict']}" for e in kept(claim_id, root))


def replication(claim_id: str, root: str = RESULTS_DIR) -> str:
  """Whether the current kept version replicates the previous one, for a table cell.

  `yes` or `no (v2 refuted → v3 inconclusive)` when the current version ran on seeds and
  tuning seeds no earlier kept version used (a confirmation); `not confirmed (seeds reused)`
  when it shares seeds with an earlier version (kept before the fresh-seeds rule); `—` with one
  version or none.

  Example:
    >>> import json, os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> old = {"version": 1, "seeds": [0], "tuning_seeds": [9], "verdict": "refuted"}
    >>> new = {"version": 2, "seeds": [10], "tuning_seeds": [19], "verdict": "refuted"}
    >>> _ = open(os.path.join(root, HISTORY), "w").write(json.dumps({"c": [old, new]}))
    >>> replication("c", root)
    'yes'
  """
  versions = kept(claim_id, root)
  if len(versions) < 2:
    return "—"
  now, before = versions[-1], versions[:-1]
  used = set().union(*(set(e["seeds"]) | set(e["tuning_seeds"]) for e in before))
  if used & (set(now["seeds"]) | set(now["tuning_seeds"])):
    return "not confirmed (seeds reused)"
  prev = before[-1]
  if prev["verdict"] == now["verdict"]:
    return "yes"
  return f"no (v{prev['version']} {prev['verdict']} → v{now['version']} {now['verdict']})"


def revision_lines(claim, root: str = RESULTS_DIR) -> list[str]:
  """Markdown lines: each kept version's verdict and seeds, and why each later one was registered
  (`claim.revisions`: a `Revision`, or the line of a version registered before it)."""
  why = {(r.version if isinstance(r, Revision) else int(r.split(":")[0][1:])): r
         for r in claim.revisions}
  lines = []
  for e in kept(claim.id, root):
    r = why.get(e["version"])
    reason = ("" if r is None else f": {r.kind}, {r.why}" if isinstance(r, Revision)
              else f": {r.split(': ', 1)[1]}")
    tuning = f", tuning seeds {e['tuning_seeds']}" if e["tuning_seeds"] else ""
    lines.append(f"- v{e['version']} {e['verdict']} (seeds {e['seeds']}{tuning}){reason}")
  return lines
