"""The tour: every claim in order, one verdict table. Also the `claim` command.

    python -m experiments tour [--quick] [--only ID ...] [--scale] [--jobs 2]  # make demo: --quick
    python -m experiments claim ID [--quick] [--seeds 0 1 2 3 4] [--axes scale=mini,small,base]
                                   [--axes context=256,1024] [--axes budget=4] [--keep]
    python -m experiments claim ID --resume RUN_DIR [--axes budget=4,16] [--keep]

A full tour opens with the library's own checks (the matrix catalog of `tiny`, a forward pass
on real text, KV-cache decoding = full forward), then runs each built claim at its registered
size (a progress line per claim with its verdict, ending with its report's path) and writes
`runs/tour/<run-id>/{results.json, report.md}`: one table of all 14 claims (kind, primary
verdict, key number with its unit and interval, trend with size, published anchor), then one
short paragraph per claim linking its own report.

A quick tour (`make demo`) shows the findings, not its own runs' verdicts
(`experiments.commands.findings`): it opens with the committed verdict table (`results/`, every
verdict and interval recomputed from the kept per-seed runs), runs the opening checks, measures
again in full the claims that read the committed base models in seconds
(`findings.REMEASURED`, each key number beside the kept one), and runs every other claim at
its quick sizes on one seed as a pipeline check, whose line carries no verdict. Its claims run
two at a time in worker processes (`--jobs`), sharing compiled programs through
`runs/cache/xla` and compiling at XLA's backend optimization level 0. `--quick` took 271 s for
all 14 claims on 2 idle CPU cores at git 25bf2a8 (training the shared `quick` models and an
empty compilation cache included); `README.md` gives the current demo's time. A full tour reads
every verdict at its registered size, with each context claim's lengths; `--scale` adds every
claim's other sizes, which take hours per claim on 2 CPU cores (each claim's `runtime_s` in
`results/` says how many), so the trends with size are run claim by claim with `claim ID` and
kept in `results/`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import multiprocessing
import os
import sys
import time
import traceback
from concurrent import futures

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.commands import findings, table
from experiments.verdict.render import cells, report
from experiments.verdict.running.runner import run_claim
from experiments.verdict.running.schema import validate_tour


def _opening(log) -> list[str]:
  """The old demo's checks, captured as markdown."""
  from experiments.commands import demo

  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    out = demo.run("tiny", seed=0, steps=16, seq_len=64)
  ok = out["cache_max_abs_err"] <= 1e-5
  log(f"[tour] opening checks: catalog of tiny, forward loss {out['loss']:.3f} nats, KV-cache "
      f"decode vs forward max |Δ| = {out['cache_max_abs_err']:.1e} ({'ok' if ok else 'FAILED'})")
  return ["The `tiny` preset's matrix catalog, a forward pass on real text, and KV-cache "
          f"decoding checked against the full forward pass (max |Δlogit| = "
          f"{out['cache_max_abs_err']:.2e}, {'within' if ok else 'ABOVE'} 1e-5):", "",
          "```", buf.getvalue().rstrip(), "```"]


def _timed_run(claim, quick: bool, root: str, scale: bool, log) -> tuple[dict, str, float]:
  """`run_claim` as the tour runs it: `(results, run folder, seconds)`. A quick tour runs the
  claims of `findings.REMEASURED` in full, on their registered seeds and size, with no axis."""
  t0 = time.perf_counter()
  if quick and claim.id in findings.REMEASURED:
    res, run_dir = run_claim(claim, quick=False, root=root, log=log,
                             axes={a.name: () for a in claim.axes})
  else:
    res, run_dir = run_claim(claim, quick=quick, root=root, log=log,
                             axes=None if scale else {"scale": (), "budget": ()})
  return res, run_dir, time.perf_counter() - t0


