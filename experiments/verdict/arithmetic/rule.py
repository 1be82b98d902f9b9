"""The verdict rule, written once: a group of thresholds (the primary question, or one
extension) is decided from the runs by `decide`.

Each threshold's interval is the 95% t-interval of the mean over seeds (`stat="ci"`) or the
range over seeds (`stat="range"`, for properties that must hold in every run), and a condition
such as `">= 0.9"` holds only when the whole interval satisfies it (`stats.evaluate`). Then:

* a **control** threshold whose `supports` condition fails blocks every threshold that `needs`
  it (the instrument is broken, so those cannot be read);
* any unblocked threshold whose `refutes` condition holds makes the group `refuted`;
* when every non-control threshold is unblocked and its `supports` holds, `supported`;
* otherwise `inconclusive` (saying so when censored seeds leave a `stat="median"` threshold's
  deciding bound undetermined: `censoring.censoring_reason`).

`verdict` applies it to the primary thresholds (the headline), `extension_verdicts` to each
extension (beneath it, never changing it), `reading` to one axis point's runs. A claim that
splits its sentence into clauses (`Claim.clauses`) is decided clause by clause
(`clause_verdicts`, each on its own thresholds and the controls they need), and its headline is
their conjunction (`conjunction`). With one seed
the interval is the single value, and the verdict is labelled "indicative (quick)".
"""

from __future__ import annotations

from collections.abc import Sequence

from experiments.verdict.arithmetic.censoring import censoring_reason
from experiments.verdict.arithmetic.stats import evaluate, fmt, holds, interval_text, open_interval

VERDICTS = ("supported", "refuted", "inconclusive", "not built")
INDICATIVE = "indicative (quick)"


def conjunction(verdicts: Sequence[str]) -> str:
  """The headline of a sentence from its clauses' verdicts: refuted if any clause is refuted,
  supported if every clause is, else inconclusive.

  Example:
    >>> conjunction(["supported", "inconclusive"]), conjunction(["supported", "refuted"])
    ('inconclusive', 'refuted')
  """
  if any(v == "refuted" for v in verdicts):
    return "refuted"
  if verdicts and all(v == "supported" for v in verdicts):
    return "supported"
  return "inconclusive"


def settled_label(verdict: str, proof: bool) -> str:
  """A clause's verdict as the tables print it: a proof's reads "(proof, verified exactly)"
  when supported and "(proof)" when refuted.

  Example:
    >>> settled_label("supported", True), settled_label("refuted", False)
    ('supported (proof, verified exactly)', 'refuted')
  """
  if not proof:
    return verdict
  return {"supported": "supported (proof, verified exactly)",
          "refuted": "refuted (proof)"}.get(verdict, verdict)


def describe(th, ev: dict) -> str:
  """`name = mean [lo, hi] (supports '>= 0.9': yes)`, one line per threshold."""
  lo, hi = ev["interval"]
  parts = []
  for label, cond, met in (("supports", th.supports, ev["supports"]),
                           ("refutes", th.refutes, ev["refutes"])):
    if cond is not None:
      parts.append(f"{label} {cond}: {'yes' if met else 'no'}")
  what = ev["what"]
  role = "control " if th.control else ""
  return (f"{role}{th.name} = {fmt(ev['mean'])} ({what} [{fmt(lo)}, {fmt(hi)}]; "
          + "; ".join(parts) + ")")


def decide(thresholds, runs: dict, seeds) -> tuple[str, str, list[dict]]:
  """The verdict of one group of thresholds (the primary question, or one extension).

  The rule, written once: a control whose `supports` fails blocks every threshold that
  `needs` it (default: every threshold of the group), and a blocked threshold decides
  nothing; then any unblocked threshold whose `refutes` holds refutes the group; it is
  supported when every non-control threshold is unblocked and its `supports` holds;
  otherwise inconclusive.

  Returns:
    `(verdict, why, evaluations)`, one evaluation per threshold, with `blocked` added.
  """
  evals = [evaluate(th, runs, seeds) for th in thresholds]
  failed = {th.name for th, ev in zip(thresholds, evals, strict=True)
            if th.control and not ev["supports"]}
  for th, ev in zip(thresholds, evals, strict=True):
    needs = set(th.needs) if th.needs is not None else {t.name for t in thresholds if t.control}
    ev["blocked"] = (not th.control) and bool(needs & failed)
  refuting = [th.name for th, ev in zip(thresholds, evals, strict=True)
              if not th.control and ev["refutes"] and not ev["blocked"]]
  needed = [ev for th, ev in zip(thresholds, evals, strict=True) if not th.control]
  blocked = [th.name for th, ev in zip(thresholds, evals, strict=True) if ev["blocked"]]
  if refuting:
    v, why = "refuted", "refuted by: " + ", ".join(refuting)
  elif needed and all(ev["supports"] and not ev["blocked"] for ev in needed):
    v, why = "supported", "every support condition holds"
  elif blocked:
    v, why = "inconclusive", ("a control failed (" + ", ".join(sorted(failed)) + "), so these "
                              "cannot be read: " + ", ".join(blocked))
  elif reason := censoring_reason(thresholds, evals):
    v, why = "inconclusive", reason
  else:
    v, why = "inconclusive", "not every support condition holds, and no refutation does"
  if failed and not blocked:
    why += "; failed controls block nothing here: " + ", ".join(sorted(failed))
  lines = "; ".join(describe(th, ev) for th, ev in zip(thresholds, evals, strict=True))
  return v, f"{why}. {lines}", evals


