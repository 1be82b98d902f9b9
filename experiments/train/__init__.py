"""Training: one loss and one step for everything that trains, the loop, sweeps, checkpoints.

    python -m experiments train --model tiny --optimizer adamw --steps 300 --data stdlib

| module | holds |
| --- | --- |
| `config` | `TrainConfig` (one field per `--flag`) and the model it builds |
| `step` | the language-model loss, the optimizers, `train_step`, the compiled `Trainer` |
| `loop` | `train`: the sharded loop with logging, evaluation, checkpoints, exact resume |
| `sweep` | `train_many`: seeds × learning rates as one vmapped program over `train_step` |
| `arms` | the optimizer arms `train_many` sweeps, and the budget schedule they train on |
| `checkpoint`, `run_folder`, `report` | Orbax checkpoints, a run's folder, its report |
| `sharding` | the `("data", "fsdp")` mesh and the shardings of state and batch |
| `cli` | `python -m experiments train` |

The names below are this package's public face: `from experiments import train` then
`train.train(train.TrainConfig(steps=300))`.
"""

from experiments.train.arms import budget_schedule, on_budget, other_at, tied
from experiments.train.cli import main, parser
from experiments.train.config import RESUMABLE, TrainConfig, model_config
from experiments.train.loop import (
    NonFiniteLoss,
    TrainResult,
    default_run_dir,
    initialize_distributed,
    load_checkpoint,
    train,
)
from experiments.train.step import (
    DECAY_MASKS,
    OPTIMIZERS,
    STEP_FIELDS,
    TRAINERS,
    Trainer,
    TrainState,
    adamw,
    build,
    cached_trainer,
    eval_metrics,
    exact_match,
    lm_loss,
    loss_fn,
    optimizer,
    schedule,
    train_step,
)
from experiments.train.sweep import ManyResult, train_like, train_many

__all__ = ["DECAY_MASKS", "OPTIMIZERS", "RESUMABLE", "STEP_FIELDS", "TRAINERS", "ManyResult",
           "NonFiniteLoss", "TrainConfig", "TrainResult", "TrainState", "Trainer", "adamw",
           "budget_schedule", "build", "cached_trainer", "default_run_dir", "eval_metrics",
           "exact_match", "initialize_distributed", "lm_loss", "load_checkpoint", "loss_fn",
           "main", "model_config", "on_budget", "optimizer", "other_at", "parser", "schedule",
           "tied", "train", "train_like", "train_many", "train_step"]
