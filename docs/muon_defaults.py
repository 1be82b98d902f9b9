"""The measurements behind `optim.muon`'s defaults (the table in its docstring, docs/optim.rst).

  python docs/muon_defaults.py            # all, about 10 minutes on 2 CPU cores
  python docs/muon_defaults.py fused      # the fused q, k, v numbers only (a second)

`nesterov`, `adam` and `routing` train the `tiny` preset for 300 steps on `stdlib`
(`experiments.train`, the optimizer given as is: no clipping, constant rates) at Muon's rate
0.02, seeds 0 and 1, and print the final validation loss of each arm; `fused` orthogonalizes
Gaussian fused q, k, v gradients as one matrix and as three (exact polar factors, float64).
"""

import sys
import tempfile

import jax
import numpy as np

PLAIN = {"adam_nesterov": False}  # AdamW without Nesterov momentum, as before issue 48
ARMS = {  # name -> keyword arguments of optim.muon(0.02, ...)
    "nesterov": {
        "defaults (optax's: adam_b2=0.999, AdamW at Muon's rate, Nesterov as Muon's)": {},
        "plain AdamW (adam_nesterov=False)": PLAIN,
    },
    "adam": {
        "before issue 48 (adam_b2=0.95, adam_learning_rate=3e-4, plain)":
            {"adam_b2": 0.95, "adam_learning_rate": 3e-4, **PLAIN},
        "adam_b2=0.95 only (plain)": {"adam_b2": 0.95, **PLAIN},
        "adam_learning_rate=3e-4 only (plain)": {"adam_learning_rate": 3e-4, **PLAIN},
    },
    "routing": {
        "every leaf of >= 2 axes on Muon (optax's routing; plain)":
            {"label_fn": lambda p: jax.tree.map(lambda x: "hidden" if x.ndim >= 2 else "vector",
                                                p), **PLAIN},
    },
}


def train_arms(arms: dict, seeds=(0, 1)) -> None:
  import optim
  from experiments.train import TrainConfig, train

  for name, kw in arms.items():
    losses = []
    for seed in seeds:
      with tempfile.TemporaryDirectory() as run_dir:
        tc = TrainConfig(model="tiny", optimizer="muon", steps=300, data="stdlib", seed=seed,
                         run_dir=run_dir, progress=False)
        losses.append(float(train(tc, tx=optim.muon(0.02, **kw)).val_loss))
    print(f"{name}: val loss {np.mean(losses):.3f} (seeds {list(seeds)}: "
          f"{', '.join(f'{x:.4f}' for x in losses)})", flush=True)


def fused(D: int = 64, trials: int = 100) -> None:
  def polar(G):
    U, _, Vt = np.linalg.svd(G, full_matrices=False)
    return U @ Vt

  rng = np.random.default_rng(0)
  lo, hi = [], []
  for _ in range(trials):
    G = np.concatenate([s * rng.standard_normal((D, D)) for s in (1.0, 0.3, 3.0)], axis=1)
    for part in np.split(polar(G), 3, axis=1):
      s = np.linalg.svd(part, compute_uv=False)
      lo.append(s.min())
      hi.append(s.max())
  print(f"fused (D, 3D) orthogonalized whole: each third's singular values in "
        f"[{min(lo):.3f}, {max(hi):.3f}] ({trials} gradients, q : k : v scales 1 : 0.3 : 3, "
        f"D = {D}); as three matrices: all 1")


if __name__ == "__main__":
  which = sys.argv[1:] or ["fused", "nesterov", "adam", "routing"]
  if "fused" in which:
    fused()
  for part in ("nesterov", "adam", "routing"):
    if part in which:
      train_arms(ARMS[part])
