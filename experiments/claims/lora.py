"""Claim `lora`: does a low-rank update recover full fine-tuning on text the model never saw?

    python -m experiments claim lora [--quick]

Full run (3 seeds, the shared `small` models, 6 learning rates per arm, 150 steps each):
about 10–15 minutes on 2 idle CPU cores; `--quick` (the `quick` model, 2 rates, 10 steps,
two LoRA arms) about 20 s.

**Text.** The shared models are trained on the standard library's `.py` files. The fine-tuning
text is IDLE's plain-text documents (`idlelib/*.txt`: CREDITS, HISTORY, NEWS, NEWS2x, README,
TODO and extend on this Python 3.11):
English release notes and prose, never in the training corpus (which holds `.py` files only).
Their bytes, concatenated in sorted order, are cut into fine-tuning text (the first 80%), a
tuning part (the next 10%: picks each arm's learning rate) and a test part (the last 10%:
every reported loss).

**Arms** (per seed, all from the same base model, the same batches, Adam with warm-up +
cosine, no weight decay, the same learning-rate grid, each arm at its best rate on the tuning
text): `full` (every parameter), `lora-qv-r4` (LoRA rank 4 on `W_Q`, `W_V`), `lora-all-r16`
(rank 16 on every hidden matrix), `lora-qv-r16`; `alpha = R` (update scale 1). The gain of an
arm is the test loss of the base minus the arm's; `recovery = gain / gain(full)`. Full
fine-tuning's update `ΔW = W_ft − W_base` of every hidden matrix: its stable rank
`‖ΔW‖_F² / ‖ΔW‖₂²` as a fraction of `min(D_in, D_out)` (a Gaussian matrix has ≈ 1/4), and the
overlap of its top-4 singular subspaces with LoRA's rank-4 update on `W_Q`, `W_V`
(mean squared cosine of the principal angles; random subspaces give `4 / D`).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import sysconfig

import jax
import jax.numpy as jnp
import numpy as np
import optax

import analysis
import transformer
from experiments import data, models
from experiments.claims.claim import Anchor, Claim, Sizes, Spec, Threshold
from experiments.train import sweep
from transformer import lora

ARMS = {"lora-qv-r4": (4, ("w_q", "w_v")), "lora-qv-r16": (16, ("w_q", "w_v")),
        "lora-all-r16": (16, lora.ALL_HIDDEN)}
HIDDEN = {"w_q": "attn", "w_k": "attn", "w_v": "attn", "w_o": "attn", "w_1": "ffn",
          "w_2": "ffn", "w_gate": "ffn"}


@dataclasses.dataclass(frozen=True)
class LoraSizes(Sizes):
  """What a run of `lora` reads about its size.

  Attributes:
    model: the shared base model (`experiments.models`), one per seed.
    arms: the LoRA arms trained beside `full` (keys of `ARMS`; `lora-qv-r4` is required).
    learning_rates: the peak-rate grid every arm is tuned on.
    steps: fine-tuning steps per run.
    batch_size: windows per step.
    seq_len: tokens per window (fine-tuning, tuning and test).
    eval_batches: tuning-text batches that choose each arm's rate.
  """

  model: str
  arms: tuple[str, ...]
  learning_rates: tuple[float, ...]
  steps: int
  batch_size: int
  seq_len: int
  eval_batches: int

  def __post_init__(self):
    unknown = [a for a in self.arms if a not in ARMS]
    if unknown or "lora-qv-r4" not in self.arms:
      raise ValueError(f"LoraSizes.arms={self.arms!r}: every arm must be one of {list(ARMS)} "
                       "and 'lora-qv-r4' must be among them (the overlap is measured on it). "
                       "Fix: e.g. arms=('lora-qv-r4', 'lora-all-r16').")


QUICK = LoraSizes(model="quick", arms=("lora-qv-r4", "lora-all-r16"), learning_rates=(1e-3, 1e-2),
                  steps=10, batch_size=8, seq_len=64, eval_batches=8)
FULL = LoraSizes(model="small", arms=tuple(ARMS),
                 learning_rates=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1), steps=150, batch_size=16,
                 seq_len=128, eval_batches=8)


def held_out_text() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
  """`(fine-tune, tune, test)` byte arrays of IDLE's `.txt` documents (80/10/10%) and the files.

  None of them is a `.py` file, so none is in the shared models' training corpus.
  """
  files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "idlelib", "*.txt")))
  if not files:
    raise FileNotFoundError("lora claim: no idlelib/*.txt files in this Python's stdlib.")
  raw = np.concatenate([np.fromfile(f, np.uint8) for f in files])
  a, b = int(0.8 * len(raw)), int(0.9 * len(raw))
  return raw[:a], raw[a:b], raw[b:], files


def make_tx(steps: int):
  """`make_tx(learning_rate)`: clip 1, Adam with 10% linear warm-up and cosine decay."""
  unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, max(1, steps // 10), steps)

  def tx(learning_rate):  # the schedule is linear in its peak: traced rates stay traceable
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adam(lambda count: learning_rate * unit(count)))
  return tx


@functools.partial(jax.jit, static_argnums=1)
def _nll(params, cfg, tokens_BT1):
  logits = transformer.Transformer(cfg).apply({"params": params}, tokens_BT1[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens_BT1[:, 1:]).mean()


def text_loss(params, cfg: transformer.Config, text: np.ndarray, seq_len: int) -> float:
  """Mean next-token loss over consecutive `(seq_len + 1)`-token windows of `text`."""
  n = (len(text) - 1) // seq_len
  idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
  return float(_nll(params, cfg, jnp.asarray(text[idx].astype(np.int32))))


def update_spectra(base, tuned) -> dict[str, np.ndarray]:
  """Singular values of `ΔW = tuned − base` per hidden matrix and layer: `{name: (L, min dim)}`."""
  out = {}
  for name, sub in HIDDEN.items():
    if name in base["blocks"][sub]:
      d = np.asarray(tuned["blocks"][sub][name], np.float64) - np.asarray(
          base["blocks"][sub][name], np.float64)
      out[name] = np.linalg.svd(d, compute_uv=False)
  return out


def subspace_overlap(a_IO, b_IO, k: int) -> tuple[float, float]:
  """Mean squared cosine of the principal angles between the top-`k` left (input) and right
  (output) singular subspaces of two matrices: 1 for equal subspaces, `k / D` if random.

  Example:
    >>> import numpy as np
    >>> from experiments.claims.lora import subspace_overlap
    >>> a = np.random.default_rng(0).normal(size=(8, 6))
    >>> [round(x, 6) for x in subspace_overlap(a, 3 * a, 2)]
    [1.0, 1.0]
  """
  ua, _, vta = np.linalg.svd(np.asarray(a_IO, np.float64), full_matrices=False)
  ub, _, vtb = np.linalg.svd(np.asarray(b_IO, np.float64), full_matrices=False)
  left = np.linalg.norm(ua[:, :k].T @ ub[:, :k]) ** 2 / k
  right = np.linalg.norm(vta[:k] @ vtb[:k].T) ** 2 / k
  return float(left), float(right)


def _train(base, cfg, src, seed, lrs, steps, batch_size, seq_len, eval_batches, arm):
  """One arm at one seed over the learning-rate grid: `ManyResult`."""
  if arm == "full":
    init_fn, params_fn = (lambda key: base), None
  else:
    rank, targets = ARMS[arm]
    init_fn = lambda key: lora.init(base, rank, key, targets)
    params_fn = lora.params_fn(base, alpha=float(rank))
  return sweep.train_many(cfg, make_tx(steps), seeds=(seed,), learning_rates=lrs,
                             steps=steps, data=src, batch_size=batch_size, seq_len=seq_len,
                             params_fn=params_fn, init_fn=init_fn, eval_every=steps,
                             eval_batches=eval_batches)


def measure_seed(base, cfg, seed: int, *, lrs, steps, batch_size, seq_len, eval_batches, log,
                 arms=tuple(ARMS)) -> dict:
  """Every arm's metrics at one seed (see the module docstring); `arms`: the LoRA arms."""
  ft, tune, test, _ = held_out_text()
  src = data.TextSource(data.Corpus(ft, tune, (), ()), seq_len)
  base_test = text_loss(base, cfg, test, seq_len)
  runs, tuned = {"base": {"test_loss": base_test}}, {}
  for arm in ("full", *arms):
    r = _train(base, cfg, src, seed, lrs, steps, batch_size, seq_len, eval_batches, arm)
    val = np.where(r.diverged[:, 0], np.inf, r.val_loss[:, 0, -1])
    best = int(np.argmin(val))
    params = jax.tree.map(lambda x, best=best: x[best, 0], r.params)
    tuned[arm] = params
    loss = text_loss(params, cfg, test, seq_len)
    runs[arm] = {"test_loss": loss, "gain": base_test - loss, "best_lr": lrs[best],
                 "best_lr_index": float(best), "edge_lr": float(best in (0, len(lrs) - 1)),
                 "tune_loss": float(val[best])}
    log(f"    {arm}: lr {lrs[best]:g}, test loss {base_test:.4f} -> {loss:.4f}")
  for arm in arms:
    runs[arm]["recovery"] = runs[arm]["gain"] / runs["full"]["gain"]
  spectra = update_spectra(base, tuned["full"])
  frac = [analysis.stable_rank(jnp.asarray(s)) / s.shape[-1] for s in spectra.values()]
  frac = np.concatenate([np.asarray(f) for f in frac])
  energy4 = np.concatenate([(s[:, :4] ** 2).sum(-1) / (s ** 2).sum(-1) for s in spectra.values()])
  runs["full"].update({"dW_stable_rank_frac": float(frac.mean()),
                       "dW_stable_rank_frac_max": float(frac.max()),
                       "dW_top4_energy": float(energy4.mean())})
  for name in ("w_q", "w_v"):
    w0 = np.asarray(base["blocks"]["attn"][name], np.float64)
    full_d = np.asarray(tuned["full"]["blocks"]["attn"][name], np.float64) - w0
    lora_d = np.asarray(tuned["lora-qv-r4"]["blocks"]["attn"][name], np.float64) - w0
    ov = [subspace_overlap(full_d[l], lora_d[l], 4) for l in range(cfg.n_layers)]
    runs["lora-qv-r4"][f"overlap_{name}_in"] = float(np.mean([o[0] for o in ov]))
    runs["lora-qv-r4"][f"overlap_{name}_out"] = float(np.mean([o[1] for o in ov]))
  runs["lora-qv-r4"]["overlap_random"] = 4 / cfg.d_model
  return runs


