"""The verdict machinery every claim shares: declarations, statistics, the rule, the runner.

The claims themselves live in `experiments.claims` (one module each, and the registry); the
commands that run them (`tour`, `claim`, `table`, `validate`, `refit`) in
`experiments.commands`. Each module here is one concern, and none imports a claim:

| module | concern |
| --- | --- |
| `thresholds` | `Threshold`, `Extension`, `Anchor`: what a verdict is computed from |
| `sizes` | `Sizes`, `TrainedSizes`, `more_steps`, `Spec`: what a claim runs at |
| `axis` | `Axis`: one axis of any kind (its points, rows, fit, texts); `axis_fit`, `size_test` |
| `claim` | `Claim`: the frozen declaration, its axes checked |
| `revision` | `Revision`: why a version was registered (a defect and its test, or a protocol) |
| `stats` | t-quantiles, 95% intervals, paired effects, slopes, trend fits, number formatting |
| `rule` | the verdict rule (`decide`), the headline, the extensions, an axis point's reading |
| `schema` | `results.json` (schema 2: every axis under `axes`): validators, `upgrade` from 1 |
| `axes` | the shared axes' factories (`scale`, `context`, `budget`), `KINDS`; the context axis |
| `axis_scale`, `axis_budget` | the scale axis (base models' cards, regime) and the budget axis |
| `results` | the `results.json` of a run: verdicts, effects, budget, regime |
| `folders` | run folders, machine and commit, saved findings, `--resume`, `results/` |
| `runner` | `run_claim`: the registered run, then one loop over the axes; `--resume` |
| `history` | every kept version's seeds (`results/history.json`); new versions on fresh seeds |
| `cells` | one-line texts: table cells, labels, the markdown table |
| `axis_report` | the section of a report for any axis, and an axis's table cell |
| `report` | a claim's `report.md` (made from `results.json` alone) and the tour's |
| `figures` | the figure of any axis (`scale.png`, `context.png`, `budget.png`, ...) |
| `refit` | a kept result's trends refitted and its report made again |

The declarations a claim module needs are importable from the package itself.

Example:
  >>> from experiments.verdict import Threshold
  >>> Threshold.beyond("gain", "a", "m", margin=0.1).supports
  '> 0.1'
"""

from experiments.verdict.axis import Axis
from experiments.verdict.claim import Claim
from experiments.verdict.revision import Revision
from experiments.verdict.sizes import Sizes, Spec, TrainedSizes, more_steps
from experiments.verdict.thresholds import Anchor, Extension, Threshold

__all__ = ["Anchor", "Axis", "Claim", "Extension", "Revision", "Sizes", "Spec", "Threshold",
           "TrainedSizes", "more_steps"]
