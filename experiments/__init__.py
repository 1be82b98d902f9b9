"""What happens when we shape the matrices: the CLI, training, the preface's claims, benchmarks.

    python -m experiments NAME [--flags]      # NAME --help for each command

Grouped by role, top of the house first (imports only point down this list):

- `__main__`: the CLI, dispatching to the modules below;
- `commands/`: `demo`, `catalog`, `atlas`, `eval`, `sample`, and the claims' `tour`,
  `claim`, `table`, `validate`, `refit`;
- `claims/`: the 14 claims of the preface and their registry; `benchmarks/`: timing scripts
  that print ratios;
- `verdict/`: the machinery every claim shares (declarations, statistics, the verdict rule,
  the runner, reports), below every claim;
- `lab/`: the parts several claims share (arms, tuning, measurements), below every claim;
- `models`: the shared base models, trained once and cached;
- `train/`: the one loss and step, the loop, vmapped sweeps, checkpoints, sharding;
- `data/`: text and tasks as pure functions of `(seed, step)` (`batch`, `text`, `tasks`);
  `jsonio`, `console`: strict JSON, progress lines.
"""
