"""Claim `causal-mask`: does causal attention see the past but not the future, in float32?

    python -m experiments claim causal-mask [--quick]

**The preface's sentence**, "causal masking lets GPT see the past but not the future", in
three clauses (v3), each read on the trained base models over seeds 10-14, on test windows at
the training length. **(1) not the future**, settled by proof (`THEOREM`: a masked score is
`finfo.min` before the softmax, so `A_ij = 0` for `j > i`) and verified exactly: the largest
sown float32 weight above the diagonal, and the largest influence of a later token on an
earlier position through the whole stack of layers (`lab.causality`), are 0 on every seed.
**(2) sees the past, exactly**, settled by proof (`A_ij > 0` for every `j ≤ i`, so
`det A = Π A_ii > 0`: nothing of the past is lost) and verified by the float64 certificate of
every measured head (`analysis.causal_logdet`). **(3) sees the past, as computed**: could
come out either way: does every earlier token measurably move every later position in
float32? The fraction of pairs `j < i` whose influence on position `i` is below float32's
epsilon of the largest one (unread); supported when its 95% interval lies below 1%, refuted
when above 10%.

**Extensions** (own verdicts): float32 invertibility (v1-v2's primary: at least 90% of
trained heads of float32 numerical rank `T`, `analysis.rank_certificate`, refuted at most
half); every registered attention variant is exactly causal (`analysis.check_attention`, a
mask-blind softmax the control); the float32 deficiency grows with `T`; training causes it.

Protocol: per seed, the committed base model (`experiments.models`, 20 tokens per parameter)
and its initialisation, 4 test windows at T = 32, 128 (the training length, where every
clause is read) and 256, every head of every layer; the influence along 4 random directions
per token. Registered on `mini-20` (GPT); the scale axis measures both families' trained
sizes (`models.TRAINED`, 14k–133k parameters). Nothing is tuned.

v2 (before its run): the trained regime (`mini-20`), the primary named float32 invertibility.
Context addendum (after v2's result; not read by the verdict): `--axes context=...`
(`at_length`). v3: `revisions`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

import analysis
import transformer
from experiments import models
from experiments.lab import causality
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold, axes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision


@dataclasses.dataclass(frozen=True)
class CausalMaskSizes(Sizes):
  """What a run of `causal-mask` reads about its size.

  Attributes:
    model: the shared base model (`experiments.models`), one per seed.
    seq_lens: the lengths `T` at which every head's rank is certified.
    batch_size: validation windows per `T`.
    small_contract: check the attention contract on a 1-layer, d = 16 model at T = 8
      (`analysis.check_attention`'s default model otherwise).
    primary_T: the length the primary question is read at: the model's training length.
    split: the windows read: `test` (v3), or `heldout` (the validation files v1-v2 read).
  """

  model: str
  seq_lens: tuple[int, ...]
  batch_size: int
  small_contract: bool
  primary_T: int
  split: str = "heldout"


QUICK = CausalMaskSizes(model="quick", seq_lens=(32, 64, 128), batch_size=2, small_contract=True,
                        primary_T=64, split="test")
FULL = CausalMaskSizes(model="mini-20", seq_lens=(32, 128, 256), batch_size=4,
                       small_contract=False, primary_T=128, split="test")


def at_length(sizes: CausalMaskSizes, T: int) -> CausalMaskSizes:
  """The sizes of a run at context length `T` (`Claim.at_length`, the context axis).

  Full sizes read `llama-mini-long-20` (`models.model_at_length`: llama-mini-20's shape trained
  at T = 1024 and 20 tokens per parameter) at every `T`, so the primary (float32
  invertibility at a length the model was trained on) is asked at `T`: `primary_T = T`,
  `seq_lens = (the shortest, T)`. Windows per length scale by `primary_T / T`, never below
  `min(batch_size, 4)`: the unit is a head, so each length certifies the same `4·L·H` heads.
  Quick sizes keep the quick model (`T ≤ 64`).

  Example:
    >>> z = at_length(FULL, 1024)
    >>> z.model, z.seq_lens, z.primary_T, z.batch_size
    ('llama-mini-long-20', (32, 1024), 1024, 4)
  """
  model = models.model_at_length("causal-mask", sizes.model, T, quick_model=QUICK.model)
  return dataclasses.replace(
      sizes, model=model, seq_lens=tuple(sorted({min(sizes.seq_lens), T})), primary_T=T,
      batch_size=max(min(sizes.batch_size, 4), round(sizes.batch_size * sizes.primary_T / T)))


def mask_blind_softmax(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """The control: softmax attention that ignores its mask (so reads the future)."""
  return transformer.softmax_attention(q_BTHD, k_BSHD, v_BSHD, jnp.ones_like(mask_BTS),
                                       scale=scale)


@functools.lru_cache(maxsize=32)
def _contract(seed: int, small: bool) -> tuple:
  return tuple(sorted(_measure_contract(seed, small).items()))


def contract(seed: int, small: bool) -> dict:
  """Fraction of registry variants passing `check_attention`, and whether the control fails.

  It depends on the seed alone, not on the base model, so a run over several model sizes
  measures it once per seed (cached in the process).
  """
  return dict(_contract(int(seed), bool(small)))


def _measure_contract(seed: int, small: bool) -> dict:
  kw = {"seed": seed}
  if small:
    kw.update(cfg=transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, init_std=0.1,
                                     max_len=16), seq_len=8)
  passed = []
  for name in sorted(transformer.ATTENTION):
    try:
      analysis.check_attention(name, **kw)
      passed.append(1.0)
    except AssertionError:
      passed.append(0.0)
  try:
    analysis.check_attention(mask_blind_softmax, **kw)
    caught = 0.0
  except AssertionError:
    caught = 1.0
  return {"variants_causal": float(np.mean(passed)), "n_variants": float(len(passed)),
          "control_caught": caught}


def head_ranks(scores, weights) -> dict:
  """Exact (float64) and float32 rank facts of causal attention matrices `(..., T, T)`.

  Args:
    scores: the sown masked scores (float32, `finfo.min` above the diagonal).
    weights: the sown float32 attention matrices.

  Returns:
    per-head arrays: `full_rank` (float64 certificate), `log10_min_diag` (of the float64
    `A_ii`), `deficient_f32` (float32 numerical rank < T), `zero_diag_f32` (a float32 `A_ii`
    is exactly 0), `log10_cond_f32`.
  """
  T = scores.shape[-1]
  s = np.asarray(scores, np.float64).reshape(-1, T, T)
  s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
  m = s.max(-1, keepdims=True)
  lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))
  A64 = np.exp(s - lse)
  cert = analysis.causal_logdet(A64)
  log_diag = np.diagonal(s, axis1=-2, axis2=-1) - lse[..., 0]  # exact log A_ii, no underflow
  w = np.asarray(weights, np.float32).reshape(-1, T, T)
  rank = analysis.rank_certificate(w)
  with np.errstate(divide="ignore"):
    log10_cond = np.log10(rank["condition_number"])
  return {"full_rank": cert["full_rank"], "log10_min_diag": log_diag.min(-1) / np.log(10),
          "deficient_f32": rank["rank"] < T,
          "zero_diag_f32": (np.diagonal(w, axis1=-2, axis2=-1) == 0).any(-1),
          "log10_cond_f32": log10_cond}


def rank_metrics(params, cfg, seq_lens, batch_size: int, seed: int,
                 split: str = "heldout") -> tuple[dict, dict]:
  """Per-T metrics of a model's heads (and the per-head arrays at the largest T), on `split`'s
  windows; `future_weight_max` is the largest float32 weight above the diagonal at any T."""
  out, last = {"future_weight_max": 0.0}, {}
  for T in seq_lens:
    inter = models.intermediates(params, cfg, models.val_tokens(T, batch_size, seed, split))
    weights = inter["blocks"]["attn"]["weights"]
    out["future_weight_max"] = max(out["future_weight_max"], causality.future_weight(weights))
    r = head_ranks(inter["blocks"]["attn"]["scores"], weights)
    out[f"full_rank_exact_T{T}"] = float(r["full_rank"].mean())
    out[f"deficient_f32_T{T}"] = float(r["deficient_f32"].mean())
    out[f"zero_diag_f32_T{T}"] = float(r["zero_diag_f32"].mean())
    out[f"log10_cond_median_T{T}"] = float(np.median(r["log10_cond_f32"]))
    out[f"log10_min_diag_T{T}"] = float(r["log10_min_diag"].min())
    last = r
  T = seq_lens[-1]
  out["full_rank_exact"] = min(out[f"full_rank_exact_T{t}"] for t in seq_lens)
  out["deficient_f32"] = out[f"deficient_f32_T{T}"]
  out["zero_diag_f32"] = out[f"zero_diag_f32_T{T}"]
  return out, last


def run(spec: Spec) -> dict:
  """Measures both halves of the claim for every seed; see the module docstring."""
  z = spec.sizes
  name, seq_lens, batch_size = z.model, z.seq_lens, z.batch_size
  runs = {"contract": {}, "init": {}, "trained": {}}
  per_T = {"init": {}, "trained": {}}
  heads = {"init": {}, "trained": {}}
  trained = models.base_models(name, spec.seeds)
  for seed, (params, cfg) in zip(spec.seeds, trained, strict=True):
    spec.log(f"  causal-mask: seed {seed}: attention contract")
    runs["contract"][seed] = contract(seed, z.small_contract)
    spec.log(f"  causal-mask: seed {seed}: head ranks at T={list(seq_lens)}")
    init = transformer.init(cfg, jax.random.key(seed))
    for arm, p in (("init", init), ("trained", params)):
      runs[arm][seed], last = rank_metrics(p, cfg, seq_lens, batch_size, seed, z.split)
      m = runs[arm][seed]
      if arm == "trained":  # what every earlier token moves, at the training length
        m.update(causality.window_reads(p, cfg, models.val_tokens(z.primary_T, batch_size,
                                                                   seed, z.split)))
      m["full_rank_f32"] = 1.0 - m[f"deficient_f32_T{z.primary_T}"]
      m["deficiency_growth"] = m[f"deficient_f32_T{seq_lens[-1]}"] - m[
          f"deficient_f32_T{seq_lens[0]}"]
      for k, v in runs[arm][seed].items():
        per_T[arm].setdefault(k, []).append(v)
      for k, v in last.items():
        heads[arm].setdefault(k, []).append(v)
  heads = {arm: {k: np.concatenate(v) for k, v in h.items()} for arm, h in heads.items()}
  T = seq_lens[-1]
  tr = per_T["trained"]
  notes = [
      f"Attention variants checked: {sorted(transformer.ATTENTION)}; fraction exactly causal "
      f"per seed: {runs['contract'][spec.seeds[0]]['variants_causal']:.2f} (seed "
      f"{spec.seeds[0]}). The mask-blind control was caught in "
      f"{int(sum(r['control_caught'] for r in runs['contract'].values()))}/{len(spec.seeds)} "
      "seeds.",
      f"Trained heads at T={T}: {np.mean(tr[f'deficient_f32_T{T}']):.1%} numerically rank "
      f"deficient in float32, {np.mean(tr[f'zero_diag_f32_T{T}']):.1%} with a diagonal entry "
      f"that is exactly 0 in float32, yet {np.mean(tr[f'full_rank_exact_T{T}']):.1%} certified "
      f"full rank in float64 (smallest A_ii = 10^{min(tr[f'log10_min_diag_T{T}']):.1f}).",
      "Median log10 condition number of the float32 matrices, trained: "
      + ", ".join(f"T={t}: {np.median(tr[f'log10_cond_median_T{t}']):.1f}" for t in seq_lens)
      + "; at init: " + ", ".join(
          f"T={t}: {np.median(per_T['init'][f'log10_cond_median_T{t}']):.1f}" for t in seq_lens)
      + ".",
      f"Trained models at T={z.primary_T}: the largest influence of a later token on an "
      f"earlier position {max(tr['future_influence_max']):.3g}, the largest float32 weight "
      f"above the diagonal {max(tr['future_weight_max']):.3g}; earlier tokens unread in "
      f"float32: {np.mean(tr['past_unread_f32']):.2%} of pairs (mean over seeds).",
      f"Models: the shared `{name}` models (`experiments.models.base_model`), one per seed; "
      f"{batch_size} {z.split} windows of the stdlib corpus per T; every head of every layer.",
  ]
  return {"split": "test" if z.split == "test" else "val",
          "setup": {"variants": sorted(transformer.ATTENTION),
                    "model_config": trained[0][1].to_dict()},
          "runs": runs, "figures": [causality.rank_figure(per_T, heads, seq_lens)],
          "notes": notes,
          "effects": [("trained heads numerically rank deficient in float32 (largest T)",
                       "trained", None, "deficient_f32"),
                      ("float32 rank deficiency: trained − init (largest T)", "trained", "init",
                       "deficient_f32"),
                      ("trained heads with an exact float32 zero on the diagonal", "trained",
                       None, "zero_diag_f32")]}


THEOREM = ("A causal softmax attention matrix is lower triangular with diagonal entries "
           "A_ii = exp(s_ii − logsumexp_{j≤i} s_ij) > 0, so det A = Π A_ii > 0 and rank A = T "
           "for every T and every scores: in exact arithmetic nothing of the past is lost, and "
           "A_ij = 0 for j > i means nothing of the future is read. "
           "tests/experiments/claims/test_theorems.py checks it on random instances in float64.")

F32_INVERTIBLE = Threshold("trained heads invertible in float32 (numerical rank T) at the "
                           "training length", arm="trained", metric="full_rank_f32",
                           supports=">= 0.9", refutes="<= 0.5", unit="fraction of heads")
FUTURE_WEIGHT = "not the future: largest float32 attention weight above the diagonal"
FUTURE_INFLUENCE = ("not the future: largest influence of a later token on an earlier position "
                    "(whole stack, float32)")
PAST_EXACT = "sees the past: heads certified full rank in float64 (every A_ij > 0, j ≤ i)"
PAST_READ = ("sees the past, as computed: earlier tokens unread in float32 (influence below "
             "eps of the largest)")

CLAIM = Claim(
    id="causal-mask",
    reads_base=True,
    version=3,
    revisions=("v2: registered on the trained regime (mini-20 at 20 tokens per parameter, "
               "committed models; v1 read small at 0.95), the primary named float32 "
               "invertibility, the context axis left out until its long model is trained at "
               "the regime (issue 38)",
               Revision(3, "protocol", (
                   "issue 47 item 3: v1-v2 read 'refuted' beside the sentence while causality "
                   "is proven and the refuted number is float32 invertibility. v3 reads the "
                   "sentence in three clauses: (1) not the future, by proof, verified exactly "
                   "(largest float32 weight above the diagonal and largest later-to-earlier "
                   "influence through the stack both 0 on every seed); (2) sees the past, by "
                   "proof (every A_ij > 0, j <= i), verified by the float64 certificate (v2's "
                   "control); (3) sees the past as computed: earlier tokens unread in float32 "
                   "(influence below eps of the largest) under 1% of pairs, refuted above 10%. "
                   "Float32 invertibility (v2's primary) becomes an extension, unchanged. "
                   "Fresh seeds 10-14 (their committed base models), test windows. Registered "
                   "before any run of v3."))),
    # the context axis with no lengths: `--axes context=...` (an addendum) reads `at_length`
    axes=(axes.scale(models.TRAINED["gpt"] + models.TRAINED["llama"]),
          axes.context((), at_length)),
    topic="full rank & causality",
    kind="existing",
    preface="Causal masking lets GPT see the past but not the future",
    theorem=THEOREM,
    hypothesis=("Not the future and seeing the past are settled by proof, and verified exactly "
                "on the trained models (no weight and no influence from a later token; every "
                "head certified full rank in float64); as the model computes it in float32, "
                "fewer than 1% of (earlier, later) token pairs are unread (influence below "
                "float32 eps of the largest), whole 95% interval over seeds 10-14."),
    refuted_if=("A later token has any weight or influence on an earlier position, a head is "
                "not certified full rank in float64, or more than 10% of earlier tokens are "
                "unread in float32 (whole 95% interval)."),
    thresholds=(
        Threshold(FUTURE_WEIGHT, arm="trained", metric="future_weight_max", stat="range",
                  supports="== 0", refutes="> 0"),
        Threshold(FUTURE_INFLUENCE, arm="trained", metric="future_influence_max", stat="range",
                  supports="== 0", refutes="> 0"),
        Threshold(PAST_EXACT, arm="trained", metric="full_rank_exact", stat="range",
                  supports="== 1", refutes="< 1", unit="fraction of heads"),
        Threshold(PAST_READ, arm="trained", metric="past_unread_f32", supports="< 0.01",
                  refutes="> 0.1", unit="fraction of pairs j < i"),
    ),
    clauses=(
        Clause("but not the future: a later token gets no weight and moves no earlier position",
               (FUTURE_WEIGHT, FUTURE_INFLUENCE),
               proof="a masked score is finfo.min before the softmax, whose exp is exactly 0: "
                     "A_ij = 0 for j > i in every head and layer, so nothing of a later token "
                     "reaches an earlier position"),
        Clause("lets GPT see the past: every earlier position has positive weight, nothing of "
               "it is lost", (PAST_EXACT,),
               proof="A_ij = exp(s_ij − logsumexp_{k≤i} s_ik) > 0 for j ≤ i, so A is lower "
                     "triangular with det A = Π A_ii > 0 (rank T)"),
        Clause("lets GPT see the past, as computed in float32: every earlier token measurably "
               "moves every later position", (PAST_READ,)),
    ),
    seeds=(10, 11, 12, 13, 14),
    extensions=(
        Extension("float32 invertibility",
                  "As models compute it (float32), does a trained model's causal attention "
                  "matrix stay invertible: at least 90% of trained heads of numerical rank T "
                  "(tolerance T·eps·σ₁) at the training length? (v1-v2's primary.)",
                  (F32_INVERTIBLE,
                   Threshold("float64 certificate of the same heads (control)", arm="trained",
                             metric="full_rank_exact", stat="range", supports="== 1",
                             control=True, unit="fraction of heads"))),
        Extension("every variant exactly causal",
                  "Does every registered attention variant see only the past (future gradient "
                  "0, prefix bit-identical under suffix changes, padding, decode = forward)?",
                  (Threshold("attention variants exactly causal", arm="contract",
                             metric="variants_causal", stat="range", supports="== 1",
                             refutes="< 1", unit="fraction of variants"),
                   Threshold("mask-blind control caught by check_attention", arm="contract",
                             metric="control_caught", stat="range", supports="== 1",
                             control=True))),
        Extension("rank loss grows with T",
                  "Does the fraction of trained heads rank deficient in float32 grow from the "
                  "shortest to the longest T measured, by more than 10 points?",
                  (Threshold.beyond("float32-deficient heads: longest T − shortest T",
                                    arm="trained", metric="deficiency_growth", margin=0.1,
                                    unit="fraction of heads"),)),
        Extension("training causes it",
                  "Are trained heads rank deficient in float32 (longest T) more often than the "
                  "same model's heads at init, by more than 10 points?",
                  (Threshold.beyond("float32-deficient heads: trained − init (longest T)",
                                    arm="trained", baseline="init", metric="deficient_f32",
                                    margin=0.1, unit="fraction of heads"),)),
    ),
    anchors=(
        Anchor("rank of a causal softmax attention matrix in exact arithmetic", "T (full)",
               "det of a triangular matrix = Π A_ii (e.g. Golub & Van Loan, Matrix "
               "Computations, 4th ed.)"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