def _worker_init(root: str, quick: bool) -> None:
  """A tour worker's JAX, set before its backend starts.

  Compiled programs are kept in `root/cache/xla`, shared by the workers: a quick claim spends
  most of its time compiling, claims compile many of the same programs (the same model, step
  and evaluation), and the persistent cache lets a worker load what another compiled, and a
  later tour load everything. A quick tour also compiles at XLA's backend optimization level
  0: its programs run a few steps each, so compiling them fast pays more than running them
  fast (measured on `causal-mask --quick`: 47 s → 37 s, compile 34 s → 23 s).
  """
  if quick:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0").strip()
  import jax

  jax.config.update("jax_compilation_cache_dir", os.path.abspath(os.path.join(root, "cache",
                                                                              "xla")))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


# The quick claims measured longest (git 6dcd558, 2 idle cores), started first so that the
# two workers finish together; the others follow in the registry's order.
_LONGEST_FIRST = ("residual-eigenvalues", "causal-mask", "dynamic-sparsity", "sliding-window",
                  "condition-lr")


def _run_in_worker(claim, quick: bool, root: str, scale: bool) -> tuple[dict, str, float]:
  """A worker process's claim (`run_tour(jobs > 1)`), its progress lines flushed as they come."""
  return _timed_run(claim, quick, root, scale, functools.partial(print, flush=True))


