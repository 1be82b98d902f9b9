"""Claim `softmax-kernel`: is softmax attention a valid kernel, and how far from one is it?

    python -m experiments claim softmax-kernel [--quick]

Softmax attention is `A = D⁻¹ κ(Q, K)` with the unnormalised kernel
`κ_ij = exp(q_i · k_j / √dh)` (`analysis.softmax_kernel`). The preface's sentence, "softmax
attention produces positive semi-definite Gram matrices, making attention a valid kernel",
reads in two clauses (v4), both settled by mathematics (`THEOREM`) and verified on every head
of the trained models, seeds 10-14, on test windows. **(1) softmax attention produces PSD Gram
matrices**: with `W_Q ≠ W_K` (as trained) `κ` is generically not symmetric, so it is no Gram
matrix (a causal `κ` is triangular, never symmetric): the fraction of heads whose `κ` passes
the float64 certificate (`analysis.psd_certificate`: symmetric and PSD), bidirectional and
causal, is supported at ≥ 90% and refuted at ≤ 10%; the proof predicts 0 (a floor, so the
scale axis has no trend to fit there: `censored`). **(2) making attention a valid kernel, when
keys are tied to queries**: with `W_K = W_Q` (`tie_keys_to_queries`) `κ = exp∘G` is PSD by the
Schur product theorem: every tied head must pass (also the instrument's control).

**Extensions** (what could come out either way, for a practitioner): *near a kernel*: is the
symmetric part `S = (κ + κᵀ)/2` of the median trained head PSD up to a small correction, its
negative mass `Σ_{λ<0} |λ| / Σ |λ|` (float64, 0 for PSD, ½ at most) below 1% over the whole
95% interval, with the tied control below 0.1%? *training moves towards a kernel*: is the
trained − init negative mass below −0.5 points?

Protocol: per seed, the committed base model (`experiments.models`, 20 tokens per parameter),
its initialisation and its tied copy, on 4 test windows of 64 tokens, every head of every
layer. Keys and queries are those the model scores (after RoPE on Llama); under grouped-query
attention query head `h` reads key head `h // (H / K)`. Registered on `mini-20` (GPT); the
scale axis measures both families' trained sizes (`models.TRAINED`, 14k–133k parameters).
Nothing is tuned.

v2 (before its run): the trained regime, the headline the proof's certificate, v1's negative
mass an extension. v3 (after v2's tied control failed): the kernel built in float64, each
head's divided by exp of its largest score (v2's float32 kernel clamped tied scores of 91 at
80). v4: `revisions`.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import analysis
import transformer
from experiments import models
from experiments.verdict import Anchor, Claim, Extension, Sizes, Spec, Threshold, axes
from experiments.verdict.declare.clause import Clause
from experiments.verdict.declare.revision import Revision


@dataclasses.dataclass(frozen=True)
class SoftmaxKernelSizes(Sizes):
  """What a run of `softmax-kernel` reads about its size.

  Attributes:
    model: the shared base model (`experiments.models`), one per seed.
    seq_len: the length `T` of the validation windows (each kernel is `T × T`).
    batch_size: validation windows per seed.
    split: the windows read: `test` (v4), or `heldout` (the validation files v1-v3 read).
  """

  model: str
  seq_len: int
  batch_size: int
  split: str = "heldout"


QUICK = SoftmaxKernelSizes(model="quick", seq_len=32, batch_size=2, split="test")
FULL = SoftmaxKernelSizes(model="mini-20", seq_len=64, batch_size=4, split="test")


def tie_keys_to_queries(params, cfg: transformer.Config) -> tuple[dict, transformer.Config]:
  """The model with `w_k := w_q` (and `b_k := b_q`) in every layer, so that `K = Q`.

  Under grouped-query attention (`n_kv_heads < n_heads`) `w_k` has fewer columns than `w_q`,
  so the tied model has one key/value head per query head: `n_kv_heads := n_heads`, and each
  value head is the one query head `h` read before, `h // kv_groups` (the model's own
  grouping), so the values are unchanged. With RoPE the keys are rotated as the queries are,
  `k_t = R_t W_Q x_t = q_t`.

  Returns:
    `(params, cfg)` of the tied model (`cfg` unchanged when `n_kv_heads == n_heads`).
  """
  attn = dict(params["blocks"]["attn"])
  attn["w_k"] = attn["w_q"]
  if "b_q" in attn:
    attn["b_k"] = attn["b_q"]
  if cfg.n_kv_heads != cfg.n_heads:
    g, dh = cfg.kv_groups, cfg.d_head

    def per_query_head(w):  # (..., K·dh) -> (..., H·dh): KV head h // g for query head h
      w_KDh = w.reshape(w.shape[:-1] + (cfg.n_kv_heads, dh))
      return np.repeat(np.asarray(w_KDh), g, axis=-2).reshape(w.shape[:-1] + (-1,))

    attn["w_v"] = per_query_head(attn["w_v"])
    if "b_v" in attn:
      attn["b_v"] = per_query_head(attn["b_v"])
    cfg = cfg.replace(n_kv_heads=cfg.n_heads)
  return {**params, "blocks": {**params["blocks"], "attn": attn}}, cfg


def kernel_certificate(q_LBTHD, k_LBTKD, scale: float, *, causal: bool) -> dict:
  """Per-head `psd_certificate` of the softmax kernel, plus `min_eig_rel` and `max_score`.

  Args:
    q_LBTHD: queries as the model scores them (after RoPE), `(L, B, T, H, dh)`.
    k_LBTKD: keys as cached (after RoPE), `(L, B, T, K, dh)` with `H % K == 0`; query head `h`
      reads key head `h // (H / K)`, the model's grouped-query attention.
    scale: the score scale, `dh ** -0.5`.
    causal: zero the kernel above the diagonal.

  The kernel is built in float64 from the float32 queries and keys, each head's divided by
  `exp` of its largest score (so no entry overflows); `psd_certificate` then decides at
  float64 precision.

  Returns:
    `analysis.psd_certificate`'s per-head arrays `(L·B, H)`, with `min_eig_rel`,
    `negative_mass` and the float `max_score`.
  """
  q = np.asarray(q_LBTHD)
  k = np.asarray(k_LBTKD)
  L, B, T, H, dh = q.shape
  K = k.shape[3]
  if k.shape[:3] != (L, B, T) or k.shape[4] != dh or H % K:
    raise ValueError(f"kernel_certificate: keys {k.shape} do not fit queries {q.shape}: they "
                     "need the same (L, B, T, dh) and a number of heads K dividing H. Fix: pass "
                     "the sown q and k of one forward pass.")
  k = np.repeat(k, H // K, axis=3)  # as `transformer.block._repeat_heads`
  q, k = q.reshape(L * B, T, H, dh), k.reshape(L * B, T, H, dh)
  # In float64, each head's kernel divided by exp of its largest score: a positive factor,
  # so symmetry, definiteness and negative mass are those of κ itself, and no entry
  # overflows (v2's float32 kernel clamped scores at 80, which breaks exp∘G's PSD structure).
  s = np.einsum("nthd,nshd->nhts", q.astype(np.float64), k.astype(np.float64)) * scale
  kappa = np.exp(s - s.max(axis=(-2, -1), keepdims=True))
  if causal:
    kappa = kappa * np.tril(np.ones((T, T), kappa.dtype))
  cert = analysis.psd_certificate(kappa)
  S = (kappa + np.swapaxes(kappa, -1, -2)) / 2
  lam = np.linalg.eigvalsh(S)
  cert["min_eig_rel"] = cert["min_eigenvalue"] / np.abs(lam).max(-1)
  cert["negative_mass"] = np.where(lam < 0, -lam, 0).sum(-1) / np.abs(lam).sum(-1)
  cert["max_score"] = float(s.max())
  return cert


def kernel_metrics(cert: dict) -> dict:
  """Fractions of heads whose softmax kernel is symmetric, PSD, and both (a valid kernel)."""
  return {"frac_kernel": float(cert["is_kernel"].mean()),
          "frac_psd": float(cert["is_psd"].mean()),
          "frac_symmetric": float(cert["is_symmetric"].mean()),
          "asymmetry_median": float(np.median(cert["asymmetry"])),
          "min_eig_rel_median": float(np.median(cert["min_eig_rel"])),
          "negative_mass_median": float(np.median(cert["negative_mass"])),
          "negative_mass_max": float(np.max(cert["negative_mass"])),
          "max_score": cert["max_score"]}


def measure(params, cfg, tokens_BT) -> dict:
  """`{"bidirectional": cert, "causal": cert}` of one model's heads on `tokens_BT`."""
  inter = models.intermediates(params, cfg, tokens_BT)["blocks"]["attn"]
  scale = cfg.d_head ** -0.5
  return {c: kernel_certificate(inter["q"], inter["k"], scale, causal=c == "causal")
          for c in ("bidirectional", "causal")}


