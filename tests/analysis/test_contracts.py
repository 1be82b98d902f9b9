"""The attention contract: every registry entry passes; broken variants fail, each by name."""

import jax
import jax.numpy as jnp
import pytest

import analysis
import transformer
from analysis.contracts import check_attention
from transformer.attention import masked_scores

# The broken variants fail on one layer already; the registry entries get the default model.
SMALL = transformer.preset("tiny", d_model=16, n_layers=1, n_heads=2, init_std=0.1, max_len=16)


def linformer_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Negative control: Linformer projects keys and values along the sequence axis.

  `K' = E K` with a fixed `E: (R, S)` mixes every position into every projected key, so no
  mask can make it causal.
  """
  del mask_BTS
  S = k_BSHD.shape[1]
  E_RS = jax.random.normal(jax.random.key(0), (4, S)) / S**0.5
  k_BRHD = jnp.einsum("rs,bshd->brhd", E_RS, k_BSHD)
  v_BRHD = jnp.einsum("rs,bshd->brhd", E_RS, v_BSHD)
  scores_BHTR = jnp.einsum("bthd,brhd->bhtr", q_BTHD, k_BRHD) * scale
  weights_BHTR = jax.nn.softmax(scores_BHTR, axis=-1)
  return jnp.einsum("bhtr,brhd->bthd", weights_BHTR, v_BRHD), {
      "scores": scores_BHTR, "weights": weights_BHTR}


def index_triangle_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Broken only in decoding: also applies its own triangle of array indices.

  On a full sequence (T = S) the triangle is implied by the causal mask, so the gradient,
  suffix and padding checks pass; with a KV cache (one query row against S slots) the
  triangle hides every slot but the first.
  """
  T, S = q_BTHD.shape[1], k_BSHD.shape[1]
  own_BTS = mask_BTS & jnp.tril(jnp.ones((T, S), bool))[None]
  return transformer.softmax_attention(q_BTHD, k_BSHD, v_BSHD, own_BTS, scale=scale)


def unmasked_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Broken: ignores the mask entirely."""
  return transformer.softmax_attention(q_BTHD, k_BSHD, v_BSHD, jnp.ones_like(mask_BTS),
                                       scale=scale)


def padding_blind_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Broken only on padding: uses a causal triangle of array indices instead of the mask.

  Exactly causal on a full sequence, but the left padding that the mask hides is read.
  """
  T, S = q_BTHD.shape[1], k_BSHD.shape[1]
  own_BTS = jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool))[None], mask_BTS.shape)
  return transformer.softmax_attention(q_BTHD, k_BSHD, v_BSHD, own_BTS, scale=scale)


def additive_scores_attention(q_BTHD, k_BSHD, v_BSHD, mask_BTS, *, scale):
  """Correct but unusual: masked scores with an additive `-1e4` instead of `finfo.min`.

  Softmax then gives masked keys `exp(-1e4) = 0` in float32 too, so the contract holds.
  """
  scores_BHTS = masked_scores(q_BTHD, k_BSHD, mask_BTS, scale)
  scores_BHTS = jnp.where(mask_BTS[:, None], scores_BHTS, -1e4)
  weights_BHTS = jax.nn.softmax(scores_BHTS, axis=-1)
  return jnp.einsum("bhts,bshd->bthd", weights_BHTS, v_BSHD), {
      "scores": scores_BHTS, "weights": weights_BHTS}


# Every registry entry with the options it is used with: the tied projection where the kernel
# is PSD by it, and the block-sparse ones with blocks of 4 at T = 16 (4 blocks, a window of 5
# crossing block edges, one global token, one random block, MoBA picking one past block).
VARIANT_CASES = {
    "softmax": {}, "softmax-tied": dict(qk_tied=True),
    "rbf": {}, "rbf-tied": dict(qk_tied=True),
    "linear": {}, "linear-tied": dict(qk_tied=True),
    "local": dict(window=5, block_size=4),
    "bigbird": dict(window=5, block_size=4, n_global=1, n_random=1),
    "moba": dict(block_size=4, top_k_blocks=1),
}
CHECK_MODEL = transformer.preset("tiny", d_model=16, n_layers=2, n_heads=2, init_std=0.1,
                                 max_len=16)


def test_cases_cover_the_registry():
  assert {case.removesuffix("-tied") for case in VARIANT_CASES} == set(transformer.ATTENTION)


@pytest.mark.parametrize("case", sorted(VARIANT_CASES))
def test_every_registered_variant_passes_with_its_options(case):
  name = case.removesuffix("-tied")
  report = check_attention(name, cfg=CHECK_MODEL.replace(**VARIANT_CASES[case]))
  assert report["max_future_grad"] == 0.0
  assert report["prefix_max_change"] == 0.0
  assert report["decode_max_abs_err"] <= 1e-5
  assert report["padding_max_grad"] == 0.0 and report["padding_max_change"] == 0.0


def test_default_model_serves_a_windowed_variant_across_block_edges():
  # No cfg: the default model has blocks of 4 and, since `local` needs one, a window of 5.
  report = check_attention("local")
  assert report["max_future_grad"] == 0.0 and report["padding_max_change"] == 0.0


def test_moba_with_a_gate_that_averages_padding_fails_the_padding_check(monkeypatch):
  # The bug the padding check found in MoBA: block means over padded keys move the selection.
  # Top-k passes no gradient, so only the perturbation half of the check can see it.
  import transformer.sparse_attention as attention

  gate = attention._moba_gate
  monkeypatch.setattr(attention, "_moba_gate", lambda *args: gate(*args[:6]))
  with pytest.raises(AssertionError, match="changing the 4 padded tokens moved real"):
    check_attention("moba", cfg=CHECK_MODEL.replace(**VARIANT_CASES["moba"]))


def test_exported_from_analysis_and_bidirectional_checks_padding_only():
  report = analysis.check_attention("softmax", causal=False, seq_len=8)
  assert report["max_future_grad"] is None and report["decode_max_abs_err"] is None
  assert report["padding_max_grad"] == 0.0


def test_a_correct_unregistered_function_passes_and_is_unregistered_afterwards():
  before = dict(transformer.ATTENTION)
  report = check_attention(additive_scores_attention, cfg=SMALL, seq_len=8)
  assert report["attention"] == "additive_scores_attention"
  assert transformer.ATTENTION == before


@pytest.mark.parametrize("fn, broken", [
    (linformer_attention, "causality broken"),
    (unmasked_attention, "causality broken"),
    (index_triangle_attention, "KV-cache decoding"),
    (padding_blind_attention, "padding not respected"),
], ids=["linformer", "unmasked", "index-triangle", "padding-blind"])
def test_broken_variants_fail_naming_the_property(fn, broken):
  with pytest.raises(AssertionError, match=broken):
    check_attention(fn, cfg=SMALL, seq_len=8)
  assert all(not k.startswith("_check_attention") for k in transformer.ATTENTION)


def test_linformer_leak_is_large_not_rounding():
  # The control fails for the right reason: the future gradient is of order one, not 1e-8.
  with pytest.raises(AssertionError, match=r"d logits_t / d x_s = (\d\.\d+e[-+]\d+)") as info:
    check_attention(linformer_attention, cfg=SMALL, seq_len=8)
  leak = float(info.value.args[0].split("= ")[1].split(" ")[0])
  assert leak > 1e-4


def test_unknown_name_is_a_value_error():
  with pytest.raises(ValueError, match="not in transformer.ATTENTION"):
    check_attention("sotfmax")