def run_tour(*, quick: bool = False, only=None, root: str = "runs", log=print,
             scale: bool = False, jobs: int = 1) -> tuple[dict, str]:
  """Runs the (selected) built claims in order; returns `(tour results, tour folder)`.

  Args:
    quick: small sizes and one seed per claim.
    only: claim ids to run (default all built); the others appear with reason "not run".
    root: the `runs` folder.
    log: where the progress lines go.
    scale: also run each claim's other sizes (`scale_models`) and budgets (`budgets`). Off
      by default: a full tour reads every verdict at its registered size and budget, with
      the context lengths, and the trends with size and budget come from `claim ID` (hours
      per claim on 2 CPU cores).
    jobs: claims run at once, each in its own process (`1`: one after another, in this
      process). A quick claim is mostly compilation on one core, so `2` on 2 cores nearly
      halves a quick tour; a full claim's training already fills the cores. With `jobs > 1`
      each claim runs in a fresh interpreter (so its functions must be importable), their
      progress lines interleave, and the table keeps the registry's order.

  Returns:
    The tour's `results.json` dict and its folder.
  """
  if not isinstance(jobs, int) or jobs < 1:
    raise ValueError(f"--jobs {jobs!r}: give a whole number of processes, at least 1. Fix: "
                     "--jobs 2 on 2 cores, --jobs 1 to run the claims one after another.")
  only = list(only or [])
  unknown = [c for c in only if c not in CLAIMS]
  if unknown:
    raise ValueError(f"--only {unknown}: unknown claim id. Fix: use ids from {list(CLAIMS)}.")
  start = time.perf_counter()
  tour_dir = os.path.join(root, "tour", time.strftime("%Y%m%d-%H%M%S") + ("-quick" if quick
                                                                           else ""))
  os.makedirs(tour_dir, exist_ok=True)
  if quick:
    try:
      for line in findings.committed_lines():
        log(line)
    except ValueError as e:  # a broken committed file must not sink the tour; say so
      log(f"[tour] committed results unreadable: {e}")
  opening = _opening(log)
  claims = list(CLAIMS.values())
  entries: list[dict | None] = [None] * len(claims)
  results_by_id, todo = {}, []

  def head(i):
    return f"[{i + 1:2d}/{len(claims)}] {claims[i].id:<23}"

  for i, claim in enumerate(claims):
    if not claim.built:
      entries[i] = {"claim": claim.id, "verdict": "not built",
                    "reason": "no experiment module yet", "results": None}
      log(f"{head(i)} not built")
    elif only and claim.id not in only:
      entries[i] = {"claim": claim.id, "verdict": "inconclusive",
                    "reason": "not run in this tour (--only)", "results": None}
      log(f"{head(i)} skipped (--only)")
    else:
      todo.append(i)

  kept = {}
  if quick:
    kept = {cid: r for cid in findings.REMEASURED if cid in CLAIMS
            and (r := _or_none(table.replayed, cid, log)) is not None}
    log("[tour] measured again in full, and pipeline checks of the others (quick sizes, one "
        "seed: they check that the code runs and decide nothing):")

  def finished(i, outcome):
    """Records claim `i`'s `(results, run_dir, seconds)`, or the exception its run raised."""
    claim = claims[i]
    if isinstance(outcome, Exception):  # a broken claim is reported, and the tour goes on
      entries[i] = {"claim": claim.id, "verdict": "inconclusive",
                    "reason": f"the run failed: {type(outcome).__name__}: {outcome}",
                    "results": None}
      log(f"{head(i)} FAILED ({type(outcome).__name__}: {outcome})")
      return
    res, run_dir, seconds = outcome
    results_by_id[claim.id] = res
    entries[i] = {"claim": claim.id, "verdict": res["verdict"], "reason": res["reason"],
                  "results": os.path.join(run_dir, "results.json")}
    report_path = os.path.join(run_dir, "report.md")
    if quick and claim.id in findings.REMEASURED:
      log(f"{head(i)} {findings.remeasure_line(claim, res, kept.get(claim.id), seconds)}")
    elif quick:
      log(f"{head(i)} {findings.pipeline_line(res, seconds, report_path)}")
    else:
      log(f"{head(i)} {cells.verdict_label(res, res['verdict']):<36} {seconds:6.1f} s  "
          f"{report_path}")

  def in_process(indices):
    for i in indices:
      try:
        outcome = _timed_run(claims[i], quick, root, scale, log)
      except Exception as e:
        traceback.print_exc()
        outcome = e
      finished(i, outcome)

  # A quick tour's full runs (`findings.REMEASURED`) stay in this process, at XLA's default
  # optimization, so that each is measured as `claim ID` measures it (a quick worker compiles
  # at level 0, which trades the last bits of rounding for compile time).
  here = [i for i in todo if quick and claims[i].id in findings.REMEASURED]
  pooled = [i for i in todo if i not in here]
  if jobs == 1 or len(pooled) < 2:
    in_process(todo)
  else:
    # Fresh interpreters (spawn): forking a process that already runs JAX's threads is unsafe.
    # A claim travels pickled (its functions by reference); each worker prints its own lines.
    with futures.ProcessPoolExecutor(max_workers=min(jobs, len(pooled)),
                                     mp_context=multiprocessing.get_context("spawn"),
                                     initializer=_worker_init, initargs=(root, quick)) as pool:
      first = [i for cid in _LONGEST_FIRST for i in pooled if claims[i].id == cid]
      order = first + [i for i in pooled if i not in first]
      running = {pool.submit(_run_in_worker, claims[i], quick, root, scale): i for i in order}
      in_process(here)
      for done in futures.as_completed(running):
        try:
          outcome = done.result()
        except Exception as e:  # raised in the worker, or the worker died (BrokenProcessPool)
          traceback.print_exception(e)
          outcome = e
        finished(running[done], outcome)
  runtime = time.perf_counter() - start
  tour = {"quick": quick, "runtime_s": runtime, "claims": entries}
  validate_tour(tour, list(CLAIMS))
  jsonio.dump_strict(tour, os.path.join(tour_dir, "results.json"))
  if quick:
    lines = findings.quick_markdown(claims, entries, results_by_id, runtime_s=runtime,
                                    opening=opening, tour_dir=tour_dir)
  else:
    try:
      committed = table.committed_runs()
    except ValueError as e:  # a broken committed file must not sink the tour; say so
      log(f"[tour] committed results unreadable: {e}")
      committed = {}
    lines = report.tour_markdown(claims, entries, results_by_id, quick=quick,
                                 runtime_s=runtime, opening=opening, tour_dir=tour_dir,
                                 committed=committed)
  with open(os.path.join(tour_dir, "report.md"), "w") as f:
    f.write("\n".join(lines))
  log(f"[tour] {runtime:.0f} s; report: {os.path.join(tour_dir, 'report.md')}")
  return tour, tour_dir