def _figure(eigs: dict) -> dict:
  """`kernel.png`, declared as data: every head of the first seed as a dot, one column per arm
  (no series hides another).

  The tied arm's asymmetry is exactly 0, which a log axis cannot show: it is drawn at the
  floor `1e-12` and the floor is labelled.
  """
  floor = 1e-12
  rng = np.random.default_rng(0)
  arms = list(eigs)
  asymmetry, definiteness, notes = [], [], []
  for k, arm in enumerate(arms):
    asym, rel = (np.asarray(v, np.float64) for v in eigs[arm])
    x = (k + rng.uniform(-0.18, 0.18, asym.shape)).tolist()
    dots = {"style": "o", "ms": 3, "alpha": 0.6, "color": f"C{k}"}
    asymmetry.append({"x": x, "y": np.log10(np.maximum(asym, floor)).tolist(), **dots})
    definiteness.append({"x": x, "y": rel.tolist(), **dots})
    zero = int((asym <= floor).sum())
    if zero:
      notes.append({"text": f"{zero} heads exactly symmetric\n(shown at the floor)",
                    "xy": [k, -12], "offset": [0, 14], "ha": "center"})
  columns = {"xticks": list(range(len(arms))), "xticklabels": arms,
             "xlim": [-0.5, len(arms) - 0.5], "legend": 7}
  return {"name": "kernel.png", "size": [10, 3.8], "panels": [
      {**columns, "lines": asymmetry, "annotations": notes, "ylim": [-13, 1],
       "hlines": [{"y": float(np.log10(floor)), "color": "gray", "style": ":", "lw": 0.8,
                   "label": "floor 1e-12 (exact 0)"}],
       "ylabel": "log10 ‖κ − κᵀ‖_F / ‖κ‖_F (per head)",
       "title": "asymmetry of the kernel, one dot per head", "legend_loc": "center right"},
      {**columns, "lines": definiteness,
       "hlines": [{"y": 0, "color": "k", "style": ":",
                   "label": "0: positive semidefinite at or above"}],
       "ylabel": "λ_min(sym κ) / ‖sym κ‖₂ (per head)",
       "title": "definiteness of the symmetrised kernel", "legend_loc": "lower right"}]}


