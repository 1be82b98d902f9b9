"""The verdict tables, generated from the committed full runs in `results/`.

    python -m experiments.commands.table                 # print the README's table (markdown)
    python -m experiments.commands.table --wide          # print results/README.md's table
    python -m experiments.commands.table --check README.md   # exit 1 if README's table or
                                                             # results/README.md's differs
    python -m experiments.commands.table --reports --check   # exit 1 if a kept report.md is
                                                             # not what its results.json gives

`results/<claim-id>/` holds the latest full run of each claim under the pre-registered
contract (`claim.json`, `results.json`, `report.md`, figures). Every table row is made from
`replayed`: the kept run with its verdicts and effects recomputed from its per-seed runs by
the thresholds its `claim.json` froze, and its axes refitted (`verdict.running.refit`), so a table
never shows a number the kept seeds do not give. Two tables, one row per claim of
`experiments.claims.CLAIMS` in tour order:

* the README's (`findings_lines`), narrow: the claim, the preface's sentence, the primary
  verdict with its registration, the key number with its 95% interval, and the registered
  model. `make demo` opens with the same rows (`findings_rows`).
* `results/README.md`'s (`table_lines`), wide: also the extensions' verdicts, the registered
  size's regime, the trend with model size (`grows`, `shrinks` or `no trend`, with the slope's
  95% interval per e-fold of parameters; `—` for a claim that ran at one size), the effect
  against context and training tokens, and the published anchor.

A claim with no committed run says so. In each file the table sits between
`<!-- claims-table:start -->` and `<!-- claims-table:end -->`; `--check README.md` compares
both files (`results/README.md` beside the results) and names the first row that differs.
`--reports` makes each kept `report.md` again from its `results.json` alone (`stale_reports`;
`--check`: only compare, byte for byte).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.verdict.arithmetic import rule, stats
from experiments.verdict.declare.clause import settled_label
from experiments.verdict.render import cells
from experiments.verdict.render.section import axis_text
from experiments.verdict.running import history, multiplicity
from experiments.verdict.running.folders import RESULTS_DIR, saved_findings
from experiments.verdict.running.refit import frozen_claim, refit_results, rendered
from experiments.verdict.running.schema import load_results, validate_results

START, END = "<!-- claims-table:start -->", "<!-- claims-table:end -->"
CIRCLED = "①②③④⑤⑥⑦⑧⑨"  # clause numbers in a verdict cell


def load_committed(claim_id: str, root: str = RESULTS_DIR) -> dict | None:
  """The committed full run of `claim_id` (schema-checked), or None when there is none."""
  path = os.path.join(root, claim_id, "results.json")
  if not os.path.exists(path):
    return None
  obj = load_results(os.path.join(root, claim_id))
  try:
    validate_results(obj, list(CLAIMS))
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  if obj["claim"] != claim_id or obj["quick"]:
    raise ValueError(f"{path}: holds claim {obj['claim']!r} (quick={obj['quick']}); a committed "
                     f"result must be the full run of {claim_id!r}.")
  return obj


def committed_runs(root: str = RESULTS_DIR) -> dict[str, dict]:
  """`{claim id: results.json}` of every claim with a committed full run."""
  return {cid: r for cid in CLAIMS if (r := load_committed(cid, root)) is not None}


def replayed(claim_id: str, root: str = RESULTS_DIR) -> dict | None:
  """The committed full run of `claim_id` with what it decides recomputed from what it keeps,
  or None when there is none.

  The primary verdict, the extensions' verdicts and every effect with its 95% interval come
  again from the kept per-seed runs (`arms`) by the thresholds the run's `claim.json` froze,
  through the functions the runner used (`rule.verdict`, `rule.extension_verdicts`,
  `stats.effect`); each axis's fit comes from `refit.refit_results`. Everything else is the
  kept file's. Equal to the kept file when the machinery has not changed (`refit --check`,
  `tests/experiments/verdict/running/test_kept_results.py`).
  """
  res = load_committed(claim_id, root)
  if res is None:
    return None
  folder = os.path.join(root, claim_id)
  claim = frozen_claim(CLAIMS[claim_id], folder)
  seeds = [str(s) for s in res["seeds"]]
  runs = {arm: body["runs"] for arm, body in res["arms"].items()}
  indicative = res["quick"] or len(seeds) < 3
  out = refit_results(claim, res, folder)  # the claim as it ran: its primary, its axes' effect
  out["verdict"], out["reason"], _ = rule.verdict(claim, runs, seeds, indicative=indicative)
  out["extensions"] = rule.extension_verdicts(claim, runs, seeds, indicative=indicative)
  median = {th.name: th for th in claim.thresholds + tuple(
      t for ext in claim.extensions for t in ext.thresholds) if th.stat == "median"}
  out["effects"] = [stats.threshold_effect(median[e["name"]], runs, seeds) if e["name"] in median
                    else stats.effect(runs, seeds, e["name"], e["arm"], e["baseline"], e["metric"])
                    for e in res["effects"]]
  return jsonio.strict(out)


KEEP_MAX_BYTES = 1_000_000  # a committed file is small: no checkpoints, no arrays


def keep(run_dir: str, root: str = RESULTS_DIR) -> str:
  """Copies a full run's folder to `root/<claim-id>/`, replacing what was kept; returns it.

  Only a full run on the claim's pre-registered seeds, finished on a clean checkout, is kept
  (a quick run, an addendum, or a run whose `git` is dirty or missing is refused with the
  reason), and only its small files: `claim.json`, `results.json`,
  `report.md` and figures, each under `KEEP_MAX_BYTES`, and the findings each size and length
  saved (`size-<model>/findings.json`, `context-T<T>/findings.json`, `findings.json`: the
  per-seed metrics behind `scale` and `context`), those under `KEEP_MAX_BYTES` (a larger one
  is left in the run folder). `claim ID --resume results/ID` on another machine reuses them:
  a run longer than one sitting can land size by size. The folder is written under a
  temporary name and renamed into place, so a crash leaves the old result whole; then the kept
  version is added to `root/history.json` (the runner recorded the one it replaces).
  """
  res = load_results(run_dir)
  validate_results(res, list(CLAIMS))
  claim = CLAIMS[res["claim"]]
  if res["quick"]:
    raise ValueError(f"{run_dir} is a quick run; only full runs are kept. Fix: run "
                     f"`python -m experiments claim {claim.id}` without --quick.")
  revs = [res["git"]] + [b["added"]["git"] for b in res["axes"].values() if "added" in b]
  if any(r is None or r.endswith("-dirty") for r in revs):
    where = "no git checkout" if None in revs else "a dirty tree"
    raise ValueError(f"{run_dir} finished on {where} (git {revs}), so no commit holds the code "
                     "that produced it. Fix: "
                     "commit, then run it again from a clean checkout (e.g. `git worktree add "
                     "/tmp/clean HEAD` and run there).")
  if res["seeds"] != list(claim.seeds):
    raise ValueError(f"{run_dir} ran seeds {res['seeds']}, not the pre-registered "
                     f"{list(claim.seeds)}: an addendum is reported, not kept as the result.")
  names = sorted(n for n in os.listdir(run_dir)
                 if n in ("claim.json", "results.json", "report.md") or n.endswith(".png"))
  big = [n for n in names if os.path.getsize(os.path.join(run_dir, n)) > KEEP_MAX_BYTES]
  if big:
    raise ValueError(f"{run_dir}: {big} exceed {KEEP_MAX_BYTES} bytes; results/ keeps small "
                     "files only. Fix: write smaller figures.")
  names += [f for f in saved_findings(run_dir)
            if os.path.getsize(os.path.join(run_dir, f)) <= KEEP_MAX_BYTES]
  dest = os.path.join(root, claim.id)
  tmp, old = dest + ".tmp", dest + ".old"
  for d in (tmp, old):
    shutil.rmtree(d, ignore_errors=True)
  os.makedirs(tmp)
  for n in names:
    os.makedirs(os.path.dirname(os.path.join(tmp, n)), exist_ok=True)
    shutil.copy2(os.path.join(run_dir, n), os.path.join(tmp, n))
  if os.path.exists(dest):
    os.rename(dest, old)
  os.rename(tmp, dest)
  shutil.rmtree(old, ignore_errors=True)
  history.record(claim.id, root)  # the new kept version joins results/history.json
  return dest


def _axis_cells(res: dict, claim) -> list[str]:
  """Scale, context and budget cells. The axes follow the primary effect; where the key number
  shows another threshold (`Claim.key`), each measured cell names the effect it follows."""
  out = [axis_text(claim, res, name) for name in ("scale", "context", "budget")]
  primary = claim.primary
  if claim.key and primary is not None and claim.key != primary.name:
    out = [c if c == "—" else f"{primary.name}: {c}" for c in out]
  return out


def _as_ran(claim, root: str):
  """The registration a kept result ran under (its `claim.json`: thresholds, seeds), with the
  live claim's `key` where it names one of those thresholds (`claim.json` keeps no key): a
  kept row is described by what it ran, not by a newer registration of the claim."""
  ran = frozen_claim(claim, os.path.join(root, claim.id))
  if claim.key and ran.key is None and any(t.name == claim.key for t in ran.thresholds):
    ran = dataclasses.replace(ran, key=claim.key)
  return ran


def verdict_cell(res: dict, claim) -> str:
  """The primary verdict with its registration, e.g. `refuted (v2)` (`(addendum seeds)` when
  the run's seeds are not those of `claim`, the registration it ran under), then each
  clause's verdict where the sentence is split (`refuted (v4): ① supported (proof, verified
  exactly); ② refuted`)."""
  registered = res["seeds"] == list(claim.seeds)
  text = (res["verdict"] + ("" if registered else " (addendum seeds)")
          + (f" (v{res['version']})" if res.get("version", 1) > 1 else " (v1)"))
  if res.get("clauses"):
    text += ": " + "; ".join(f"{CIRCLED[i]} {c['text']}: {settled_label(c['verdict'], c['proof'])}"
                             for i, c in enumerate(res["clauses"]))
  return text


def _holm_cells(root: str) -> dict[str, str]:
  """Each kept result's survival under Holm across every claim's primaries (`—`: none kept)."""
  family = multiplicity.kept_family(root, order=list(CLAIMS), claims=CLAIMS)
  return {cid: multiplicity.holm_text(family[cid]) if cid in family else "—" for cid in CLAIMS}


def findings_rows(root: str = RESULTS_DIR) -> list[dict]:
  """One row per claim, in tour order: `{"id", "preface", "verdict", "key", "model"}`, every
  cell from `replayed` (`"no committed run"` and `—` where there is none). The README's table
  (`findings_lines`) and the opening of `make demo` both show these."""
  rows = []
  holm = _holm_cells(root)
  for claim in CLAIMS.values():
    res = replayed(claim.id, root)
    if res is None:
      rows.append({"id": claim.id, "preface": claim.preface, "verdict": "no committed run",
                   "holm": "—", "replicates": "—", "key": "—", "model": "—"})
      continue
    reg = res["config"].get("regime") or {}
    model = (f"`{reg['model']}`" + (f", {cells.params_text(reg['params'])} params"
                                    if reg.get("params") else "")) if reg.get("model") else "—"
    ran = _as_ran(claim, root)
    rows.append({"id": claim.id, "preface": claim.preface, "verdict": verdict_cell(res, ran),
                 "holm": holm[claim.id], "replicates": history.replication(claim.id, root),
                 "key": cells.key_number(res, ran), "model": model})
  return rows


def findings_lines(root: str = RESULTS_DIR) -> list[str]:
  """The README's table: claim, the preface's sentence, verdict, key number, model."""
  rows = [[f"`{r['id']}`", r["preface"], r["verdict"], r["holm"], r["replicates"], r["key"],
           r["model"]] for r in findings_rows(root)]
  header = ["claim", "the preface says", "verdict (registration): clauses",
            f"after Holm (α {multiplicity.ALPHA}, every claim's primaries)",
            "replicates the previous version (fresh seeds)", "key number (95% CI)",
            "registered model"]
  return cells.table(header, rows)[:-1]


def table_lines(root: str = RESULTS_DIR) -> list[str]:
  """The wide table of `results/README.md` as markdown lines (no trailing blank line)."""
  rows = []
  holm = _holm_cells(root)
  for i, claim in enumerate(CLAIMS.values(), 1):
    res = replayed(claim.id, root)
    if res is None:
      rows.append([i, claim.topic, f"`{claim.id}`", claim.kind, claim.preface,
                   "no committed run", "—", "—", "—", "—", "—", "—", "—", "—", "—",
                   cells.anchor_text(claim)])
      continue
    ext = "; ".join(f"{e['name']}: {e['verdict']}" for e in res["extensions"]) or "—"
    ran = _as_ran(claim, root)
    rows.append([i, claim.topic, f"`{claim.id}`", claim.kind + (" (proof)" if claim.theorem
                                                                 else ""),
                 claim.preface, verdict_cell(res, ran),
                 history.verdict_path(claim.id, root) or "—",
                 history.replication(claim.id, root), holm[claim.id],
                 cells.regime_text(res, claim.reads_base),
                 ext, cells.key_number(res, ran), *_axis_cells(res, ran),
                 cells.anchor_text(claim)])
  header = ["#", "topic", "claim", "kind", "the preface says", "primary verdict (registration)",
            "verdict history (kept versions, oldest first)",
            "replicates the previous version (fresh seeds)",
            f"after Holm (α {multiplicity.ALPHA}, every claim's primaries)",
            "registered size: model, params, tokens/param, held-out bits/byte", "extensions",
            "key number (95% CI)", "trend with size", "effect against context T",
            "effect against training tokens", "published anchor"]
  return cells.table(header, rows)[:-1]


def readme_table(text: str, path: str = "README.md") -> list[str]:
  """The lines between the markers of `text`; raises `ValueError` naming what is missing."""
  if START not in text or END not in text:
    raise ValueError(f"{path}: no verdict table between {START} and {END}. Fix: paste the "
                     "output of `python -m experiments.commands.table` between those markers.")
  inner = text.split(START, 1)[1].split(END, 1)[0]
  return [line for line in inner.strip("\n").split("\n")]


def first_difference(expected: list[str], found: list[str]) -> str | None:
  """A one-line description of the first differing row, or None when equal."""
  for i in range(max(len(expected), len(found))):
    e = expected[i] if i < len(expected) else "(no row)"
    f = found[i] if i < len(found) else "(no row)"
    if e != f:
      return f"row {i + 1} differs:\n  results/ says: {e}\n  README has:    {f}"
  return None


def stale_reports(root: str = RESULTS_DIR, *, write: bool = False) -> list[str]:
  """The kept results whose `report.md` is not, byte for byte, what their `results.json`
  gives (`refit.rendered`); with `write`, those reports are written again."""
  stale = []
  for cid in CLAIMS:
    folder = os.path.join(root, cid)
    if load_committed(cid, root) is None:
      continue
    text = rendered(CLAIMS[cid], load_results(folder), folder)
    with open(os.path.join(folder, "report.md")) as f:
      if f.read() == text:
        continue
    stale.append(cid)
    if write:
      with open(os.path.join(folder, "report.md"), "w") as f:
        f.write(text)
  return stale


def check(readme: str, root: str = RESULTS_DIR) -> list[str]:
  """What differs between the tables and `results/`: README's narrow table in `readme`, the
  wide one in `root/README.md`; one message per file that differs (none: both match)."""
  out = []
  for path, lines, made_by in ((readme, findings_lines(root), ""),
                               (os.path.join(root, "README.md"), table_lines(root), " --wide")):
    with open(path) as f:
      diff = first_difference(lines, readme_table(f.read(), path))
    if diff:
      out.append(f"{path}: the verdict table does not match {root}: {diff}\nFix: paste the "
                 f"output of `python -m experiments.commands.table{made_by}`.")
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m experiments.commands.table", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--check", metavar="README", nargs="?", const="",
                 help="compare with the table in this file and the wide table in the results "
                      "folder's README.md (with --reports: compare only)")
  p.add_argument("--wide", action="store_true",
                 help="print the wide table of results/README.md instead of the README's")
  p.add_argument("--reports", action="store_true",
                 help="make each kept report.md from its results.json (with --check: compare)")
  p.add_argument("--results", default=RESULTS_DIR, help="the results folder")
  args = p.parse_args(argv)
  if args.reports:
    stale = stale_reports(args.results, write=args.check is None)
    for cid in stale:
      print(f"{cid}: report.md {'differs from' if args.check is not None else 'made from'} "
            "its results.json" + (" (Fix: python -m experiments.commands.refit)"
                                  if args.check is not None else ""),
            file=sys.stderr if args.check is not None else sys.stdout)
    return 1 if stale and args.check is not None else 0
  if args.check == "":
    print("error: --check needs the README to compare (or --reports).", file=sys.stderr)
    return 2
  try:
    if args.check is None:
      print("\n".join(table_lines(args.results) if args.wide else findings_lines(args.results)))
      return 0
    diffs = check(args.check, args.results)
  except (ValueError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for d in diffs:
    print(d, file=sys.stderr)
  if diffs:
    return 1
  where = os.path.relpath(args.results)
  print(f"{args.check} and {os.path.join(where, 'README.md')}: the verdict tables match {where}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
