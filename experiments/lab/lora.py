"""LoRA fine-tuning, measured: the texts, the arms, one program per arm, the update's spectra.

The bench of the `lora` claim (`experiments.claims.lora`, whose docstring states the protocol).
`held_out_text` is the new text (IDLE's `.txt` documents, in no shared model's corpus) and
`in_domain_text` the held-out standard-library files, each cut into fine-tune, tune and test
parts. `train_arm` fine-tunes one arm (`full`, or a LoRA arm of `ARMS`) from one base model per
seed, the seeds together as one program (`seed_indexed`); `tune_rates` picks each arm's peak rate
on a grid with the tuning seed, `measure` trains the reported seeds and reads every metric:
the test loss (`text_loss`), the stable rank and top-4 energy of full fine-tuning's `ΔW`
(`update_spectra`) and its top-4 overlap with LoRA's (`subspace_overlap`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

import analysis
import transformer
from experiments import data
from experiments.lab import edge
from experiments.train import sweep
from transformer import lora

ARMS = {"lora-qv-r4": (4, ("w_q", "w_v")), "lora-qv-r16": (16, ("w_q", "w_v")),
        "lora-all-r16": (16, lora.ALL_HIDDEN)}
HIDDEN = {"w_q": "attn", "w_k": "attn", "w_v": "attn", "w_o": "attn", "w_1": "ffn",
          "w_2": "ffn", "w_gate": "ffn"}
# Test and tuning parts of the in-domain text, as fractions of the held-out files' bytes: about
# 85 kB each, which bounds the cost of evaluating them (`text_loss` reads all of a part).
IN_DOMAIN_TEST = IN_DOMAIN_TUNE = 0.04


def held_out_text() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
  """`(fine-tune, tune, test)` byte arrays of IDLE's `.txt` documents (80/10/10%) and the files.

  None of them is a `.py` file, so none is in the shared models' training corpus. They ship in
  the `stdlib` corpus's pinned archive (Python 3.11.7's `idlelib/*.txt`; `experiments.data.pinned`).
  """
  prefix = data.STDLIB_ARCHIVE + "/idlelib/"
  files = [f for f in data.archive_texts(data.STDLIB_ARCHIVE)
           if f.startswith(prefix) and f.endswith(".txt") and "/" not in f[len(prefix):]]
  raw = data.read_files(files)
  a, b = int(0.8 * len(raw)), int(0.9 * len(raw))
  return raw[:a], raw[a:b], raw[b:], files


def in_domain_text(split: str = "heldout") -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                    dict[str, tuple[str, ...]]]:
  """`(fine-tune, tune, test)` bytes of held-out standard-library `.py` files, and the files.

  The files are the `stdlib` corpus's held-out files (`val` and `test` of
  `data.load_corpus("stdlib")`, the split every shared model trains with: no shared model has
  trained on them), each pool in the order of a hash of the files' names. The test part is
  the first files holding at least `IN_DOMAIN_TEST` of the held-out bytes, the tuning part the
  next ones holding at least `IN_DOMAIN_TUNE` more, the fine-tuning text the rest; each part is
  its files' bytes in sorted order, so the parts share no file. With `split="heldout"` (v1-v3)
  one pool holds every held-out file; with `split="test"` (v4) the test part comes from the
  corpus's `test` files and the tuning and fine-tuning parts from its `val` files only (the
  rest of the `test` files are not read), so no rate is tuned on, and nothing trains on, test.

  Returns:
    `(ft, tune, test, files)` with `files = {"fine-tune", "tune", "test": files}`.
  """
  if split not in ("heldout", "test"):
    raise ValueError(f"in_domain_text: split={split!r}. Fix: 'heldout' (v1-v3) or 'test'.")
  corpus = data.load_corpus("stdlib")
  held = tuple(sorted(corpus.val_files + corpus.test_files))
  if not held:
    raise FileNotFoundError("lora claim: the stdlib corpus has no validation files to adapt on.")
  root = os.path.commonpath(data.stdlib_files())
  sizes = {f: data.file_size(f) for f in held}
  total = sum(sizes.values())

  def order(files):
    return sorted(files, key=lambda f: (zlib.crc32(f"lora/{os.path.relpath(f, root)}".encode()), f))

  def take(files, budget):  # the first files while the bytes before each are under `budget`
    seen, n = 0, 0
    while n < len(files) and seen < budget:
      seen, n = seen + sizes[files[n]], n + 1
    return files[:n], files[n:], seen

  if split == "heldout":
    test, rest, seen = take(order(held), IN_DOMAIN_TEST * total)
    tune, ft, _ = take(rest, (IN_DOMAIN_TEST + IN_DOMAIN_TUNE) * total - seen)
  else:
    test = take(order(corpus.test_files), IN_DOMAIN_TEST * total)[0]
    tune, ft, _ = take(order(corpus.val_files), IN_DOMAIN_TUNE * total)
  files = {"test": tuple(sorted(test)), "tune": tuple(sorted(tune)),
           "fine-tune": tuple(sorted(ft))}
  ft, tune, test = (data.read_files(files[k]) for k in ("fine-tune", "tune", "test"))
  return ft, tune, test, files


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
  return transformer.next_token_loss(logits, tokens_BT1)


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
    >>> from experiments.lab.lora import subspace_overlap
    >>> a = np.random.default_rng(0).normal(size=(8, 6))
    >>> [round(x, 6) for x in subspace_overlap(a, 3 * a, 2)]
    [1.0, 1.0]
  """
  ua, _, vta = np.linalg.svd(np.asarray(a_IO, np.float64), full_matrices=False)
  ub, _, vtb = np.linalg.svd(np.asarray(b_IO, np.float64), full_matrices=False)
  left = np.linalg.norm(ua[:, :k].T @ ub[:, :k]) ** 2 / k
  right = np.linalg.norm(vta[:k] @ vtb[:k].T) ** 2 / k
  return float(left), float(right)


