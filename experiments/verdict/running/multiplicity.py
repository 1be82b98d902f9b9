"""Many verdicts at once: each primary threshold's p-value, and Holm's correction across claims.

Each claim's verdict holds its own 5% error rate; read together, the 14 claims' primary
thresholds are many tests, and some would pass by chance alone. Here each primary threshold
gets the p-value its registered rule implies (`threshold_p`), and Holm's step-down procedure
(`holm`) says which survive at a family-wise error rate of 5% across all of them
(`holm_family`): a supported verdict survives when every one of its primary thresholds does,
a refuted one when a threshold that refutes it does; an inconclusive verdict claims nothing
to correct.

What the p-value tests, per the threshold's registered `stat`:

* `"ci"` (the 95% t-interval of the mean over `n` seeds): the one-sample t-test of the
  (paired) mean against the edge `e` of the condition it is read for (`> e`, `>= e`: the mean
  is above `e`; `<`, `<=`: below), `t = (x̄ − e) / (s/√n)`, `n − 1` degrees of freedom,
  `p = 2·P(T > t)` for `>` (`2·P(T < t)` for `<`), capped at 1. The doubling is the rule's
  own: a threshold has two one-sided conditions and the 95% interval gives each 2.5%, so the
  condition holds exactly when `p < 0.05` (scipy: `ttest_1samp(x, e, alternative=...)`'s
  p-value times 2).
* `"range"` (every seed must meet the condition): the exact sign test, `k` of `n` seeds
  meeting it, `p = 2·P(B ≥ k)` for `B ~ Binomial(n, 1/2)`, capped at 1. A range that holds
  has `k = n`: `p = 2/2ⁿ`, 0.0625 with five seeds, so a five-seed range verdict cannot survive
  at 5% even alone: its evidence is that every seed agrees, not a population statement.
* `"median"` (a censoring-aware median, `verdict.arithmetic.censoring`): the exact sign test
  of the condition on the median, `k` of `n` seeds whose whole known range meets it (a
  censored seed is known only to lie beyond its cap; one whose range straddles the edge counts
  as not meeting it), `p = 2·P(B ≥ k)`, capped at 1: six seeds all meeting it give 0.03125.

The condition tested is the one that held (`supports` or `refutes`); when neither did, the
one with the smaller p. A threshold with a censored seed (a sentinel, `Threshold.censored`)
has no test (`p = 1`): a sentinel is not a value. Controls are instrument checks, not
findings, and are left out of the family, as are the thresholds of a clause settled by proof
(they verify a theorem exactly, they test no hypothesis: a headline that rests on proofs alone
reads "settled by proof (no test)", and a clause refuted by proof keeps its headline refuted);
every other primary threshold counts in it, blocked or not. A split sentence's verdict is the
conjunction of its clauses (`rule.verdict`).
"""

from __future__ import annotations

import math
import os

import numpy as np

from experiments import jsonio
from experiments.verdict.arithmetic.censoring import threshold_bounds
from experiments.verdict.arithmetic.conditions import parse_condition
from experiments.verdict.arithmetic.distributions import binom_sf, t_sf
from experiments.verdict.arithmetic.rule import clause_verdicts, decide, verdict
from experiments.verdict.arithmetic.stats import fmt, holds, paired_values
from experiments.verdict.declare.claim import Claim
from experiments.verdict.declare.thresholds import Threshold
from experiments.verdict.running.folders import RESULTS_DIR
from experiments.verdict.running.schema import load_results

ALPHA = 0.05


