"""The verdict machinery every claim shares: declarations, statistics, the rule, the runner.

The claims themselves live in `experiments.claims` (one module each, and the registry); the
commands that run them (`tour`, `claim`, `table`, `validate`, `refit`) in
`experiments.commands`. Each module here is one concern, and none imports a claim:

| module | concern |
| --- | --- |
| `thresholds` | `Threshold`, `Extension`, `Anchor`: what a verdict is computed from |
| `sizes` | `Sizes`, `TrainedSizes`, `more_steps`, `Spec`: what a claim runs at |
| `claim` | `Claim`: the frozen declaration, its axes checked |
| `stats` | t-quantiles, 95% intervals, paired effects, slopes, trend fits, number formatting |
| `rule` | the verdict rule (`decide`), the headline, the extensions, an axis point's reading |
| `schema` | the validators of `results.json` (a claim's and the tour's) |
| `axes` | the scale, context and budget axes: planning, blocks, `axis_fit` |
| `results` | the `results.json` of a run: verdicts, effects, budget, regime |
| `folders` | run folders, machine and commit, saved findings, `--resume`, `results/` |
| `runner` | `run_claim` and `add_budgets` |
| `cells` | one-line texts: table cells, labels, the markdown table |
| `axis_report` | the axis sections of a report and their trend sentences |
| `report` | a claim's `report.md` and the tour's |
| `figures` | `scale.png`, `context.png`, `budget.png` |
| `refit` | a kept result's trends refitted and its report re-rendered |

The declarations a claim module needs are importable from the package itself.

Example:
  >>> from experiments.verdict import Threshold
  >>> Threshold.beyond("gain", "a", "m", margin=0.1).supports
  '> 0.1'
"""

from experiments.verdict.claim import Claim
from experiments.verdict.sizes import Sizes, Spec, TrainedSizes, more_steps
from experiments.verdict.thresholds import Anchor, Extension, Threshold

__all__ = ["Anchor", "Claim", "Extension", "Sizes", "Spec", "Threshold", "TrainedSizes",
           "more_steps"]
