"""Many small training runs at once: seeds × learning rates, jitted, each a pure function.

    result = train_many(cfg, make_tx, seeds=(0, 1, 2), learning_rates=(1e-3, 3e-3),
                        steps=400, data="stdlib", batch_size=16, seq_len=64, eval_every=50)

Each run is what `experiments.train.train` would do with that seed and peak learning rate
(same init `key(seed)`, same batches — a pure function of `(seed, step)` — same loss and
optimizer), but all of them advance together, `eval_every` steps per call inside a
`lax.fori_loop`, in memory, no checkpoints. The learning rate is a traced value injected with
`optax.inject_hyperparams`, so the whole sweep compiles once per shape. How the runs share the
machine is the `strategy` (`choose_strategy` picks the fastest measured: on CPU one unbatched
program per run, all in flight at once; on an accelerator one `jax.vmap` over learning rates
of one `jax.vmap` over seeds); runs share no arithmetic, so a run's losses do not depend on
the strategy or on which other runs trained beside it. A run whose loss becomes non-finite
(or worse than 1.5 × uniform guessing) is flagged in `diverged`.

`python -m experiments.benchmarks.sweep` measures every strategy at three sizes and 1, 5 and
20 runs; `python -m experiments.benchmarks.multirun` times 3 seeds × 2 rates of `tiny`
against `experiments.train.train` called six times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import transformer
from experiments import data as data_lib
from experiments.train.step import OPTIMIZERS, TrainState, loss_fn, schedule, train_step

DIVERGENCE_FACTOR = 1.5  # a loss above this × ln(vocab) is worse than guessing: diverged
Strategy = Literal["auto", "vmap", "sequential", "dispatch"]
STRATEGIES = ("vmap", "sequential", "dispatch")
UNROLL_LAYERS = 4  # models this shallow run their layer scan unrolled (`Transformer.scan_unroll`)


class ManyResult(NamedTuple):
  """What `train_many` returns; run axes lead every array: `(n_lr, n_seeds, ...)`.

  Attributes:
    loss: `(n_lr, n_seeds, n_evals)` mean training loss over the steps since the last eval
      (with `eval_every=1`, the loss of each step's batch, as `train` logs it).
    val_loss: `(n_lr, n_seeds, n_evals)` mean loss on `eval_batches` validation batches (NaN
      when `eval_batches=0`).
    steps: `(n_evals,)` the step after which each evaluation was made.
    params: the final model params (after `params_fn`), leading axes `(n_lr, n_seeds)`.
    trained: the final trained leaves (the same object as `params` without `params_fn`).
    diverged: `(n_lr, n_seeds)` bool.
    seeds: the seeds, in order.
    learning_rates: the peak rates, in order (`(nan,)` when none was swept).
  """

  loss: np.ndarray
  val_loss: np.ndarray
  steps: np.ndarray
  params: Any
  trained: Any
  diverged: np.ndarray
  seeds: tuple[int, ...]
  learning_rates: tuple[float, ...]


def train_like(tc) -> Callable[..., optax.GradientTransformation]:
  """`make_tx(learning_rate)` that rebuilds `experiments.train.optimizer(tc)` at any peak rate.

  The warm-up + cosine schedule is linear in its peak, so the schedule at rate `η` is `η` times
  the schedule at rate 1; global-norm clipping comes first, as in `train`.

  Args:
    tc: an `experiments.train.TrainConfig` (its `learning_rate` is ignored).

  Returns:
    `make_tx(learning_rate) -> optax.GradientTransformation`, for `train_many`.

  Example:
    >>> from experiments import train
    >>> tx = train.train_like(train.TrainConfig(steps=20))(learning_rate=3e-3)
  """
  unit = schedule(tc.replace(learning_rate=1.0))

  def make_tx(learning_rate):
    tx = OPTIMIZERS[tc.optimizer](tc, lambda count: learning_rate * unit(count))
    return optax.chain(optax.clip_by_global_norm(tc.grad_clip), tx) if tc.grad_clip else tx

  return make_tx


def _source(data, seq_len: int):
  return data if hasattr(data, "batch") else data_lib.source(data, seq_len)


def _batches(src, seeds, steps: Sequence[int], batch_size: int, split: str):
  """`(len(steps), n_seeds, B, T+1)` tokens and `(len(steps), n_seeds, B, T)` weights."""
  rows = [[src.batch(seed, s, batch_size, split) for seed in seeds] for s in steps]
  return (np.stack([[b.tokens for b in r] for r in rows]),
          np.stack([[b.weights for b in r] for r in rows]))


def choose_strategy(n_runs: int, backend: str | None = None) -> str:
  """The strategy `train_many` uses for `n_runs` runs on `backend` (`strategy="auto"`).

  On XLA:CPU, one unbatched program per run, every call in flight at once (`"dispatch"`).
  `python -m experiments.benchmarks.sweep --sizes micro-20,mini-20 --runs 5,20 --steps 5,20
  --rounds 3` on 2 quiet CPU cores (load 0.7-1.7; float32 matmul ceiling 211 GFLOP/s) gave
  dispatch 1.52×, 1.64×, 1.34× and 1.47× the run-steps/s of the vmapped sweep as it was before
  issue 50 (micro-20 at 5 and 20 runs, mini-20 at 5 and 20; sequential 1.59×, 1.59×, 1.24×,
  1.33×; vmap with the layer scan unrolled 1.12×, 1.34×, 1.06×, 1.33×), at 29.8, 24.5, 47.1
  and 47.1 CPU-ms per run-step against 48.7, 45.7, 64.7 and 70.7: a vmapped step pays for
  batched small matmuls and a working set that outgrows the cache. Elsewhere (GPU, TPU), one
  vmapped program fills the device: `"vmap"`.

  Example:
    >>> from experiments.train.sweep import choose_strategy
    >>> choose_strategy(20, "cpu"), choose_strategy(20, "gpu")
    ('dispatch', 'vmap')
  """
  del n_runs  # the same choice at 5 and 20 runs; the argument keeps the rule's shape
  return "dispatch" if (backend or jax.default_backend()) == "cpu" else "vmap"


def _stack(trees, shape):
  """Per-run pytrees (runs in row-major `shape` order) as one pytree with leading `shape`."""
  return jax.tree.map(lambda *xs: jnp.stack(xs).reshape(*shape, *xs[0].shape), *trees)


def train_many(cfg: transformer.Config, make_tx: Callable[..., optax.GradientTransformation], *,
               seeds: Sequence[int], learning_rates: Sequence[float] | None = None, steps: int,
               data, batch_size: int, seq_len: int, params_fn: Callable | None = None,
               aux_loss: Callable | None = None, eval_every: int,
               callback: Callable | None = None, init_fn: Callable | None = None,
               eval_batches: int = 4, strategy: Strategy = "auto",
               scan_unroll: int | None = None, eval_split: str = "val") -> ManyResult:
  """Trains `len(learning_rates) × len(seeds)` models, each a pure function of its seed and rate.

  .. math:: \\theta^{(\\eta, s)}_{k+1} = \\theta^{(\\eta, s)}_k
     + \\mathrm{tx}_\\eta\\big(\\nabla \\mathcal L(\\theta_k; \\text{batch}(s, k+1))\\big)

  Args:
    cfg: the model.
    make_tx: `make_tx(learning_rate=η) -> optax.GradientTransformation` (η is a traced scalar,
      injected with `optax.inject_hyperparams`); with `learning_rates=None`, `make_tx()` takes
      no argument. `train_like(tc)` reproduces `experiments.train`'s optimizer.
    seeds: init key `jax.random.key(seed)` and batch stream of each run.
    learning_rates: peak rates to sweep, or None for the single optimizer `make_tx()`.
    steps: optimizer steps per run (batches `1 … steps`, as in `train`).
    data: a data spec (`"stdlib"`, a path, `"task:NAME"`) or a source with `.batch(seed, step,
      batch_size, split)`.
    batch_size: sequences per step.
    seq_len: tokens per text sequence.
    params_fn: maps the trained leaves to the model's params (e.g. base + LoRA factors);
      default: the trained leaves are the params.
    aux_loss: `aux_loss(params, intermediates) -> scalar` added to the loss (the model's sown
      `intermediates` of the step's batch); the logged `loss` stays the cross-entropy.
    eval_every: steps between evaluations (the last step is always evaluated).
    callback: `callback(step, params, intermediates)` after each evaluation, with the params
      and the intermediates of the first validation batch, leading axes `(n_lr, n_seeds)`.
    init_fn: `init_fn(key) -> trained leaves`; default: the model's init, as `train` does.
    eval_batches: validation batches per evaluation (0: none).
    strategy: how the runs share the machine; every strategy gives each run the same losses
      (to float rounding, 1e-6 relative: `tests/experiments/train/test_strategies.py`).
      `"vmap"`: one `jax.vmap`-ed program advances all runs together. `"sequential"`: one
      unbatched program (compiled once) advances each run in turn, each call waited for; an
      optimizer that branches on its step count (`lax.cond`) keeps the branch, where under
      `vmap` the count is batched and the branch becomes a select that pays both sides.
      `"dispatch"`: the same unbatched calls, all in flight at once, so that the runtime
      overlaps them on the cores. `"auto"`: `choose_strategy` (dispatch on CPU, vmap on an
      accelerator).
    scan_unroll: layers per iteration of the model's layer scan (`Transformer.scan_unroll`;
      the same values); default: every layer of a model of at most `UNROLL_LAYERS`, else 1.
    eval_split: the split the validation batches come from: `"val"` (every tuning run and
      choice), `"test"` (a registered verdict's reported runs only; drawn inside
      `experiments.data.no_test`, as every tuner runs, it raises), or `"heldout"` (`val` and
      `test` together, what versions registered before the test split read).

  Returns:
    A `ManyResult`.

  Example:
    >>> import optax, transformer
    >>> from experiments.train.sweep import train_many
    >>> r = train_many(transformer.preset("tiny", d_model=32), optax.adam, seeds=(0, 1),
    ...                learning_rates=(1e-3, 1e-2), steps=4, data="task:modadd",
    ...                batch_size=4, seq_len=8, eval_every=2, eval_batches=1)
    >>> r.loss.shape, r.diverged.shape
    ((2, 2, 2), (2, 2))
  """
  if steps < 1 or eval_every < 1:
    raise ValueError(f"train_many: {steps=} and {eval_every=} must be positive.")
  if not seeds:
    raise ValueError("train_many: seeds is empty. Fix: pass e.g. seeds=(0, 1, 2).")
  if eval_split not in ("val", "test", "heldout"):
    raise ValueError(f"train_many: eval_split={eval_split!r} is unknown. Fix: 'val' (tuning "
                     "and choices), 'test' (a registered verdict's reported runs) or 'heldout' "
                     "(a version registered before the test split).")
  if strategy not in ("auto",) + STRATEGIES:
    raise ValueError(f"train_many: strategy={strategy!r} is unknown. Fix: one of "
                     f"{('auto',) + STRATEGIES}.")
  seeds = tuple(int(s) for s in seeds)
  sweep = learning_rates is not None
  lrs = tuple(float(x) for x in learning_rates) if sweep else (math.nan,)
  if sweep and not lrs:
    raise ValueError("train_many: learning_rates is empty. Fix: pass rates or None.")
  grid = (len(lrs), len(seeds))
  if strategy == "auto":
    strategy = choose_strategy(grid[0] * grid[1])
  src = _source(data, seq_len)
  if scan_unroll is None:
    scan_unroll = cfg.n_layers if cfg.n_layers <= UNROLL_LAYERS else 1
  model = transformer.Transformer(cfg, scan_unroll=scan_unroll)
  to_params = params_fn or (lambda trained: trained)
  init_trained = init_fn or (lambda key: model.init(
      key, jnp.zeros((1, min(8, cfg.max_len)), jnp.int32))["params"])

  def tx_for(lr):
    return optax.inject_hyperparams(make_tx)(learning_rate=lr) if sweep else make_tx()

  def init_one(seed, lr):
    trained = init_trained(jax.random.key(seed))
    return trained, tx_for(lr).init(trained)

  def step_one(trained, opt_state, lr, tokens_BT1, weights_BT):
    state = TrainState(jnp.zeros((), jnp.int32), trained, opt_state)
    state, metrics = train_step(state, tokens_BT1, weights_BT, model=model, tx=tx_for(lr),
                                params_fn=params_fn, aux_loss=aux_loss)
    return state.params, state.opt_state, metrics["loss"]

  def steps_of(step):
    """`n ≤ eval_every` steps of `step`; returns the state, the summed losses, a non-finite flag."""

    def run(trained, opt_state, lr, tokens, weights, n, zeros):
      def body(i, carry):
        trained, opt_state, total, bad = carry
        trained, opt_state, ce = step(trained, opt_state, lr, tokens[i], weights[i])
        return trained, opt_state, total + ce, bad | ~jnp.isfinite(ce)

      return jax.lax.fori_loop(0, n, body, (trained, opt_state, zeros, zeros.astype(bool)))

    return run

  def val_one(trained, tokens, weights):
    params = to_params(trained)
    return jax.lax.map(lambda tw: loss_fn(params, model, *tw), (tokens, weights)).mean()

  params_of = jax.jit(jax.vmap(jax.vmap(to_params)))

  @jax.jit
  def intermediates_of(trained, seed_tokens):
    def one(trained, tokens_BT1):
      _, state = model.apply({"params": to_params(trained)}, tokens_BT1[:, :-1],
                             mutable=["intermediates"])
      return state["intermediates"]

    return jax.vmap(jax.vmap(one, in_axes=(0, 0)), in_axes=(0, None))(trained, seed_tokens)

  rates = jnp.asarray(lrs if sweep else (0.0,), jnp.float32)
  runs = [(r, s) for r in range(grid[0]) for s in range(grid[1])]
  if strategy == "vmap":
    # Outer axis: learning rates (batches shared); inner axis: seeds (lr shared).
    over_seeds = jax.vmap(step_one, in_axes=(0, 0, None, 0, 0))
    advance_all = jax.jit(steps_of(jax.vmap(over_seeds, in_axes=(0, 0, 0, None, None))))
    evaluate = jax.jit(jax.vmap(jax.vmap(val_one, in_axes=(0, 1, 1)), in_axes=(0, None, None)))
    init_all = jax.jit(jax.vmap(jax.vmap(init_one, in_axes=(0, None)), in_axes=(None, 0)))
    state = init_all(jnp.asarray(seeds), rates)
  else:
    # One unbatched program per run: its calls are waited for one by one ("sequential") or
    # all put in flight before any result is read ("dispatch").
    wait = jax.block_until_ready if strategy == "sequential" else (lambda x: x)
    advance_one, evaluate_one = jax.jit(steps_of(step_one)), jax.jit(val_one)
    init_single = jax.jit(init_one)
    state = [wait(init_single(seeds[s], rates[r])) for r, s in runs]

  def advance(state, tokens, weights, n):
    """The state after `n` more steps, the summed losses and the flags, `grid`-shaped."""
    if strategy == "vmap":
      trained, opt_state, total, bad = advance_all(*state, rates, tokens, weights, n,
                                                   jnp.zeros(grid, jnp.float32))
      return (trained, opt_state), total, bad
    zero = jnp.zeros((), jnp.float32)
    outs = [wait(advance_one(*state[k], rates[r], tokens[:, s], weights[:, s], n, zero))
            for k, (r, s) in enumerate(runs)]
    return ([o[:2] for o in outs], np.reshape([o[2] for o in outs], grid),
            np.reshape([o[3] for o in outs], grid))

  def validate(state):
    if strategy == "vmap":
      return np.asarray(evaluate(state[0], val_tokens, val_weights))
    outs = [wait(evaluate_one(state[k][0], val_tokens[:, s], val_weights[:, s]))
            for k, (_, s) in enumerate(runs)]
    return np.reshape(outs, grid)

  def trained_of(state):
    return state[0] if strategy == "vmap" else _stack([t for t, _ in state], grid)

  if eval_batches:
    val_tokens, val_weights = _batches(src, seeds, range(eval_batches), batch_size, eval_split)
  ends = list(range(eval_every, steps + 1, eval_every))
  if not ends or ends[-1] != steps:
    ends.append(steps)
  loss, val_loss, diverged = [], [], np.zeros(grid, bool)
  start = 0
  for end in ends:
    tokens, weights = _batches(src, seeds, range(start + 1, end + 1), batch_size, "train")
    n = end - start
    if n < eval_every:  # pad to the compiled chunk length; the loop stops at n
      pad = ((0, eval_every - n),) + ((0, 0),) * (tokens.ndim - 1)
      tokens, weights = np.pad(tokens, pad), np.pad(weights, pad)
    state, total, bad = advance(state, tokens, weights, n)
    mean = np.asarray(total) / n
    diverged |= np.asarray(bad) | ~(mean <= DIVERGENCE_FACTOR * math.log(cfg.vocab_size))
    loss.append(mean)
    val_loss.append(validate(state) if eval_batches else np.full(mean.shape, np.nan))
    if callback is not None:
      trained = trained_of(state)
      first_val = (val_tokens[0] if eval_batches else tokens[0])
      callback(end, params_of(trained), intermediates_of(trained, first_val))
    start = end
  trained = trained_of(state)
  params = params_of(trained) if params_fn is not None else trained
  return ManyResult(np.stack(loss, -1), np.stack(val_loss, -1), np.asarray(ends), params, trained,
                    diverged, seeds, lrs)