def verdict(claim, runs: dict, seeds, *, indicative: bool) -> tuple[str, str, list]:
  """The primary verdict (the headline) from the frozen thresholds: `(verdict, reason, evals)`.

  With clauses, the headline is their conjunction and the reason gives each clause's verdict
  and why; `evals` are every primary threshold's, as without."""
  v, why, evals = decide(claim.thresholds, runs, seeds)
  prefix = f"{INDICATIVE}: " if indicative else ""
  if claim.clauses:
    parts = clause_verdicts(claim, runs, seeds, indicative=False)
    v = conjunction([c["verdict"] for c in parts])
    why = "the conjunction of its clauses: " + " | ".join(
        f"clause {i} ({c['text']}): {settled_label(c['verdict'], c['proof'])}: {c['reason']}"
        for i, c in enumerate(parts, 1))
  return v, prefix + why, evals


def clause_group(claim, clause) -> tuple:
  """The thresholds that decide `clause`: the primaries it names and the controls they need."""
  named = [th for th in claim.thresholds if th.name in clause.thresholds]
  controls = {t.name for t in claim.thresholds if t.control}
  needed = set().union(*(set(th.needs) if th.needs is not None else controls for th in named))
  return tuple(th for th in claim.thresholds if th in named or (th.control and th.name in needed))


def clause_verdicts(claim, runs: dict, seeds, *, indicative: bool) -> list[dict]:
  """Each clause's `{"text", "thresholds", "proof", "verdict", "reason"}` by `decide`; `proof`
  is whether mathematics settles it (its thresholds verify the argument exactly). Empty for a
  claim that declares no clauses."""
  prefix = f"{INDICATIVE}: " if indicative else ""
  out = []
  for clause in claim.clauses:
    v, why, _ = decide(clause_group(claim, clause), runs, seeds)
    out.append({"text": clause.text, "thresholds": list(clause.thresholds),
                "proof": clause.proof is not None, "verdict": v, "reason": prefix + why})
  return out


def extension_verdicts(claim, runs: dict, seeds, *, indicative: bool) -> list[dict]:
  """Each extension's `{"name", "verdict", "reason", "thresholds"}`, by the same rule."""
  out = []
  prefix = f"{INDICATIVE}: " if indicative else ""
  for ext in claim.extensions:
    v, why, _ = decide(ext.thresholds, runs, seeds)
    out.append({"name": ext.name, "verdict": v, "reason": prefix + why,
                "thresholds": [th.to_dict() for th in ext.thresholds]})
  return out


def reading(claim, runs: dict, seeds) -> dict:
  """`{"verdict", "failed_controls"}`: the registered rule (`decide`) applied to one size's or
  length's runs, every threshold and control included; it never replaces the verdict."""
  v, _, evals = decide(claim.thresholds, runs, seeds)
  return {"verdict": v, "failed_controls": [th.name for th, ev in
                                            zip(claim.thresholds, evals, strict=True)
                                            if th.control and not ev["supports"]]}


def size_test(th, row: dict) -> tuple[str, str]:
  """The primary threshold's test applied to one size's interval: `(outcome, why)`.

  `outcome` is what the threshold alone would say at that size: `supported` (its `supports`
  condition holds over the whole interval), `refuted`, `inconclusive`, or `n/a` (no finite
  effect). The interval is the size's 95% CI, or its single value with one seed.

  Example:
    >>> from experiments.verdict.declare.thresholds import Threshold
    >>> from experiments.verdict.arithmetic.rule import size_test
    >>> th = Threshold.beyond("gain", "a", "m", margin=0.1)
    >>> size_test(th, {"effect": 0.3, "ci": [0.2, 0.4]})[0]
    'supported'
  """
  if row["effect"] is None:
    return "n/a", "no finite effect at this size"
  ci = open_interval(row["ci"])  # a null end is open: a censored median's infinite bound
  lo, hi = ci if ci is not None else (row["effect"], row["effect"])
  sup = th.supports is not None and holds(th.supports, (lo, hi))
  ref = th.refutes is not None and holds(th.refutes, (lo, hi))
  outcome = "refuted" if ref else "supported" if sup else "inconclusive"
  met = [f"{label} `{c}`" for label, c, ok in (("supports", th.supports, sup),
                                                ("refutes", th.refutes, ref)) if c and ok]
  unmet = [f"{label} `{c}`" for label, c, ok in (("supports", th.supports, sup),
                                                  ("refutes", th.refutes, ref)) if c and not ok]
  what = (f"95% interval {interval_text(lo, hi)}" if ci is not None
          else f"single value (one seed) [{fmt(lo)}, {fmt(hi)}]")
  why = (f"its {what} meets " + " and ".join(met) if met
         else f"its {what} meets neither " + " nor ".join(unmet))
  return outcome, why