def condition_p(stat: str, condition: str, x) -> dict:
  """The p-value that `x` (per-seed values) meets `condition` under `stat` ("ci" or "range").

  Returns:
    `{"p", "test", "statistic", "n"}`: `test` `"t"` (statistic the t value, `n − 1` dof) or
    `"sign"` (statistic the seeds meeting the condition); `"none"` with `p = 1` when nothing
    can be tested (a NaN seed, as a censored one is marked; one seed; an `==` condition under
    a t-test).

  Example:
    >>> from experiments.verdict.running.multiplicity import condition_p
    >>> r = condition_p("ci", "> 0", [0.1, 0.3, 0.2, 0.25, 0.15])
    >>> r["test"], round(r["statistic"], 4), round(r["p"], 6)
    ('t', 5.6569, 0.004813)
    >>> condition_p("range", "< 0.5", [0.1, 0.2, 0.3, 0.2, 0.1])["p"]
    0.0625
  """
  x = np.asarray(x, np.float64)
  op, edge = parse_condition(condition)
  n = int(x.size)
  none = {"p": 1.0, "test": "none", "statistic": None, "n": n}
  if n == 0 or np.isnan(x).any():
    return none
  if stat == "range":
    k = sum(holds(condition, (float(v), float(v))) for v in x)
    return {"p": min(1.0, 2.0 * binom_sf(k, n, 0.5)), "test": "sign", "statistic": k, "n": n}
  if stat != "ci":
    raise ValueError(f"condition_p: stat={stat!r} has no p-value here. Fix: 'ci' or 'range'.")
  if n < 2 or op == "==":
    return none
  m, s = float(x.mean()), float(x.std(ddof=1))
  if s == 0.0:  # every seed equal: the interval is that point, the condition holds or not
    p = 0.0 if holds(condition, (m, m)) else 1.0
    return {"p": p, "test": "t", "statistic": math.copysign(math.inf, m - edge), "n": n}
  t = (m - edge) / (s / math.sqrt(n))
  one = t_sf(t, n - 1) if op in (">", ">=") else t_sf(-t, n - 1)
  return {"p": min(1.0, 2.0 * one), "test": "t", "statistic": t, "n": n}


def median_sign_p(th: Threshold, runs: dict, seeds, condition: str) -> dict:
  """The exact sign test that the median of a `stat="median"` threshold's (paired, censored)
  values meets `condition`: `k` of `n` seeds known to meet it, `p = 2·P(B ≥ k)`.

  Example:
    >>> th = Threshold("steps", "a", "r", stat="median", supports="< 0.9", censored=">= 2.5",
    ...                cap=2.0)
    >>> runs = {"a": {s: {"r": v} for s, v in enumerate([0.5, 0.6, 0.7, 0.8, 0.85, 2.5])}}
    >>> r = median_sign_p(th, runs, range(6), "< 0.9")
    >>> r["statistic"], r["n"], r["p"]
    (5, 6, 0.21875)
  """
  arm = paired_values(runs, th.arm, th.metric, None, seeds)
  base = paired_values(runs, th.baseline, th.metric, None, seeds) if th.baseline else None
  lo, up, _ = threshold_bounds(th, arm, base)
  n = int(lo.size)
  k = sum(bool(holds(condition, (float(a), float(a))) and holds(condition, (float(b), float(b))))
          for a, b in zip(lo, up, strict=True))
  return {"p": min(1.0, 2.0 * binom_sf(k, n, 0.5)), "test": "sign", "statistic": k, "n": n}


def threshold_p(th: Threshold, runs: dict, seeds, ev: dict) -> dict:
  """The p-value of the condition a threshold was decided on (`condition_p`).

  `ev` is the threshold's evaluation (`stats.evaluate`, or `rule.decide`'s with `blocked`):
  the condition that held is tested (`supports` or `refutes`); when neither held, the one
  with the smaller p-value. Adds `condition` (`"supports"`/`"refutes"`) and `held`.
  """
  if th.stat == "median":
    tested = {label: median_sign_p(th, runs, seeds, cond) for label, cond in
              (("supports", th.supports), ("refutes", th.refutes)) if cond is not None}
    held = [label for label in tested if ev[label]]
    label = held[0] if held else min(tested, key=lambda k: tested[k]["p"])
    return {**tested[label], "condition": label, "held": bool(held)}
  x = paired_values(runs, th.arm, th.metric, th.baseline, seeds)
  if th.censored is not None:  # a sentinel is not a value: its seed cannot enter a test
    raw = [paired_values(runs, arm, th.metric, None, seeds) for arm in (th.arm, th.baseline)
           if arm is not None]
    if any(holds(th.censored, (float(v), float(v))) for r in raw for v in r):
      x = np.full(x.shape, np.nan)
  tested = {label: condition_p(th.stat, cond, x) for label, cond in
            (("supports", th.supports), ("refutes", th.refutes)) if cond is not None}
  held = [label for label in tested if ev[label]]
  label = held[0] if held else min(tested, key=lambda k: tested[k]["p"])
  return {**tested[label], "condition": label, "held": bool(held)}