def seed_indexed(seeds, per_seed):
  """`init_fn(key)` for `train_many` that starts run `i` from `per_seed[i]`'s leaves.

  `train_many` calls `init_fn(jax.random.key(seed))` for each seed, vmapped; the seed's index
  is recovered by comparing the key's data with each seed's key, so that runs of different
  seeds can start from different base models and still train as one program.

  Args:
    seeds: the seeds passed to `train_many`, in order.
    per_seed: one pytree per seed (same structure and shapes).

  Returns:
    `init_fn(key) -> (index, leaves)`: the traced index and the selected leaves.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from experiments.lab.lora import seed_indexed
    >>> f = seed_indexed((3, 7), [jnp.zeros(2), jnp.ones(2)])
    >>> f(jax.random.key(7))[1].tolist()
    [1.0, 1.0]
  """
  ids = jnp.stack([jax.random.key_data(jax.random.key(int(s))) for s in seeds])
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *per_seed)

  def init_fn(key):
    i = jnp.argmax(jnp.all(ids == jax.random.key_data(key)[None], axis=-1))
    return i, jax.tree.map(lambda x: x[i], stacked)

  return init_fn


def train_arm(bases, cfg, src, seeds, lrs, arm: str, *, steps, batch_size,
              seq_len) -> sweep.ManyResult:
  """One arm on `len(lrs) × len(seeds)` runs as one program; run `j` fine-tunes `bases[j]`.

  `full` trains every parameter of its base. A LoRA arm trains `{"base", "adapters"}` with the
  base behind `stop_gradient` (zero gradients, so Adam leaves it exactly where it was) and
  the model reads `lora.merge(base, adapters)`; `result.params` are the merged params.
  """
  pick = seed_indexed(seeds, bases)
  if arm == "full":
    init_fn, params_fn = (lambda key: pick(key)[1]), None
  else:
    rank, targets = ARMS[arm]

    def init_fn(key):
      base = pick(key)[1]
      return {"base": base, "adapters": lora.init(base, rank, key, targets)}

    def params_fn(trained):
      return lora.merge(jax.lax.stop_gradient(trained["base"]), trained["adapters"],
                        float(rank))
  return sweep.train_many(cfg, make_tx(steps), seeds=seeds, learning_rates=lrs, steps=steps,
                          data=src, batch_size=batch_size, seq_len=seq_len, params_fn=params_fn,
                          init_fn=init_fn, eval_every=steps, eval_batches=0)


