"""Training heads apart: the `orthogonal-heads` arms, their tuning, and the redundancy read.

The training side of the `orthogonal-heads` claim (`experiments.claims.orthogonal_heads` states
the protocol): the model with `H` query heads that keeps its family's grouping (`model_config`),
the orthogonality pull and per-head Muon split by query and key/value heads (`orth_arm`,
`muon_per_head_arm`), the rate and strength tuning on the tuning seeds (`tune_arms`, which
picks `λ` by `choose_strength` and extends the strength grid past a chosen edge by the edge
rule, `extend_strength`), the reported seeds' training with the heads' redundancy measured on
windows of the split the verdict reads (`train_arms`), and the theorem's counterexample
verified in float64 (`counterexample`). The sizes `z` are the claim's `OrthogonalHeadsSizes`
(read by attribute).
"""

from __future__ import annotations

import jax
import numpy as np

import analysis
import transformer
from experiments import data as data_lib
from experiments import models
from experiments.lab import optimizers as O
from experiments.lab import tuning
from experiments.train import on_budget, train_many

REDUNDANCY = ("max_cos", "max_cos_k", "max_cos_v", "max_cos_o", "pattern_similarity",
              "n_prunable", "prunable_fraction", "base_loss")


def model_config(model: str, n_heads: int) -> transformer.Config:
  r"""The recipe `model`'s shape with `n_heads` query heads, its family's grouping kept.

  .. math:: K = H / g, \qquad g = H_\text{recipe} / K_\text{recipe}

  GPT recipes give every query head its own key/value head (`g = 1`, so `K = H`, the shape
  every earlier run of this claim trained); Llama recipes serve `g = 2` query heads per
  key/value head, and so does the claim's model: query head `h` reads key/value head `h // g`.
  `d_head = d_model / H` is derived again; Llama's `d_ff = 3 d`, RMSNorm, RoPE and SwiGLU are
  kept.

  Args:
    model: a key of `experiments.models.RECIPES`.
    n_heads: query heads `H`; a multiple of the recipe's `g`.

  Returns:
    The `transformer.Config` every arm of the run trains from scratch.

  Example:
    >>> from experiments.lab.heads_training import model_config
    >>> cfg = model_config("llama-small", 8)
    >>> cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff, cfg.activation
    (8, 4, 16, 384, 'swiglu')
    >>> model_config("small", 8).n_kv_heads
    8
  """
  base = models.RECIPES[model].cfg
  g = base.kv_groups
  if n_heads % g:
    raise ValueError(f"orthogonal-heads: n_heads={n_heads} does not split into the {g} query "
                     f"heads per key/value head of `{model}`. Fix: a multiple of {g}.")
  return base.replace(n_heads=n_heads, n_kv_heads=n_heads // g)


def orth_arm(cfg: transformer.Config, strength: float) -> O.MakeTx:
  """The `orth` arm on `cfg`: the pull splits `w_q`, `w_o` into `H` heads, `w_k`, `w_v` into `K`."""
  return O.orthogonal_heads_arm(strength=strength, n_heads=cfg.n_heads,
                                n_kv_heads=cfg.n_kv_heads)


def muon_per_head_arm(cfg: transformer.Config) -> O.MakeTx:
  """The `muon-per-head` arm on `cfg`: `w_q`, `w_o` per query head, `w_k`, `w_v` per KV head."""
  return O.muon_arm(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads)


def choose_strength(tuned_by_strength: dict, adamw_loss: float, margin: float) -> float:
  """The largest strength whose tuned loss is within `margin` of AdamW's; else the smallest.

  `tuned_by_strength` maps `λ` to its `tune_on_seeds` record, or to None when every rate
  diverged (never chosen unless no strength tuned at all).

  Example:
    >>> from experiments.lab.heads_training import choose_strength
    >>> rec = lambda loss: {"losses": [loss], "index": 0}
    >>> choose_strength({0.05: rec(2.50), 0.5: rec(2.51), 5.0: rec(2.60)}, 2.50, 0.02)
    0.5
    >>> choose_strength({0.05: rec(2.60), 0.5: None}, 2.50, 0.02)
    0.05
  """
  ok = [s for s, t in tuned_by_strength.items()
        if t is not None and t["losses"][t["index"]] <= adamw_loss + margin]
  if ok:
    return max(ok)
  tuned = [s for s, t in tuned_by_strength.items() if t is not None]
  if not tuned:
    raise ValueError("choose_strength: every strength diverged at every rate. Fix: lower the "
                     "strengths.")
  return min(tuned)


def tune_arms(cfg: transformer.Config, arms: dict, z, *, seeds, margin: float, kw: dict,
              log=print) -> tuple[dict, dict, float]:
  """Every arm's peak rate and the `orth` strength, tuned on `seeds` (or `z.grid[0]` untuned).

  With `z.tune`, each arm of `arms` and `orth_arm(cfg, λ)` for every `λ` of `z.strengths` is
  tuned on `z.grid` (`tuning.tune_on_seeds`, `z.steps` steps, extended by `z.extend`); `λ` is
  then `choose_strength(…, margin)` against AdamW's tuned loss. Without it every arm runs at
  `z.grid[0]` and `λ = z.quick_strength`.

  Args:
    cfg: the model every arm trains.
    arms: `{name: make_tx}` of the arms other than `orth` (`adamw` among them).
    z: the claim's sizes.
    seeds: the tuning seeds.
    margin: the loss tolerance (nats) `choose_strength` allows the pull.
    kw: `data`, `batch_size`, `seq_len`, `eval_batches` of every run.
    log: progress lines.

  Returns:
    `(tuned, by_strength, strength)`: `{arm: tune record}` with `orth` last, `{λ: tune record
    or None}` (empty untuned), and the chosen `λ`.
  """
  tuned, by_strength = {}, {}
  if not z.tune:
    return ({name: tuning.untuned(z.grid[0]) for name in (*arms, "orth")}, by_strength,
            z.quick_strength)
  tune = lambda make_tx: tuning.tune_on_seeds(cfg, make_tx, z.grid, seeds=seeds, steps=z.steps,
                                              extend=z.extend, **kw)
  for name in arms:
    log(f"  orthogonal-heads: tuning {name} (seeds {seeds})")
    tuned[name] = tune(arms[name])

  def tune_strength(s):
    log(f"  orthogonal-heads: tuning orth λ = {s:g} (seeds {seeds})")
    try:
      by_strength[s] = tune(orth_arm(cfg, s))
    except ValueError:  # every rate diverged: this strength cannot be chosen
      by_strength[s] = None

  for s in z.strengths:
    tune_strength(s)
  adamw_loss = tuned["adamw"]["losses"][tuned["adamw"]["index"]]
  choose = lambda: choose_strength(by_strength, adamw_loss, margin)
  for _ in range(getattr(z, "extend_strength", 0)):
    beyond = strength_beyond_edge(sorted(by_strength), choose())
    if beyond is None:
      break
    tune_strength(beyond)
  strength = choose()
  tuned["orth"] = by_strength[strength]
  by_strength = dict(sorted(by_strength.items()))
  return tuned, by_strength, strength


def strength_beyond_edge(strengths, chosen: float) -> float | None:
  """The edge rule for `λ`: one step of the grid's ratio beyond the edge `chosen` sits on, or
  None when it is inside the grid (so every chosen strength is bracketed by tuned ones).

  Example:
    >>> from experiments.lab.heads_training import strength_beyond_edge
    >>> [strength_beyond_edge((0.05, 0.5, 5.0), c) for c in (0.05, 0.5, 5.0)]
    [0.005, None, 50.0]
  """
  grid = sorted(strengths)
  if len(grid) < 2 or grid[0] < chosen < grid[-1]:
    return None
  q = grid[1] / grid[0]
  return float(f"{grid[0] / q if chosen == grid[0] else grid[-1] * q:.6g}")


def train_arms(cfg: transformer.Config, arms: dict, tuned: dict, z, *, seeds, kw: dict,
               log=print, strength_at_edge: bool = False) -> dict:
  """Trains `adamw`, `orth`, `muon-per-head` on `seeds` at their tuned rates; reads redundancy.

  Each arm's seeds train as one program (`train_many`, `z.steps` steps on the budget
  schedule) and is evaluated on `z.split` (`val` when the sizes name none; `test` for a
  verdict); each seed's heads are then measured by `analysis.redundancy_summary` on
  `z.probe_batch` windows of that split of the `stdlib` corpus.

  Returns:
    `{arm: {seed: metrics}}`: the final validation loss, whether the run ended diverged or
    recovered from a spike, its rate and whether it sits at an edge of its grid
    (`rate_at_grid_edge`), the `REDUNDANCY` metrics, and the controls' `rates_at_grid_edge`
    (AdamW's and orth's tuned rates at an edge), `strength_at_grid_edge` (the chosen `λ` at an
    edge of its grid) and `any_ended_diverged` (this arm's or AdamW's run of the seed).
  """
  N, split = z.steps, getattr(z, "split", "val")
  src = data_lib.text_source("stdlib", z.seq_len)
  at_edge = float(tuned["adamw"]["at_edge"] + tuned["orth"]["at_edge"])
  runs: dict = {}
  for name in ("adamw", "orth", "muon-per-head"):
    log(f"  orthogonal-heads: {name} at {tuned[name]['learning_rate']:g} on seeds {seeds}")
    r = train_many(cfg, on_budget(arms[name], N), seeds=seeds,
                   learning_rates=(tuned[name]["learning_rate"],), steps=N, eval_every=N,
                   eval_split=split, **kw)
    final = r.val_loss[0, :, -1]
    ended = tuning.ended_diverged(final, cfg.vocab_size)
    runs[name] = {}
    for i, seed in enumerate(seeds):
      params = jax.tree.map(lambda x, i=i: x[0, i], r.params)
      probe = src.batch(seed, 0, z.probe_batch, split).tokens
      red = analysis.redundancy_summary(params, cfg, probe)
      runs[name][seed] = {"val_loss": float(final[i]), "ended_diverged": float(ended[i]),
                          "spiked": float(r.diverged[0, i] and not ended[i]),
                          "learning_rate": tuned[name]["learning_rate"],
                          "rate_at_grid_edge": float(tuned[name]["at_edge"]),
                          **{k: float(red[k]) for k in REDUNDANCY if k in red}}
    runs[name] = {s: {**m, "rates_at_grid_edge": at_edge,
                      "strength_at_grid_edge": float(strength_at_edge),
                      "any_ended_diverged": float(m["ended_diverged"]
                                                  or runs["adamw"][s]["ended_diverged"])}
                  for s, m in runs[name].items()}
  return runs


def counterexample(seed: int, *, T: int = 16, scale: float = 3.0) -> dict[str, float]:
  r"""The `orthogonal-heads` theorem's construction, verified in float64 on a random stream.

  Two heads of width 2 in `R^8`: head 0 reads queries through `(e_i + e_{i+2})/√2` and keys
  through `(e_i + e_{i+4})/√2`, head 1 through `(e_i − e_{i+2})/√2` and `(e_i − e_{i+4})/√2`
  (`i = 1, 2`). Their `W_Q` (and `W_K`) column spaces are orthogonal, yet on a stream in
  `span(e_1, e_2)` both heads compute the same scores:

  .. math:: x W_Q^0 = x W_Q^1 = x_{1:2}/\sqrt2 \quad (x_{3:8} = 0)

  Args:
    seed: draws the `T` stream vectors (`scale · N(0, 1)` in their first two coordinates).
    T: positions of the stream.
    scale: the stream's scale.

  Returns:
    `max_cos_q`, `max_cos_k`: the largest principal cosine between the heads' `W_Q` (`W_K`)
    column spaces (0 exactly: orthogonal); `score_gap`: `max |S⁰ − S¹|` over the causal
    scores `S^h = (X W_Q^h)(X W_K^h)ᵀ / √2`, relative to `max |S⁰|` (0 exactly); `identical`:
    1.0 when all three are 0 to float64 rounding (`≤ 1e-12`), the counterexample verified.

  Example:
    >>> from experiments.lab.heads_training import counterexample
    >>> counterexample(0)["identical"]
    1.0
  """
  e = np.eye(8)
  w_q = [np.stack([e[0] + e[2], e[1] + e[3]], 1), np.stack([e[0] - e[2], e[1] - e[3]], 1)]
  w_k = [np.stack([e[0] + e[4], e[1] + e[5]], 1), np.stack([e[0] - e[4], e[1] - e[5]], 1)]
  w_q, w_k = [w / np.sqrt(2) for w in w_q], [w / np.sqrt(2) for w in w_k]
  x = np.zeros((T, 8))
  x[:, :2] = scale * np.random.default_rng(seed).standard_normal((T, 2))
  causal = np.tril(np.ones((T, T), bool))
  scores = [np.where(causal, (x @ q) @ (x @ k).T / np.sqrt(2), 0.0)
            for q, k in zip(w_q, w_k, strict=True)]

  def max_cos(a, b):  # principal cosines: singular values of Q_aᵀ Q_b
    return float(np.linalg.svd(np.linalg.qr(a)[0].T @ np.linalg.qr(b)[0], compute_uv=False).max())

  out = {"max_cos_q": max_cos(*w_q), "max_cos_k": max_cos(*w_k),
         "score_gap": float(np.abs(scores[0] - scores[1]).max() / np.abs(scores[0]).max())}
  out["identical"] = float(max(out.values()) <= 1e-12)
  return out