def holm(p, alpha: float = ALPHA) -> tuple[list[float], list[bool]]:
  """Holm's step-down procedure: adjusted p-values, and which hypotheses are rejected.

  .. math:: \\tilde p_{(i)} = \\max_{j \\le i} \\min\\big(1, (m - j + 1)\\, p_{(j)}\\big)

  for the p-values sorted ascending `p_(1) ≤ … ≤ p_(m)`; `H_(i)` is rejected when
  `p̃_(i) ≤ α`, i.e. when `p_(j) ≤ α / (m − j + 1)` for every `j ≤ i`. The family-wise
  error rate stays at most `α` whatever the dependence between the tests.

  Args:
    p: the m p-values, in any order.
    alpha: the family-wise error rate.

  Returns:
    `(adjusted, rejected)`, in the order of `p`.

  Example:
    >>> from experiments.verdict.running.multiplicity import holm
    >>> adjusted, rejected = holm([0.01, 0.04, 0.03, 0.005])
    >>> [round(a, 3) for a in adjusted], rejected
    ([0.03, 0.06, 0.06, 0.02], [True, False, False, True])

  References:
    Holm, "A simple sequentially rejective multiple test procedure" (1979).
  """
  p = [float(v) for v in p]
  if any(math.isnan(v) or not 0.0 <= v <= 1.0 for v in p):
    raise ValueError(f"holm: every p-value must lie in [0, 1]; got {p}.")
  m = len(p)
  adjusted = [0.0] * m
  running = 0.0
  for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
    running = max(running, min(1.0, (m - rank) * p[i]))
    adjusted[i] = running
  return adjusted, [a <= alpha for a in adjusted]


def holm_family(entries: dict, alpha: float = ALPHA) -> dict[str, dict]:
  """Holm's correction across every primary threshold of the given claims' kept results.

  Args:
    entries: `{claim id: (claim, results)}`, the claim as its `claim.json` froze it
      (`refit.frozen_claim`) and its `results.json` dict.
    alpha: the family-wise error rate.

  Returns:
    `{claim id: {"verdict", "survives", "p_holm", "tests"}}`: `survives` is True or False for
    a supported or refuted verdict and None otherwise; `p_holm` the adjusted p-value that
    decides it (for supported, the largest of its thresholds'; for refuted, the smallest of
    its refuting thresholds'); `tests` one dict per primary non-control threshold
    (`threshold`, `condition`, `held`, `blocked`, `test`, `statistic`, `n`, `p`, `p_holm`,
    `survives`).
  """
  rows, verdicts, by_proof = [], {}, {}
  for cid, (claim, res) in entries.items():
    runs = {arm: body["runs"] for arm, body in res["arms"].items()}
    seeds = [str(s) for s in res["seeds"]]
    _, _, evals = decide(claim.thresholds, runs, seeds)
    verdicts[cid] = verdict(claim, runs, seeds, indicative=False)[0]
    proved = {n for c in claim.clauses if c.proof is not None for n in c.thresholds}
    by_proof[cid] = {c["verdict"] for c in clause_verdicts(claim, runs, seeds, indicative=False)
                     if c["proof"]}
    for th, ev in zip(claim.thresholds, evals, strict=True):
      if not th.control and th.name not in proved:  # a proof's check is no statistical test
        rows.append((cid, {"threshold": th.name, "blocked": ev["blocked"],
                           **threshold_p(th, runs, seeds, ev)}))
  adjusted, rejected = holm([r["p"] for _, r in rows], alpha)
  out = {cid: {"verdict": v, "survives": None, "p_holm": None, "tests": []}
         for cid, v in verdicts.items()}
  for (cid, r), a, ok in zip(rows, adjusted, rejected, strict=True):
    out[cid]["tests"].append({**r, "p_holm": a, "survives": ok})
  for cid, entry in out.items():
    tests, v = entry["tests"], entry["verdict"]
    if v == "supported":
      deciding = [t for t in tests if t["condition"] == "supports"]
      entry["p_holm"] = max((t["p_holm"] for t in deciding), default=None)
      entry["survives"] = all(t["survives"] for t in deciding)
    elif v == "refuted" and "refuted" in by_proof[cid]:
      entry["survives"] = True  # a clause refuted by proof: no test can undo it
    elif v == "refuted":
      deciding = [t for t in tests if t["condition"] == "refutes" and t["held"]
                  and not t["blocked"]]
      entry["p_holm"] = min(t["p_holm"] for t in deciding)
      entry["survives"] = any(t["survives"] for t in deciding)
  return out