def run(spec: Spec) -> dict:
  """Measures every arm for every seed; see the module docstring."""
  z = spec.sizes
  name, seq_len, batch_size = z.model, z.seq_len, z.batch_size
  runs: dict = {}
  figure_data: dict = {}
  for seed, (params, cfg) in zip(spec.seeds, models.base_models(name, spec.seeds), strict=True):
    spec.log(f"  softmax-kernel: seed {seed}: init, trained, tied")
    tokens = models.val_tokens(seq_len, batch_size, seed, z.split)
    init = transformer.init(cfg, jax.random.key(seed))
    models_by_arm = {"init": (init, cfg), "trained": (params, cfg),
                     "tied": tie_keys_to_queries(params, cfg)}
    for stage, (p, c) in models_by_arm.items():
      for mask, cert in measure(p, c, tokens).items():
        runs.setdefault(f"{stage}-{mask}", {})[seed] = kernel_metrics(cert)
        if seed == spec.seeds[0] and mask == "bidirectional":
          figure_data[stage] = (cert["asymmetry"].ravel(), cert["min_eig_rel"].ravel())
  mean = {arm: {m: np.mean([r[m] for r in per_seed.values()]) for m in
                next(iter(per_seed.values()))} for arm, per_seed in runs.items()}
  notes = [
      "Median head's negative mass Σ|λ<0|/Σ|λ| of (κ + κᵀ)/2, mean over seeds: "
      + ", ".join(f"{arm} {mean[arm]['negative_mass_median']:.2%}" for arm in sorted(runs)) + ".",
      "Fraction of heads whose kernel is a valid (symmetric PSD) kernel, mean over seeds: "
      + ", ".join(f"{arm} {mean[arm]['frac_kernel']:.0%}" for arm in sorted(runs)) + ".",
      "Fraction PSD as a quadratic form (symmetric part only): "
      + ", ".join(f"{arm} {mean[arm]['frac_psd']:.0%}" for arm in sorted(runs)) + ".",
      "Median relative asymmetry ‖κ − κᵀ‖/‖κ‖: "
      + ", ".join(f"{arm} {mean[arm]['asymmetry_median']:.2g}" for arm in sorted(runs)) + ".",
      f"Largest scaled score q·k/√dh seen: "
      f"{max(m['max_score'] for m in mean.values()):.1f} (each head's kernel is built in "
      "float64 and divided by exp of its largest score, so none overflows).",
      f"Models: the shared `{name}` models, {batch_size} {z.split} windows of {seq_len} "
      "tokens per seed, every head of every layer; figure: seed "
      f"{spec.seeds[0]}, bidirectional kernels.",
  ]
  return {"split": "test" if z.split == "test" else "val", "setup": {"model_config": cfg.to_dict()},
          "runs": runs, "figures": [_figure(figure_data)], "notes": notes,
          "effects": [("negative mass: init (median head)", "init-bidirectional", None,
                       "negative_mass_median"),
                      ("valid-kernel fraction: trained − init (bidirectional)",
                       "trained-bidirectional", "init-bidirectional", "frac_kernel"),
                      ("PSD fraction (symmetric part), trained bidirectional",
                       "trained-bidirectional", None, "frac_psd")]}


