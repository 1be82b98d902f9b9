"""The commands of `python -m experiments NAME` other than training and the claims.

| module | command |
| --- | --- |
| `demo` | `demo` (catalog, forward pass, cached generation); `catalog` of a preset or HF |
| `atlas` | `atlas`: spectra, Jacobians and the seven properties of a model, as a report |
| `eval` | `eval`: loss, bits per byte and perplexity of a run or HF model on any text |
| `sample` | `sample`: continue a prompt with a trained run; `catalog --checkpoint` |
| `kvgoals` | `python -m experiments.commands.kvgoals`: the KV goals on held-out prose |

`train` lives in `experiments.train`, `claim` and `tour` in `experiments.claims`.
"""