def kept_family(root: str = RESULTS_DIR, order=None, alpha: float = ALPHA,
                claims=None) -> dict[str, dict]:
  """`holm_family` of every kept result under `root`, each read with the thresholds its
  `claim.json` froze (with `claims`, a mapping id -> `Claim`, the registered claim where a
  folder keeps none); `order` (e.g. `list(CLAIMS)`) fixes the order, default the folders'.

  `holm_lines` prints it::

    python -c "from experiments.verdict.running.multiplicity import holm_lines, kept_family
    print(*holm_lines(kept_family()), sep='\\n')"
  """
  ids = order if order is not None else sorted(os.listdir(root))
  entries = {}
  for cid in ids:
    folder = os.path.join(root, cid)
    if os.path.exists(os.path.join(folder, "results.json")):
      frozen = os.path.join(folder, "claim.json")
      claim = (claims[cid] if claims is not None and not os.path.exists(frozen)
               else Claim.from_dict(jsonio.load_strict(frozen)))
      entries[cid] = (claim, load_results(folder))
  return holm_family(entries, alpha)


def holm_lines(family: dict[str, dict]) -> list[str]:
  """`holm_family`'s answer in plain lines: per claim its verdict and survival, then each
  primary threshold's condition, test, p-value and Holm-adjusted p-value."""
  m = sum(len(e["tests"]) for e in family.values())
  lines = [f"Holm at family-wise {ALPHA} over {m} primary thresholds of {len(family)} claims"]
  for cid, e in family.items():
    lines.append(f"{cid}: {e['verdict']}, {holm_text(e)}")
    for t in e["tests"]:
      stat = (f"t = {fmt(t['statistic'])}, {t['n'] - 1} dof" if t["test"] == "t" else
              f"{t['statistic']} of {t['n']} seeds" if t["test"] == "sign" else "no test")
      lines.append(f"  {t['threshold']}: {t['condition']}{'' if t['held'] else ' (not held)'}"
                   f"{' (blocked)' if t['blocked'] else ''}; {t['test']} ({stat}): "
                   f"p = {fmt(t['p'])}, Holm p = {fmt(t['p_holm'])}")
  return lines


def holm_text(entry: dict) -> str:
  """The cell beside a primary verdict: whether it survives Holm across every claim's primary
  thresholds, with the adjusted p-value that decides it; `—` for a verdict that claims nothing.

  Example:
    >>> from experiments.verdict.running.multiplicity import holm_text
    >>> holm_text({"verdict": "refuted", "survives": True, "p_holm": 0.0039})
    'survives Holm (p = 0.0039)'
    >>> holm_text({"verdict": "refuted", "survives": False, "p_holm": 0.875})
    'does not survive Holm (p = 0.875)'
    >>> holm_text({"verdict": "inconclusive", "survives": None, "p_holm": None})
    '—'
  """
  if entry["survives"] is None:
    return "—"
  if entry["p_holm"] is None:
    return "settled by proof (no test)"
  word = "survives" if entry["survives"] else "does not survive"
  return f"{word} Holm (p = {fmt(entry['p_holm'])})"
