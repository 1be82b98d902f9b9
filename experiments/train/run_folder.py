"""A training run's folder: its config, its metrics log and its checkpoints, in one object.

    runs/train/<run-id>/
      config.json            what defines the run; checked on every resume
      metrics.jsonl          one strict-JSON row per logged step (and per evaluation)
      checkpoints/<step>/    Orbax: params and opt_state (finite states only)
      events.out.tfevents.*  the same scalars for TensorBoard
      results.json, report.md, loss.png    the end-of-run summary (`train_report`)

`RunFolder` owns these files; the training loop (`experiments.train`) only asks it to restore,
log and save. Resuming cuts the metrics log back to the restored step, so a resumed run's log
has no repeated or missing steps.

Example:
  >>> import tempfile
  >>> from experiments.train.run_folder import RunFolder
  >>> folder = RunFolder(tempfile.mkdtemp(), {"train": {"steps": 2}, "model": {}})
  >>> folder.open_log(start=0)
  >>> folder.log({"step": 1, "loss": 2.5}); folder.log({"step": 1, "val_loss": float("nan")})
  >>> folder.close()
  >>> folder.rows()
  [{'step': 1, 'loss': 2.5}, {'step': 1, 'val_loss': None}]
"""

from __future__ import annotations

import math
import os
from typing import Any

from experiments import jsonio
from experiments.train import checkpoint

METRICS_FILE = "metrics.jsonl"


class RunFolder:
  """Config, metrics log and checkpoints of one run (see the module docstring).

  Args:
    path: the folder (created if missing).
    record: the run's config, `{"train": {...}, "model": {...}}`; written on the first
      open, compared with the saved one (`checkpoint.check_config`) afterwards.
    keep: checkpoints kept on disk.
    resumable: fields of `record` allowed to differ from the saved config.
    primary: whether this process writes (the first process of a multi-host run).
  """

  def __init__(self, path: str, record: dict[str, Any], keep: int = 3,
               resumable: tuple[str, ...] = (), primary: bool = True):
    self.path, self.record, self.primary = path, record, primary
    if os.path.exists(os.path.join(path, checkpoint.CONFIG_FILE)):
      checkpoint.check_config(checkpoint.read_config(path), record, ignore=resumable)
    elif primary:
      checkpoint.write_config(path, record)
    self.manager = checkpoint.open_manager(path, keep)
    self.last_saved = 0  # the newest step on disk, finite by construction
    self._log = None
    self._writer = None

  # ---------------------------------------------------------------------------- checkpoints

  def restore(self, params_target, opt_state_target):
    """`(step, params, opt_state)` of the newest readable checkpoint, or `None` if none.

    A damaged newer checkpoint is reported in one line and moved aside to
    `checkpoints/<step>.corrupt`, so the run continues from (and later overwrites) the
    intact one before it.
    """
    if self.manager.latest_step() is None:
      return None
    quarantine = (lambda s: checkpoint.quarantine(self.manager, s)) if self.primary else None
    step, params, opt_state = checkpoint.restore_latest(
        self.manager, params_target, opt_state_target, on_corrupt=quarantine)
    self.last_saved = step
    return step, params, opt_state

  def save(self, step: int, params, opt_state) -> None:
    """Saves checkpoint `step` unless it is already on disk.

    Raises:
      checkpoint.NonFiniteState: the state holds NaN/inf; nothing is written.
    """
    if step > self.last_saved:
      checkpoint.save(self.manager, step, params, opt_state)
      self.last_saved = step

  # ---------------------------------------------------------------------------- metrics log

  @property
  def metrics_path(self) -> str:
    return os.path.join(self.path, METRICS_FILE)

  def rows(self) -> list[dict]:
    """The rows of `metrics.jsonl` (up to a torn last line; `jsonio.read_jsonl`)."""
    return jsonio.read_jsonl(self.metrics_path)

  def open_log(self, start: int) -> None:
    """Opens the metrics log for appending after cutting it back to the rows of steps <= `start`.

    Also opens the TensorBoard writer (on the primary process).
    """
    if not self.primary:
      self._log = open(os.devnull, "w")
      return
    kept = [r for r in self.rows() if r.get("step", math.inf) <= start]
    self._log = open(self.metrics_path, "w")
    self._log.writelines(jsonio.dumps_line(r) + "\n" for r in kept)
    from tensorboardX import SummaryWriter  # heavy; only a training run needs it

    self._writer = SummaryWriter(self.path)

  def log(self, entry: dict) -> None:
    """Appends one row (strict JSON: NaN becomes null) and its scalars to TensorBoard."""
    self._log.write(jsonio.dumps_line(entry) + "\n")
    if self._writer is not None:
      for k, v in entry.items():
        if k != "step" and v is not None and math.isfinite(v):
          self._writer.add_scalar(k, v, entry["step"])

  def flush(self) -> None:
    """Pushes the log to disk, so a killed run's log reaches at least its last checkpoint."""
    self._log.flush()

  def last_val_loss(self) -> float | None:
    """The last validation loss in the log, or `None`."""
    vals = [r["val_loss"] for r in self.rows() if r.get("val_loss") is not None]
    return vals[-1] if vals else None

  def close(self) -> None:
    """Waits for checkpoints to be written and closes every file."""
    self.manager.wait_until_finished()
    self.manager.close()
    if self._log is not None:
      self._log.close()
    if self._writer is not None:
      self._writer.close()

  def __enter__(self) -> RunFolder:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