def check_ranks(cfg: transformer.Config, arms, model: str) -> None:
  """Raises `ValueError` when an arm's rank exceeds `min(D_in, D_out)` of one of its targets.

  The claim's `run` calls it before anything trains, so a size too narrow for an arm fails at
  once, naming the arm and `LoraSizes.model`, instead of after the tuning of the arms before it.
  No arm is dropped silently: the thresholds read `lora-qv-r4` and `lora-all-r16` at every
  size. Every GPT size of the scale axis fits every arm (`micro`: every hidden matrix has both
  sides ≥ 32).

  Example:
    >>> import transformer
    >>> from experiments.lab.lora import check_ranks
    >>> narrow = transformer.Config(vocab_size=256, d_model=8, n_layers=1, n_heads=2)
    >>> check_ranks(narrow, ("lora-qv-r4",), "narrow")
    >>> check_ranks(narrow, ("lora-all-r16",), "narrow")
    Traceback (most recent call last):
    ...
    ValueError: lora: arm 'lora-all-r16' has rank 16, above min(D_in, D_out) = 8 of w_q ...
  """
  blocks = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))["blocks"]
  for arm in arms:
    rank, targets = ARMS[arm]
    for name in targets:
      if name not in blocks[HIDDEN[name]]:  # `w_gate` of `ALL_HIDDEN` in a model without one
        continue
      d_in, d_out = blocks[HIDDEN[name]][name].shape[-2:]
      if rank > min(d_in, d_out):
        raise ValueError(f"lora: arm {arm!r} has rank {rank}, above min(D_in, D_out) = "
                         f"{min(d_in, d_out)} of {name} ({d_in}, {d_out}) at "
                         f"LoraSizes.model={model!r}. Fix: a wider model (every GPT size from "
                         "`micro` up fits every arm); the arms' ranks are frozen in `ARMS`.")


def trainable_fraction(cfg: transformer.Config, arm: str) -> float:
  """Trained parameters of `arm` as a fraction of the hidden (block) matrices' parameters."""
  base = jax.eval_shape(lambda: transformer.init(cfg, jax.random.key(0)))
  blocks = base["blocks"]
  hidden = sum(int(np.prod(blocks[sub][n].shape)) for n, sub in HIDDEN.items()
               if n in blocks[sub])
  if arm == "full":
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(base)) / hidden
  rank, targets = ARMS[arm]
  adapters = jax.eval_shape(lambda: lora.init(base, rank, jax.random.key(0), targets))
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(adapters)) / hidden


