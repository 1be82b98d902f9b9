"""KV-cache compression of a trained run, from the command line.

    python examples/kv_compression.py      # 41 s of CPU time

Trains the `tiny` model for a few steps on text (the sources of Python's `email` package,
found on every installation), then scores held-out text through a compressed KV cache:
`python -m experiments eval --checkpoint RUN --split val --kv-ratio 4` projects every head's
keys and values onto a low-rank basis calibrated on the training text (`analysis.kv.compress`) and
reports the loss with and without compression and the ratio measured from the cache's bytes.
A short run learns little, so read the numbers as the mechanics, not the claim
(`python -m experiments claim kv-compression` is the measured version).
"""

import email
import json
import pathlib
import subprocess
import sys
import tempfile


def cli(*args):
  """Run `python -m experiments ARGS`; its last stdout line (JSON for `eval`)."""
  out = subprocess.run([sys.executable, "-m", "experiments", *args], check=True,
                       capture_output=True, text=True).stdout
  return out.strip().splitlines()[-1] if out.strip() else ""


def main():
  work = pathlib.Path(tempfile.mkdtemp(prefix="kv_"))
  data = str(pathlib.Path(email.__file__).parent)
  run = work / "run"
  cli("train", "--model", "tiny", "--data", data, "--steps", "60", "--seq-len", "32",
      "--batch-size", "8", "--eval-every", "60", "--checkpoint-every", "60", "--run-dir", str(run),
      "--no-progress")
  print("trained", run)
  for ratio in ("2", "4"):
    scores = json.loads(cli("eval", "--checkpoint", str(run), "--data", data, "--split", "val",
                            "--max-bytes", "20000", "--kv-ratio", ratio))
    print(f"kv-ratio {ratio}: measured compression {scores['kv_compression']:.2f}x, "
          f"loss {scores['loss_uncompressed']:.3f} -> {scores['loss']:.3f} nats/byte "
          f"({100 * scores['kv_loss_rise']:+.2f}%)")
    assert abs(scores["kv_compression"] / float(ratio) - 1) < 0.25, scores


if __name__ == "__main__":
  main()