def _figure(runs: dict, seeds, run_dir: str) -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  arms = ["full", *(a for a in ARMS if a in runs)]
  fig, ax = plt.subplots(figsize=(5.5, 3.6))
  gains = [[runs[a][s]["gain"] for s in seeds] for a in arms]
  ax.bar(arms, [np.mean(g) for g in gains], yerr=[np.std(g) for g in gains], color="C0")
  ax.set(ylabel="test loss gain over base (nats/token)", title="fine-tuning on unseen text")
  fig.tight_layout()
  fig.savefig(f"{run_dir}/lora.png", dpi=110)
  plt.close(fig)
  return "lora.png"


def run(spec: Spec) -> dict:
  """Trains every arm at every seed; see the module docstring."""
  z = spec.sizes
  name, arms, lrs = z.model, z.arms, z.learning_rates
  steps, batch_size, seq_len = z.steps, z.batch_size, z.seq_len
  runs: dict = {}
  cfg = None
  for seed, (params, cfg) in zip(spec.seeds, models.base_models(name, spec.seeds), strict=True):
    spec.log(f"  lora: seed {seed}")
    for arm, m in measure_seed(params, cfg, seed, lrs=lrs, steps=steps, batch_size=batch_size,
                               seq_len=seq_len, eval_batches=z.eval_batches, log=spec.log,
                               arms=arms).items():
      runs.setdefault(arm, {})[seed] = m
  figure = _figure(runs, spec.seeds, spec.run_dir)
  _, _, _, files = held_out_text()

  def mean(arm, metric):
    return float(np.mean([runs[arm][s][metric] for s in spec.seeds]))

  notes = [
      f"- Text: {len(files)} files idlelib/*.txt ({', '.join(os.path.basename(f) for f in files)})"
      ", not in the `.py` training corpus; 80/10/10% fine-tune/tune/test.",
      f"- Base test loss {mean('base', 'test_loss'):.4f} nats/token; " + ", ".join(
          f"{a} {mean(a, 'test_loss'):.4f} (lr {[runs[a][s]['best_lr'] for s in spec.seeds]})"
          for a in ("full", *arms)) + ".",
      "- Recovery of full fine-tuning's gain: " + ", ".join(
          f"{a} {mean(a, 'recovery'):.1%}" for a in arms) + ".",
      f"- Full fine-tuning's ΔW: stable rank {mean('full', 'dW_stable_rank_frac'):.3f} of "
      f"min(D_in, D_out) on average (max {mean('full', 'dW_stable_rank_frac_max'):.3f}); "
      f"top-4 directions hold {mean('full', 'dW_top4_energy'):.1%} of its energy.",
      "- Top-4 subspace overlap (mean cos² of principal angles) of LoRA r4 with full "
      "fine-tuning: " + ", ".join(
          f"{n} {side} {mean('lora-qv-r4', f'overlap_{n}_{side}'):.3f}"
          for n in ("w_q", "w_v") for side in ("in", "out"))
      + f" (random: {mean('lora-qv-r4', 'overlap_random'):.3f}).",
      f"- Learning-rate grid {list(lrs)}, {steps} steps of {batch_size} × {seq_len}; an arm "
      "whose best rate is at the grid's edge is flagged `edge_lr`: " + ", ".join(
          f"{a} {mean(a, 'edge_lr'):.0%}" for a in ("full", *arms)) + ".",
  ]
  return {"setup": {"files": [os.path.basename(f) for f in files],
                    "model_config": cfg.to_dict()},
          "runs": runs, "figures": [figure], "notes": notes,
          "effects": [("gain, full fine-tuning", "full", None, "gain"),
                      *([("recovery, LoRA r16 on W_Q, W_V", "lora-qv-r16", None, "recovery")]
                        if "lora-qv-r16" in runs else []),
                      ("top-4 overlap, W_Q input side", "lora-qv-r4", None, "overlap_w_q_in"),
                      ("top-4 overlap, W_V input side", "lora-qv-r4", None, "overlap_w_v_in"),
                      ("top-4 energy of full-FT ΔW", "full", None, "dW_top4_energy")]}