def tune_rates(bases, cfg, arms, z, log, text=None, *, grid, tune_seeds) -> dict:
  """Each arm's peak rate on `grid`: the lowest tuning-text loss, on the tuning seeds only.

  `bases` are the tuning seeds' base models, one per seed of `tune_seeds` (v1-v3: one seed);
  each seed fine-tunes its own base on its own batches, and a rate's loss is the mean over the
  seeds (`losses_by_seed` keeps each; a rate non-finite on any seed is out of the choice).
  The registered edge rule: when an arm's best rate is the first or last of its grid, the grid
  is extended by one step of its ratio beyond that edge and the new rate run, up to
  `z.extend` times (`getattr`, 0 when the sizes have no `extend`); `at_edge` is whether the
  best rate still sits at an edge of the extended grid (the claim's control then fails).
  Each arm's record is the one tuning record (`edge.Tuned.to_dict()`) with the base models'
  mean tuning-text loss, `base_tune_loss`: a rate whose loss ends above it lost more than it
  learned. A run that `train_many` flagged but ended finite is a spike, recorded apart.

  The loss is `text_loss` on the tuning part, the same measure as the reported test loss. `z`
  is the claim's sizes (`tune`, `fixed_rate`, `steps`, `batch_size`, `seq_len`). `text` is
  the setting's `(fine-tune, tune, test)` bytes (default: `held_out_text`, the primary's).
  """
  if not z.tune:
    return {arm: edge.untuned(z.fixed_rate).to_dict() for arm in arms}
  bases, tune_seeds = list(bases), tuple(int(s) for s in tune_seeds)
  ft, tune, _ = held_out_text()[:3] if text is None else text
  src = data.TextSource(data.Corpus(ft, tune, (), ()), z.seq_len)
  base_tune = float(np.mean([text_loss(b, cfg, tune, z.seq_len) for b in bases]))
  n = len(tune_seeds)

  out = {}
  for arm in arms:
    by_rate: dict[float, np.ndarray] = {}
    flagged: dict[float, bool] = {}
    search = edge.Search(grid, extend=getattr(z, "extend", 0), name="tune_rates")
    for rates in search:
      r = train_arm(bases, cfg, src, tune_seeds, rates, arm, steps=z.steps,
                    batch_size=z.batch_size, seq_len=z.seq_len)
      for k, lr in enumerate(rates):
        by_rate[lr] = np.array([text_loss(jax.tree.map(lambda x, k=k, j=j: x[k, j], r.params),
                                          cfg, tune, z.seq_len) for j in range(n)])
        flagged[lr] = bool(np.any(r.diverged[k, :n]))
      search.record([float(by_rate[lr].mean()) for lr in rates],
                    [not np.all(np.isfinite(by_rate[lr])) for lr in rates])
    t = search.tuned()
    record = edge.on_one_seed(t, tune_seeds[0], flagged) if n == 1 else dataclasses.replace(
        t, seeds=tune_seeds, losses=tuple(float(v) for v in t.losses),
        losses_by_seed=tuple(tuple(float(v) for v in by_rate[g]) for g in t.grid),
        spiked=tuple(flagged[g] and not b for g, b in zip(t.grid, t.excluded, strict=True))
    ).to_dict()
    out[arm] = {**record, "base_tune_loss": base_tune}
    log(f"    tuned {arm} (seeds {list(tune_seeds)}): lr {t.learning_rate:g}, tuning-text loss "
        + ", ".join(f"{g:g}: {v:.4f}" for g, v in zip(t.grid, t.losses, strict=True))
        + f" (base {base_tune:.4f})")
  return out


def update_rank_excess(adapters) -> float:
  """How far LoRA's update exceeds its rank: the largest `rank(A_l B_l) − R` over targets and
  layers, the rank of each product computed in float64 (`numpy.linalg.matrix_rank`).

  `ΔW = (alpha / R) A B` with `A: (D_in, R)`, `B: (R, D_out)` has rank at most `R` (a product's
  rank is at most its inner dimension), so this is at most 0 for any adapters.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.lora import update_rank_excess
    >>> rng = np.random.default_rng(0)
    >>> ab = {"A": rng.normal(size=(2, 8, 3)), "B": rng.normal(size=(2, 3, 8))}
    >>> update_rank_excess({"w_q": ab})
    0.0
  """
  out = -np.inf
  for ab in adapters.values():
    a = np.asarray(ab["A"], np.float64)
    b = np.asarray(ab["B"], np.float64)
    for a_IR, b_RO in zip(a, b, strict=True):
      out = max(out, float(np.linalg.matrix_rank(a_IR @ b_RO) - a.shape[-1]))
  return out


