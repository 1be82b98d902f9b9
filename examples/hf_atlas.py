"""The analysis atlas of a Hugging Face folder.

    python examples/hf_atlas.py            # 51 s of CPU time

Nothing is downloaded: a small random GPT-2-shaped model (one layer, d = 32) is written as a
Hugging Face folder by `transformer.to_hf` (`config.json` + `model.safetensors`, the files
`transformers` saves), read back by `transformer.from_hf`, and measured by
`python -m experiments atlas --hf FOLDER` — the same command you would point at a GPT-2 or
Llama folder you already have. It prints the report's path and its first lines. Needs
`safetensors` (the `hf` extra).
"""

import pathlib
import subprocess
import sys
import tempfile

import jax
import numpy as np

import transformer


def main():
  work = pathlib.Path(tempfile.mkdtemp(prefix="hf_atlas_"))
  cfg = transformer.gpt2_config(vocab_size=256, d_model=32, n_layers=1, n_heads=2, max_len=32)
  params = transformer.init(cfg, jax.random.key(0))
  folder = work / "gpt2-random"
  transformer.to_hf(params, cfg, folder)
  print("wrote", sorted(p.name for p in folder.iterdir()))

  cfg_back, params_back = transformer.from_hf(folder)  # what the atlas loads
  tokens = jax.numpy.array([[72, 101, 108, 108, 111]])
  a = transformer.Transformer(cfg).apply({"params": params}, tokens)
  b = transformer.Transformer(cfg_back).apply({"params": params_back}, tokens)
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

  subprocess.run([sys.executable, "-m", "experiments", "atlas", "--hf", str(folder),
                  "--out", str(work / "runs"), "--run-id", "hf", "--seq-len", "16", "--k", "4"],
                 check=True)
  report = work / "runs" / "atlas" / "hf" / "report.md"
  print(f"\n{report}:")
  print("\n".join(report.read_text().splitlines()[:20]))


if __name__ == "__main__":
  main()
