"""The sizes a claim runs at, and what its run is asked: `Sizes`, `TrainedSizes`, `Spec`.

A claim subclasses `Sizes` with the fields its experiment reads (model name, steps, sequence
lengths, rate grid, ...) and declares `QUICK` and `FULL` instances; the runner writes them
whole into the run's config and hands `Claim.run` a `Spec`: the sizes, the seeds, the run
folder. `more_steps` is the usual `at` of a budget axis (`axes.budget(ks, more_steps)`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Spec:
  """What `Claim.run` is asked to do: its sizes, the seeds, and where figures go.

  Attributes:
    quick: whether these are the `QUICK` sizes (the verdict is then indicative).
    seeds: the seeds to report, in order.
    run_dir: the run's folder (figures are written there).
    sizes: the claim's `QUICK` or `FULL` sizes; everything the run reads about its size.
    log: where progress lines go.
  """

  quick: bool
  seeds: tuple[int, ...]
  run_dir: str
  sizes: Sizes | None = None
  log: Callable[[str], None] = print


@dataclasses.dataclass(frozen=True)
class Sizes:
  """The base of every claim's frozen sizes: subclass it, then declare `QUICK` and `FULL`.

  A subclass lists the sizes its experiment reads (model name, steps, sequence lengths, rate
  grid, ...) as typed fields; the runner writes `dataclasses.asdict(sizes)` into the run's
  `config`, so a run records exactly the sizes it ran with.

  Example:
    >>> import dataclasses
    >>> from experiments.verdict.declare.sizes import Sizes
    >>> @dataclasses.dataclass(frozen=True)
    ... class MySizes(Sizes):
    ...   steps: int
    ...   seq_lens: tuple[int, ...]
    >>> MySizes(steps=30, seq_lens=(32, 64)).to_dict()
    {'steps': 30, 'seq_lens': [32, 64]}
  """

  def to_dict(self) -> dict[str, Any]:
    """The fields as JSON-ready values (tuples become lists)."""
    def plain(v):
      return [plain(x) for x in v] if isinstance(v, (tuple, list)) else v

    return {k: plain(v) for k, v in dataclasses.asdict(self).items()}

  def train_tokens(self) -> int | None:
    """Tokens each reported model trains on from scratch; None (here): the claim trains none.

    The runner reports them per parameter beside the result (`config.budget`, and per size on
    the scale axis). `TrainedSizes` gives `steps · batch_size · seq_len`.
    """
    return None


class TrainedSizes(Sizes):
  """`Sizes` of a claim that trains each model from scratch for `steps` batches of
  `batch_size` windows of `seq_len` tokens: `train_tokens` is their product.

  `steps = None` asks for the trained regime: `budget_steps` then trains `model` at
  `experiments.models.TOKENS_PER_PARAM` tokens per parameter, so every size of a scale axis
  sees the same ratio.

  Example:
    >>> import dataclasses
    >>> from experiments.verdict.declare.sizes import TrainedSizes
    >>> @dataclasses.dataclass(frozen=True)
    ... class S(TrainedSizes):
    ...   steps: int
    ...   batch_size: int
    ...   seq_len: int
    >>> S(steps=120, batch_size=8, seq_len=64).train_tokens()
    61440
  """

  def budget_steps(self) -> int:
    """`steps`, or `⌈TOKENS_PER_PARAM · params(model) / (batch_size · seq_len)⌉` when None.

    Example:
      >>> import dataclasses
      >>> from experiments.verdict.declare.sizes import TrainedSizes
      >>> @dataclasses.dataclass(frozen=True)
      ... class S(TrainedSizes):
      ...   model: str
      ...   steps: int | None
      ...   batch_size: int = 16
      ...   seq_len: int = 128
      >>> S("micro-20", None).budget_steps(), S("micro-20", 7).budget_steps()  # 41,856 params
      (409, 7)
    """
    if self.steps is not None:
      return self.steps
    from experiments import models  # deferred: the sizes of a claim read no model otherwise

    return math.ceil(models.TOKENS_PER_PARAM * models.param_count(self.model)
                     / (self.batch_size * self.seq_len))

  def train_tokens(self) -> int:
    return self.budget_steps() * self.batch_size * self.seq_len


def more_steps(sizes: TrainedSizes, k: int, also: tuple[str, ...] = ()) -> TrainedSizes:
  """`sizes` on `k` times the tokens: `steps` and each field named in `also` times `k`.

  The usual `at` of a budget axis: batches, lengths and rate grid stay, so the run is the same
  protocol trained `k` times longer; `also` names step counts that should keep their share
  of the run (e.g. an evaluation interval, so a curve keeps its number of points).

  Example:
    >>> import dataclasses
    >>> from experiments.verdict.declare.sizes import TrainedSizes, more_steps
    >>> @dataclasses.dataclass(frozen=True)
    ... class S(TrainedSizes):
    ...   steps: int
    ...   batch_size: int
    ...   seq_len: int
    ...   eval_every: int
    >>> more_steps(S(120, 8, 64, 12), 4, also=("eval_every",))
    S(steps=480, batch_size=8, seq_len=64, eval_every=48)
  """
  return dataclasses.replace(sizes, steps=k * sizes.steps,
                             **{name: k * getattr(sizes, name) for name in also})