CLAIM = Claim(
    id="lora",
    topic="decomposition",
    kind="existing",
    preface="LoRA achieves efficient fine-tuning via low-rank weight updates",
    hypothesis=("Fine-tuning a shared base model on text it never saw (IDLE's .txt documents), "
                "full fine-tuning's update ΔW has low stable rank (≤ 10% of the matrix's "
                "dimension on average); LoRA rank 4 on W_Q, W_V recovers ≥ 80% of full "
                "fine-tuning's test-loss gain, and rank 16 on every hidden matrix ≥ 95%, each "
                "arm at its best learning rate on the same grid."),
    refuted_if=("LoRA rank 4 on W_Q, W_V recovers less than 80% of full fine-tuning's gain, or "
                "rank 16 on all hidden matrices less than 95% (whole 95% interval), or ΔW's "
                "stable rank is ≥ 25% of the dimension (as for a random matrix)."),
    thresholds=(
        Threshold("recovery of full FT's gain, LoRA r4 on W_Q, W_V", arm="lora-qv-r4",
                  metric="recovery", supports=">= 0.8", refutes="< 0.8"),
        Threshold("recovery of full FT's gain, LoRA r16 on all hidden matrices",
                  arm="lora-all-r16", metric="recovery", supports=">= 0.95", refutes="< 0.95"),
        Threshold("stable rank of full FT's ΔW / min(D_in, D_out)", arm="full",
                  metric="dW_stable_rank_frac", supports="<= 0.1", refutes=">= 0.25"),
        Threshold("full fine-tuning improves the test loss", arm="full", metric="gain",
                  stat="range", supports="> 0", control=True),
    ),
    anchors=(
        Anchor("LoRA rank for W_q + W_v on GPT-3 (WikiSQL / MultiNLI)", "r = 4 as good as "
               "r = 64 (Table 6)", "Hu et al. 2021, LoRA: Low-Rank Adaptation of Large "
               "Language Models"),
        Anchor("overlap of LoRA's top directions across ranks", "top directions shared; ΔW "
               "amplifies directions not emphasised in W", "Hu et al. 2021, §7"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
