"""The step profiler: XLA's per-op trace read back onto the compiled program's instructions."""

import collections

import pytest

from experiments.benchmarks import step_profile


def test_every_timed_instruction_is_the_programs_and_parts_sum_to_the_ops():
  out = step_profile.profile("pico-20", steps=2)
  run, args = step_profile._program("pico-20", 2)
  table = step_profile.instructions(run.lower(*args).compile().as_text())
  names = [name for name, *_ in out["ops"]]
  assert names and set(names) <= set(table)
  # The two dots of the scores (QKᵀ forward) and the mixing (AV forward) are attention's,
  # found by their einsum in op_name, not by the part rule.
  mixing = [n for n, _, _, op in out["ops"] if "bhts,bshd->bthd" in op]
  assert mixing and all(step_profile.part_of(table[n]["op_name"]) == "attention" for n in mixing)
  # By part is the per-op table regrouped: nothing lost, nothing counted twice.
  regrouped = collections.Counter()
  for _, ms, _, op_name in out["ops"]:
    regrouped[step_profile.part_of(op_name)] += ms
  assert out["parts"].keys() == regrouped.keys()
  for part, ms in out["parts"].items():
    assert ms == pytest.approx(regrouped[part], rel=1e-9)
  assert out["parts"]["attention"] > 0 and out["parts"]["feed-forward"] > 0


def test_parts_are_matched_in_order_and_the_rest_is_other():
  assert step_profile.part_of("jit(run)/while/body/jvp(Transformer)/blocks/attn/norm") == (
      "attention")  # attention before norms: the first rule that matches wins
  assert step_profile.part_of("jit(run)/while/body/jvp(Transformer)/ln_f/layer_norm") == "norms"
  assert step_profile.part_of("jit(run)/while/body/jvp()/log_softmax") == "embedding and logits"
  assert step_profile.part_of("") == "other"


def test_bad_steps_is_refused_naming_the_flag(capsys):
  with pytest.raises(SystemExit):
    step_profile.main(["--steps", "0"])
  assert "--steps 0" in capsys.readouterr().err
