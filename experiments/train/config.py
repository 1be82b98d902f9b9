"""A training run's config: `TrainConfig`, one field per `--flag`, and the model it builds.

`TrainConfig` is frozen and JSON-able (`to_dict`); `validate` names the first impossible flag
and the fix; `model_config` turns `--model` and `--model-overrides` into a `transformer.Config`.
Fields in `RESUMABLE` may change when a run is resumed, since they do not alter its trajectory.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import transformer
from experiments import data


def _field(default, help: str, **kw):
  return dataclasses.field(default=default, metadata={"help": help, **kw})


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything that defines a training run; each field is a `--flag` of the CLI."""

  model: str = _field("tiny", "model preset", choices=sorted(transformer.PRESETS))
  model_overrides: str = _field("", "Config overrides, e.g. 'd_model=32,n_layers=2'")
  data: str = _field("stdlib", "'stdlib', 'mixed' (code + prose), a text file, folder or "
                     "glob, or task:NAME "
                     f"({', '.join(data.TASKS)})")
  val_fraction: float = _field(0.05, "fraction of files held out for validation")
  seq_len: int = _field(64, "tokens per training sequence (text data)")
  batch_size: int = _field(16, "sequences per step (global, over all devices)")
  optimizer: str = _field("adamw", "optimizer", choices=("adamw", "sgd", "muon"))
  steps: int = _field(300, "total steps; the schedule decays to the end of these")
  learning_rate: float = _field(3e-3, "peak learning rate (AdamW, SGD; with --optimizer muon "
                                "the rate of the embedding, output and vectors)")
  muon_learning_rate: float = _field(0.02, "peak learning rate of Muon on the hidden matrices "
                                     "(--optimizer muon only)")
  warmup_steps: int = _field(30, "linear warm-up steps")
  final_lr_fraction: float = _field(0.1, "cosine decay ends at this fraction of the peak")
  weight_decay: float = _field(0.1, "decoupled weight decay on matrices (adamw, muon)")
  grad_clip: float = _field(1.0, "clip the global gradient norm to this (0: no clipping)")
  dtype: str = _field("float32", "matmul compute dtype (bfloat16: compute in bf16, parameters "
                      "and optimizer state stay in --param-dtype)",
                      choices=("float32", "bfloat16"))
  param_dtype: str = _field("float32", "storage dtype of the parameters (the optimizer state "
                            "follows them)", choices=("float32", "bfloat16"))
  seed: int = _field(0, "seed of the init and of the batch stream")
  mesh: str = _field("data=1", "device mesh, e.g. 'data=8' or 'data=2,fsdp=4'")
  track_sharpness: int = _field(0, "every this many steps, log the top Hessian eigenvalue of "
                                "the loss on that step's batch next to the optimizer's "
                                "stability threshold (2/lr for plain SGD; for AdamW the "
                                "preconditioned sharpness against 38/lr); 0: never")
  eval_every: int = _field(100, "validation loss every this many steps (and at the end)")
  eval_batches: int = _field(8, "validation batches per evaluation (the same every time)")
  log_every: int = _field(10, "fetch metrics from the device every this many steps")
  checkpoint_every: int = _field(100, "save a checkpoint every this many steps (and at the end)")
  keep_checkpoints: int = _field(3, "checkpoints kept on disk")
  stop_at: int = _field(0, "stop after this step (0: run to --steps); resume later")
  run_dir: str = _field("", "run folder; an existing one is resumed (default "
                        "runs/train/<time>-<model>-<optimizer>)")
  progress: bool = _field(True, "show progress (a bar on a terminal, else periodic lines)")
  distributed: bool = _field(False, "join a multi-process run: jax.distributed.initialize() "
                             "before anything else (see --coordinator-address)")
  coordinator_address: str = _field("", "host:port of process 0's coordinator, the same on "
                                    "every process (--distributed; default: "
                                    "$JAX_COORDINATOR_ADDRESS, or auto-detected on Cloud TPU, "
                                    "SLURM, Open MPI)")
  num_processes: int = _field(0, "processes in the run (--distributed; 0: auto-detect)")
  process_id: int = _field(-1, "this process's index, 0 … num_processes-1 (--distributed; "
                           "-1: auto-detect)")

  def replace(self, **changes) -> TrainConfig:
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def validate(self) -> None:
    """Raises `ValueError` naming the first flag with an impossible value, and the fix."""
    at_least = {"steps": 1, "batch_size": 1, "seq_len": 1, "eval_batches": 1,
                "keep_checkpoints": 1, "warmup_steps": 0, "eval_every": 0, "log_every": 0,
                "checkpoint_every": 0, "stop_at": 0, "track_sharpness": 0}
    for name, low in at_least.items():
      if getattr(self, name) < low:
        raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be at least "
                         f"{low}.")
    for name in ("learning_rate", "muon_learning_rate", "weight_decay", "grad_clip"):
      value = getattr(self, name)
      if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"--{name.replace('_', '-')} {value} must be a finite number >= 0.")
    if self.track_sharpness and self.optimizer == "muon":
      raise ValueError("--track-sharpness needs an optimizer with a known stability threshold "
                       "(adamw: the Adam-preconditioned sharpness; sgd: 2/lr with momentum's "
                       "correction); Muon has none. Fix: drop --track-sharpness or use "
                       "--optimizer adamw or sgd.")
    if not 0 <= self.final_lr_fraction <= 1:
      raise ValueError(f"--final-lr-fraction {self.final_lr_fraction} must lie in [0, 1].")
    launch = {"coordinator_address": self.coordinator_address != "",
              "num_processes": self.num_processes != 0, "process_id": self.process_id != -1}
    if not self.distributed and any(launch.values()):
      name = next(k for k, given in launch.items() if given).replace("_", "-")
      raise ValueError(f"--{name} only applies to a multi-process run. Fix: add --distributed, "
                       f"or drop --{name}.")
    if self.num_processes < 0:
      raise ValueError(f"--num-processes {self.num_processes} must be a count of processes, "
                       "or 0 to auto-detect it.")
    if self.distributed and not self.run_dir:
      raise ValueError("--distributed needs --run-dir: every process must write the same "
                       "folder (the default name holds each process's own start time). Fix: "
                       "pass --run-dir on a filesystem all processes share.")
    if launch["num_processes"] != launch["process_id"]:
      raise ValueError("--num-processes and --process-id go together. Fix: pass both (each "
                       "process its own --process-id), or neither to auto-detect them.")
    if launch["process_id"] and not 0 <= self.process_id < self.num_processes:
      raise ValueError(f"--process-id {self.process_id} must lie in 0 … --num-processes - 1 = "
                       f"{self.num_processes - 1}. Fix: number the processes 0, 1, … "
                       f"{self.num_processes - 1}.")


# Fields that may change when a run is resumed: they do not alter the trajectory (on one mesh).
RESUMABLE = ("stop_at", "run_dir", "progress", "log_every", "eval_every", "eval_batches",
             "checkpoint_every", "keep_checkpoints", "mesh", "distributed", "coordinator_address",
             "num_processes", "process_id", "track_sharpness")

def _parse_value(text: str):
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def model_config(tc: TrainConfig) -> transformer.Config:
  """The model's `Config`: the preset, the overrides, the compute and parameter dtypes."""
  known = {f.name for f in dataclasses.fields(transformer.Config)}
  overrides = {}
  for part in filter(None, (p.strip() for p in tc.model_overrides.split(","))):
    name, eq, value = part.partition("=")
    if not eq:
      raise ValueError(f"--model-overrides: cannot read {part!r}. Fix: write name=value pairs.")
    name = name.strip()
    if name not in known:
      raise ValueError(f"--model-overrides: unknown field {name!r}. Fix: use fields of "
                       f"transformer.Config: {', '.join(sorted(known))}.")
    overrides[name] = _parse_value(value.strip())
  return transformer.preset(tc.model, dtype=tc.dtype, param_dtype=tc.param_dtype, **overrides)
