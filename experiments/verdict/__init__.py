"""The verdict machinery every claim shares, in four rooms, each above the one it imports.

The claims themselves live in `experiments.claims` (one module each, and the registry); the
commands that run them (`tour`, `claim`, `table`, `validate`, `refit`) in
`experiments.commands`. Nothing here imports a claim, and no room imports one above it:
`running` imports `declare`, `render` and `arithmetic`; `declare` imports `render` (an axis
writes its texts with its cells) and `arithmetic`; `render` imports `arithmetic`, and reads a
claim and its axes by what they hold, not by importing them.

| module | job |
| --- | --- |
| `arithmetic.conditions` | a condition (`">= 0.9"`) read as an operator and a number |
| `arithmetic.distributions` | tail probabilities in float64 (t, beta, binomial, Clopper–Pearson) |
| `arithmetic.censoring` | censored seeds: a run that never reached its target has only a bound |
| `arithmetic.stats` | t-quantiles, 95% intervals, paired effects, slopes, trend fits, `fmt` |
| `arithmetic.rule` | the verdict rule (`decide`), headline, extensions, a point's reading |
| `render.cells` | one-line texts: table cells, labels, the markdown table |
| `render.section` | the section of a report for any axis, and an axis's table cell |
| `render.report` | a claim's `report.md` (made from `results.json` alone) and the tour's |
| `render.figures` | any axis's figure (`scale.png`, ...); a figure declared as data (`draw`) |
| `render.tuning` | a tuning record (old keyed dicts too): tuned-rate note, grid panel, edges |
| `render.findings` | a run's declared notes and figures rendered: markdown lines, files |
| `declare.thresholds` | `Threshold`, `Extension`, `Anchor`: what a verdict reads |
| `declare.sizes` | `Sizes`, `TrainedSizes`, `more_steps`, `Spec`: what a claim runs at |
| `declare.revision` | `Revision`: why a version was registered (a defect, or a protocol) |
| `declare.axis` | `Axis`: one axis of any kind (its points, rows, fit, texts); `axis_fit` |
| `declare.scale`, `.budget` | the scale axis (base models' cards, regime), the budget axis |
| `declare.axes` | the shared axes' factories (`scale`, `context`, `budget`), `KINDS` |
| `declare.claim` | `Claim`: the frozen declaration, its axes checked |
| `running.schema` | `results.json` (schema 2): validators, `upgrade` from schema 1 |
| `running.folders` | run folders, machine and commit, saved findings, `--resume`, `results/` |
| `running.history` | every kept version's seeds (`results/history.json`) |
| `running.results` | the `results.json` of a run: verdicts, effects, budget, regime |
| `running.multiplicity` | each kept primary threshold's p-value, Holm across them |
| `running.runner` | `run_claim`: the registered run, then one loop over the axes; `--resume` |
| `running.refit` | a kept result's trends refitted and its report made again |

The declarations a claim module needs are importable from the package itself.

Example:
  >>> from experiments.verdict import Threshold
  >>> Threshold.beyond("gain", "a", "m", margin=0.1).supports
  '> 0.1'
"""

from experiments.verdict.declare import axes
from experiments.verdict.declare.axis import Axis
from experiments.verdict.declare.claim import Claim
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision
from experiments.verdict.declare.sizes import Sizes, Spec, TrainedSizes, more_steps
from experiments.verdict.declare.thresholds import Anchor, Extension, Threshold

__all__ = ["Anchor", "Axis", "Claim", "Clause", "Extension", "Revision", "Sizes", "Spec",
           "Threshold", "TrainedSizes", "axes", "more_steps"]
