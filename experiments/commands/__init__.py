"""The commands of `python -m experiments NAME` other than training, and the claims' tools.

| module | command |
| --- | --- |
| `demo` | `demo` (catalog, forward pass, cached generation); `catalog` of a preset or HF |
| `atlas` | `atlas`: spectra, Jacobians and the seven properties of a model, as a report |
| `eval` | `eval`: loss, bits per byte and perplexity of a run or HF model on any text |
| `sample` | `sample`: continue a prompt with a trained run; `catalog --checkpoint` |
| `kvgoals` | `python -m experiments.commands.kvgoals`: the KV goals on held-out prose |
| `tour` | `tour`: every claim in order, one verdict table; `claim ID`: one claim |
| `table` | `python -m experiments.commands.table [--check README.md]`: the README's table |
| `validate` | `python -m experiments.commands.validate ROOT`: every `results.json` (CI) |
| `refit` | `python -m experiments.commands.refit [--check]`: kept results' trends refitted |

`train` lives in `experiments.train`. Commands are leaves: only `experiments.__main__` and
other commands import them.
"""