def measure(bases, cfg, seeds, rates: dict, z, log, text=None, arms=None) -> dict:
  """Every arm's metrics at every seed (see the `lora` claim's docstring), arm by arm.

  `rates` are `tune_rates`' and `z` the claim's sizes (`arms`, `steps`, `batch_size`, `seq_len`).
  `text` is the setting's `(fine-tune, tune, test)` bytes (default: `held_out_text`, the
  primary's) and `arms` its LoRA arms (default: `z.arms`; `lora-qv-r4` must be among them).
  """
  ft, tune, test = held_out_text()[:3] if text is None else text
  arms = z.arms if arms is None else tuple(arms)
  src = data.TextSource(data.Corpus(ft, tune, (), ()), z.seq_len)
  base_test = [text_loss(b, cfg, test, z.seq_len) for b in bases]
  runs = {"base": {s: {"test_loss": base_test[j]} for j, s in enumerate(seeds)}}
  tuned = {}
  for arm in ("full", *arms):
    lr = rates[arm]["learning_rate"]
    r = train_arm(bases, cfg, src, seeds, (lr,), arm, steps=z.steps, batch_size=z.batch_size,
                  seq_len=z.seq_len)
    runs[arm] = {}
    for j, seed in enumerate(seeds):
      params = jax.tree.map(lambda x, j=j: x[0, j], r.params)
      tuned[arm, seed] = params
      loss = text_loss(params, cfg, test, z.seq_len)
      ended = not np.isfinite(loss) or loss > base_test[j]
      runs[arm][seed] = {"test_loss": loss, "gain": base_test[j] - loss, "learning_rate": lr,
                         "edge_lr": float(rates[arm]["at_edge"]), "diverged": float(ended),
                         "spiked": float(bool(r.diverged[0, j]) and not ended)}
      if arm != "full":  # the update's rank, from the trained adapters in float64
        runs[arm][seed]["dW_rank_excess"] = update_rank_excess(
            jax.tree.map(lambda x, j=j: x[0, j], r.trained["adapters"]))
    log(f"    {arm} at lr {lr:g}: test loss " + ", ".join(
        f"{runs[arm][s]['test_loss']:.4f}" for s in seeds))
  for arm in ("full", *arms):
    for seed in seeds:
      runs[arm][seed]["excess_over_full"] = (runs[arm][seed]["test_loss"]
                                             / runs["full"][seed]["test_loss"] - 1)
  for j, seed in enumerate(seeds):
    base = bases[j]
    spectra = update_spectra(base, tuned["full", seed])
    frac = np.concatenate([np.asarray(analysis.stable_rank(jnp.asarray(s))) / s.shape[-1]
                           for s in spectra.values()])
    energy4 = np.concatenate([(s[:, :4] ** 2).sum(-1) / (s ** 2).sum(-1)
                              for s in spectra.values()])
    runs["full"][seed].update({"dW_stable_rank_frac": float(frac.mean()),
                               "dW_stable_rank_frac_max": float(frac.max()),
                               "dW_top4_energy": float(energy4.mean())})
    for name in ("w_q", "w_v"):
      w0 = np.asarray(base["blocks"]["attn"][name], np.float64)
      full_d = np.asarray(tuned["full", seed]["blocks"]["attn"][name], np.float64) - w0
      lora_d = np.asarray(tuned["lora-qv-r4", seed]["blocks"]["attn"][name], np.float64) - w0
      ov = [subspace_overlap(full_d[l], lora_d[l], 4) for l in range(cfg.n_layers)]
      runs["lora-qv-r4"][seed][f"overlap_{name}_in"] = float(np.mean([o[0] for o in ov]))
      runs["lora-qv-r4"][seed][f"overlap_{name}_out"] = float(np.mean([o[1] for o in ov]))
    runs["lora-qv-r4"][seed]["overlap_random"] = 4 / cfg.d_model
  return runs