def _or_none(fn, cid: str, log):
  """`fn(cid)`, or None (logged) when a committed file is broken: the tour goes on."""
  try:
    return fn(cid)
  except ValueError as e:
    log(f"[tour] committed result of {cid} unreadable: {e}")
    return None


def tour_main(argv=None) -> int:
  """`python -m experiments tour`; exit status 1 if a claim's run failed."""
  p = argparse.ArgumentParser(prog="python -m experiments tour", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true",
                 help="make demo: the committed findings first, the claims that read the "
                      "committed models in seconds measured again in full, the others at small "
                      "sizes on one seed as pipeline checks (no verdict)")
  p.add_argument("--only", nargs="+", metavar="ID", default=None, help="run only these claims")
  p.add_argument("--out", default="runs", help="the runs folder")
  p.add_argument("--scale", action="store_true",
                 help="also run each claim's other sizes and budgets (its scale_models and "
                      "budgets; hours per claim on CPU); by default each verdict is read at its "
                      "registered size and budget only")
  p.add_argument("--jobs", type=int, default=None,
                 help="claims run at once, each in its own process (default: 2 with --quick, "
                      "whose claims are mostly compilation on one core; 1 otherwise)")
  args = p.parse_args(argv)
  jobs = args.jobs if args.jobs is not None else (2 if args.quick else 1)
  try:
    tour, _ = run_tour(quick=args.quick, only=args.only, root=args.out, scale=args.scale,
                       jobs=jobs)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  failed = [c for c in tour["claims"] if c["reason"].startswith("the run failed")]
  return 1 if failed else 0


def _axis_setting(text: str) -> tuple[str, str]:
  """`"budget=4,16"` -> `("budget", "4,16")`; the values are read by the claim's axis."""
  name, eq, values = text.partition("=")
  if not eq or not name.strip():
    raise argparse.ArgumentTypeError(f"{text!r}: give NAME=v1,v2, e.g. budget=4,16 or "
                                     "scale=mini,small (NAME= alone: none of that axis)")
  return name.strip(), values


def _budget_list(text: str) -> tuple[int, ...]:
  """`"1,4"` -> `(4,)`: the multiples beyond the registered 1×; `"1"` -> `()` (none)."""
  try:
    ks = tuple(int(k) for k in text.split(",") if k.strip())
  except ValueError:
    ks = ()
  if not ks or len(set(ks)) != len(ks) or min(ks) < 1:
    raise argparse.ArgumentTypeError(f"{text!r}: give distinct whole multiples of the "
                                     "registered tokens separated by commas, e.g. 4 or 2,4 "
                                     "(1 alone: the registered budget only)")
  return tuple(k for k in ks if k != 1)

def _asked_axes(claim, args) -> dict[str, tuple]:
  """`{axis name: values}` of `--axes` and the older `--sizes`, `--lengths`, `--budgets`."""
  asked = {}
  settings = [*(args.axes or ()), *((n, t) for n, t in (
      ("scale", args.sizes), ("context", args.lengths), ("budget", args.budgets)) if t)]
  for name, text in settings:
    values = claim.axis(name).parse(text)
    asked[name] = _budget_list(text) if name == "budget" and values else values
  return asked


