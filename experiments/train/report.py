"""The end-of-run summary of a training run: `results.json`, `loss.png` and `report.md`.

Everything is read back from `metrics.jsonl`, so a resumed run's report covers the whole
run, not only its last leg.
"""

from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments import jsonio  # noqa: E402

RESULTS_FILE = "results.json"


def read_metrics(run_dir: str) -> tuple[list[dict], list[dict], list[dict]]:
  """`(train rows, validation rows, sharpness rows)` of `metrics.jsonl`, up to a torn last
  line (`jsonio.read_jsonl`, the one reader of the log)."""
  rows = jsonio.read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
  return ([r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r],
          [r for r in rows if "sharpness" in r])


def plot_sharpness(rows: list[dict], path: str) -> None:
  """Sharpness against its stability threshold over the run (log y): the edge of stability."""
  steps = [r["step"] for r in rows]
  nan = lambda v: math.nan if v is None else v
  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.plot(steps, [nan(r["sharpness"]) for r in rows], "o-", color="C0",
          label="sharpness (preconditioned for Adam)")
  ax.plot(steps, [nan(r["sharpness_threshold"]) for r in rows], "--", color="C0",
          label="its stability threshold")
  if any("sharpness_raw" in r for r in rows):
    ax.plot(steps, [nan(r.get("sharpness_raw")) for r in rows], "s-", color="C1",
            label="λ_max(H), not preconditioned")
    ax.plot(steps, [nan(r["two_over_lr"]) for r in rows], ":", color="C1", label="2 / lr")
  ax.set(xlabel="step", ylabel="top Hessian eigenvalue", yscale="log",
         title="sharpness vs the edge of stability")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write(run_dir: str, record: dict) -> dict:
  """Writes the summary of the run in `run_dir`; `record` is its saved config. Returns it."""
  train, val, sharp = read_metrics(run_dir)
  tail = [r["loss"] for r in train[-20:] if r.get("loss") is not None]
  speeds = sorted(r["tokens_per_s"] for r in train if "tokens_per_s" in r)
  results = {
      "steps": train[-1]["step"] if train else 0,
      "train_loss_last_20": sum(tail) / len(tail) if tail else math.nan,
      "final_val_loss": val[-1]["val_loss"] if val else math.nan,
      "best_val_loss": min((r["val_loss"] for r in val if r["val_loss"] is not None),
                           default=math.nan),
      "median_tokens_per_s": speeds[len(speeds) // 2] if speeds else math.nan,
  }
  if val and "val_exact_match" in val[-1]:
    results["final_val_exact_match"] = val[-1]["val_exact_match"]
  if sharp:
    results["final_sharpness"] = sharp[-1]["sharpness"]
    results["final_sharpness_threshold"] = sharp[-1]["sharpness_threshold"]
  results = jsonio.strict(results)
  jsonio.dump_strict(results, os.path.join(run_dir, RESULTS_FILE))

  fig, ax = plt.subplots(figsize=(6, 3.5))
  nan = lambda v: math.nan if v is None else v
  ax.plot([r["step"] for r in train], [nan(r["loss"]) for r in train], lw=1, label="train")
  if val:
    ax.plot([r["step"] for r in val], [nan(r["val_loss"]) for r in val], "o-",
            label="validation")
  ax.axhline(math.log(256), color="gray", ls=":", lw=1, label="uniform bytes (ln 256)")
  ax.set(xlabel="step", ylabel="cross-entropy (nats)", title="loss")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(run_dir, "loss.png"), dpi=120)
  plt.close(fig)

  tc, model = record["train"], record["model"]
  lines = [
      f"# Training run `{os.path.basename(os.path.normpath(run_dir))}`", "",
      f"Model `{tc['model']}` (L={model['n_layers']}, d={model['d_model']}, "
      f"H={model['n_heads']}), optimizer `{tc['optimizer']}`, data `{tc['data']}`, "
      f"{tc['steps']} steps of {tc['batch_size']}×{tc['seq_len']} tokens, seed {tc['seed']}.", "",
      "| measure | value |", "| --- | --- |",
      *(f"| {k.replace('_', ' ')} | {'–' if v is None else f'{v:.4g}'} |"
        for k, v in results.items()), "",
      "![loss](loss.png)", "",
  ]
  if sharp:
    plot_sharpness(sharp, os.path.join(run_dir, "sharpness.png"))
    lines += ["Sharpness (`--track-sharpness`): the top eigenvalue of the loss's Hessian on the "
              "step's batch, preconditioned by Adam's second moments for AdamW, against the "
              "step size's stability threshold; training at the edge of stability hovers at "
              "the threshold.", "", "![sharpness](sharpness.png)", ""]
  with open(os.path.join(run_dir, "report.md"), "w") as f:
    f.write("\n".join(lines))
  return results