THEOREM = ("With W_Q ≠ W_K the kernel κ = exp(X W_Q W_Kᵀ Xᵀ/√dh) is generically not symmetric "
           "(κ_ij ≠ κ_ji), so it is not a Gram matrix of any feature map; with W_K = W_Q the "
           "scores G = X W Wᵀ Xᵀ/√dh are PSD and κ = exp∘G = Σ_n G^{∘n}/n! is PSD by the Schur "
           "product theorem. tests/experiments/claims/test_theorems.py checks both on random "
           "instances in float64, and that the symmetrised untied kernel can be PSD or not, "
           "which is what this claim measures.")

BIDIRECTIONAL = "valid-kernel heads, trained, bidirectional"
CAUSAL = "valid-kernel heads, trained, causal"
TIED = "valid-kernel heads, tied (W_K = W_Q), bidirectional"

CLAIM = Claim(
    id="softmax-kernel",
    reads_base=True,
    version=4,
    revisions=("v2: registered on the trained regime (mini-20 at 20 tokens per parameter, "
               "committed models; v1 read small at 0.95) and the headline is the proof's "
               "float64 certificate, the negative mass an extension (issue 38)",
               "v3: v2's tied control failed (93% of tied heads certified): tied scores reach "
               "91 on mini-20, above the float32 kernel's clamp at 80; the kernel is now built "
               "in float64, divided by each head's largest exp-score; nothing else changes",
               Revision(4, "protocol", (
                   "issue 47: the sentence in two clauses, each settled by proof and verified "
                   "on every head: (1) PSD Gram matrices as trained (W_Q != W_K), v3's two "
                   "primary thresholds, unchanged; (2) a valid kernel when W_K = W_Q (Schur), "
                   "v3's tied control as a primary threshold (== 1 supports, < 1 refutes; "
                   "also kept as the instrument's control). Fresh seeds 10-14 (their committed "
                   "base models), test windows. Registered before any run of v4."))),
    axes=(axes.scale(models.TRAINED["gpt"] + models.TRAINED["llama"]),),
    topic="positive definiteness",
    kind="existing",
    preface=("Softmax attention produces positive semi-definite Gram matrices, making attention "
             "a valid kernel"),
    theorem=THEOREM,
    hypothesis=("Trained softmax attention kernels are valid kernels as built: at least 90% of "
                "heads' κ = exp(QKᵀ/√dh) pass the float64 certificate (symmetric and PSD), "
                "bidirectional and causal (the proof predicts none will with W_Q ≠ W_K); and "
                "with keys tied to queries (W_K = W_Q) every head passes (the proof: Schur)."),
    refuted_if=("At most 10% of trained heads pass the certificate (whole 95% interval over "
                "seeds 10-14), bidirectional or causal, or a tied head fails it."),
    thresholds=(
        Threshold(BIDIRECTIONAL, arm="trained-bidirectional",
                  metric="frac_kernel", supports=">= 0.9", refutes="<= 0.1",
                  unit="fraction of heads", censored="<= 0"),
        Threshold(CAUSAL, arm="trained-causal",
                  metric="frac_kernel", supports=">= 0.9", refutes="<= 0.1",
                  unit="fraction of heads"),
        Threshold(TIED, arm="tied-bidirectional", metric="frac_kernel", stat="range",
                  supports="== 1", refutes="< 1", unit="fraction of heads", needs=()),
        Threshold("tied control (W_K = W_Q) valid-kernel heads", arm="tied-bidirectional",
                  metric="frac_kernel", stat="range", supports="== 1", control=True,
                  unit="fraction of heads"),
    ),
    clauses=(
        Clause("Softmax attention produces positive semi-definite Gram matrices (as trained, "
               "W_Q ≠ W_K; bidirectional and causal)", (BIDIRECTIONAL, CAUSAL),
               proof="with W_Q ≠ W_K, κ_ij = exp(q_i·k_j/√dh) ≠ κ_ji generically: κ is not "
                     "symmetric, so it is the Gram matrix of no feature map; a causal κ is "
                     "triangular, never symmetric"),
        Clause("making attention a valid kernel: it is one exactly when keys are tied to "
               "queries (W_K = W_Q)", (TIED,),
               proof="with W_K = W_Q the scores G = X W Wᵀ Xᵀ/√dh are PSD, and κ = exp∘G = "
                     "Σ_n G^{∘n}/n! is PSD by the Schur product theorem"),
    ),
    seeds=(10, 11, 12, 13, 14),
    extensions=(
        Extension("near a kernel",
                  "Is the symmetrised kernel (κ + κᵀ)/2 of the median trained head PSD up to a "
                  "small correction, less than 1% of its spectral mass on negative eigenvalues?",
                  (Threshold("negative mass of the symmetrised kernel, median trained head",
                             arm="trained-bidirectional", metric="negative_mass_median",
                             supports="< 0.01", refutes="> 0.01",
                             unit="fraction of spectral mass"),
                   Threshold("tied control (W_K = W_Q): largest negative mass",
                             arm="tied-bidirectional", metric="negative_mass_max", stat="range",
                             supports="<= 0.001", control=True,
                             unit="fraction of spectral mass"))),
        Extension("training moves towards a kernel",
                  "Does training lower the median head's negative mass below its value at init "
                  "by more than half a point?",
                  (Threshold.beyond("negative mass: trained − init (median head)",
                                    arm="trained-bidirectional", baseline="init-bidirectional",
                                    metric="negative_mass_median", direction="<", margin=0.005,
                                    unit="fraction of spectral mass"),)),
    ),
    anchors=(
        Anchor("softmax attention as a kernel", "asymmetric, not a Mercer kernel",
               "Wright & Gonzalez 2021, Transformers are Deep Infinite-Dimensional Non-Mercer "
               "Binary Kernel Machines"),
        Anchor("symmetric (tied W_Q = W_K) vs asymmetric attention kernel", "asymmetric used "
               "in practice", "Tsai et al. 2019, Transformer Dissection: A Unified "
               "Understanding of Transformer's Attention via the Lens of Kernel"),
    ),
    run=run,
    QUICK=QUICK,
    FULL=FULL,
)