def claim_main(argv=None) -> int:
  """`python -m experiments claim ID`; prints the verdict and the report's path."""
  p = argparse.ArgumentParser(prog="python -m experiments claim",
                              description="Run one claim of the preface and write its verdict.")
  p.add_argument("id", choices=list(CLAIMS), metavar="ID", help=f"one of {list(CLAIMS)}")
  p.add_argument("--quick", action="store_true", help="small sizes, one seed (indicative)")
  p.add_argument("--seeds", type=int, nargs="+", default=None,
                 help="seeds (default: the claim's pre-registered seeds; with --quick the "
                      "first of them). Other seeds make an addendum, never a new headline")
  p.add_argument("--axes", type=_axis_setting, action="append", metavar="NAME=V,V,...",
                 help="measure the primary effect along an axis at these points, e.g. "
                      "scale=mini,small,base, context=256,1024, budget=4,16 (default: the "
                      "claim's declared axes; --quick: none; NAME= alone: none of that axis). "
                      "The verdict is read only at the registered sizes; with --resume of a "
                      "finished run, only these axes run and are added to it")
  p.add_argument("--sizes", metavar="MODEL,MODEL,...", default=None,
                 help="the older spelling of --axes scale=MODEL,MODEL,...")
  p.add_argument("--lengths", metavar="T,T,...", default=None,
                 help="the older spelling of --axes context=T,T,...")
  p.add_argument("--budgets", metavar="K,K,...", default=None,
                 help="the older spelling of --axes budget=K,K,... (1: the registered budget "
                      "alone)")
  p.add_argument("--resume", metavar="RUN_DIR", default=None,
                 help="finish, or add axes to, an earlier run folder of this claim (its quick "
                      "flag and seeds): points saved there are reused and a finished verdict "
                      "is not run again. A kept result (results/ID) is copied into a new run "
                      "folder, never written to")
  p.add_argument("--onto", metavar="RUN_DIR", default=None,
                 help="deprecated: --resume RUN_DIR --axes budget=K (the claim's budgets, or "
                      "--budgets)")
  p.add_argument("--out", default="runs", help="the runs folder")
  p.add_argument("--keep", action="store_true",
                 help="copy the finished full run (pre-registered seeds) to results/ID/, the "
                      "committed result the README's table is made from")
  args = p.parse_args(argv)
  claim = CLAIMS[args.id]
  if args.keep and (args.quick or (args.seeds and list(args.seeds) != list(claim.seeds))):
    print(f"error: --keep keeps only a full run on the pre-registered seeds "
          f"{list(claim.seeds)}. Fix: drop --quick and --seeds.", file=sys.stderr)
    return 2
  if not claim.built:
    print(f"claim {args.id!r} is not built yet (verdict: not built).", file=sys.stderr)
    return 2
  if args.onto:
    clash = [flag for flag, v in (("--quick", args.quick), ("--seeds", args.seeds),
                                   ("--sizes", args.sizes), ("--lengths", args.lengths),
                                   ("--resume", args.resume)) if v is not None and v is not False]
    if clash:
      print(f"error: --onto adds budgets to a finished run with its own settings; {clash} would "
            "change them. Fix: drop " + ", ".join(clash) + ".", file=sys.stderr)
      return 2
    args.resume = args.onto
    args.budgets = args.budgets or ",".join(map(str, claim.axis("budget").values)) or "1"
  try:
    asked = _asked_axes(claim, args)
    if args.onto and not asked.get("budget"):
      why = ("--budgets asks for none" if claim.axis("budget").values
             else f"{claim.id!r} declares no budgets")
      raise ValueError(f"--onto adds the budget axis, but {why}. Fix: pass --budgets 4 (a "
                       "multiple of the registered tokens above 1).")
    quick, seeds = args.quick, args.seeds
    frozen = os.path.join(args.resume or "", "claim.json")
    if args.resume and not quick and seeds is None and os.path.exists(frozen):
      ran = jsonio.load_strict(frozen)  # a resumed run keeps its own quick flag and seeds
      quick, seeds = bool(ran.get("quick")), ran.get("seeds")
    res, run_dir = run_claim(claim, quick=quick, seeds=seeds, root=args.out,
                             resume=args.resume, axes=asked, keep=args.keep)
  except (ValueError, argparse.ArgumentTypeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"{claim.id}: {cells.verdict_label(res, res['verdict'])} ({res['runtime_s']:.1f} s)\n"
        f"  {res['reason']}\n  report: {os.path.join(run_dir, 'report.md')}")
  for name, block in res["axes"].items():
    print(f"  {claim.axis_of(name).sentence(block)}")
  if args.keep:
    print(f"  kept: {table.keep(run_dir)} (regenerate the README table: "
          "python -m experiments.commands.table)")
  return 0
