"""The softmax-kernel claim, v4: the sentence in two clauses, each settled by proof and decided
by its own thresholds, on fresh seeds and the test split."""

import pytest

from experiments.claims import softmax_kernel as sk
from experiments.verdict.arithmetic import rule
from experiments.verdict.running import history
from tests.experiments.claims.rank_helpers import seed_runs

SEEDS = (10, 11, 12, 13, 14)


def _runs(bidirectional, causal, tied):
  return seed_runs({("trained-bidirectional", "frac_kernel"): bidirectional,
                    ("trained-causal", "frac_kernel"): causal,
                    ("tied-bidirectional", "frac_kernel"): tied}, SEEDS)


@pytest.mark.parametrize("trained, tied, expected", [
    ((0.0,) * 5, (1.0,) * 5, ["refuted", "supported"]),  # what the proof predicts
    ((1.0,) * 5, (1.0,) * 5, ["supported", "supported"]),  # would contradict the proof
    ((0.0,) * 5, (1.0, 1.0, 0.9, 1.0, 1.0), ["inconclusive", "inconclusive"]),  # instrument
    ((0.0,) * 5, (0.9,) * 5, ["inconclusive", "refuted"]),  # a tied head failing every seed
])
def test_each_clause_reads_its_own_thresholds(trained, tied, expected):
  claim = sk.CLAIM
  parts = rule.clause_verdicts(claim, _runs(trained, trained, tied), SEEDS, indicative=False)
  assert [p["verdict"] for p in parts] == expected
  assert [p["proof"] for p in parts] == [True, True]


def test_the_clauses_split_the_sentence_and_the_headline_is_refuted_by_proof():
  claim = sk.CLAIM
  assert [c.thresholds for c in claim.clauses] == [(sk.BIDIRECTIONAL, sk.CAUSAL), (sk.TIED,)]
  v, why, _ = rule.verdict(claim, _runs((0.0,) * 5, (0.0,) * 5, (1.0,) * 5), SEEDS,
                           indicative=False)
  assert v == "refuted" and "refuted (proof)" in why and "supported (proof, verified" in why


def test_v4_reads_on_seeds_no_kept_version_used_and_on_the_test_split():
  claim = sk.CLAIM
  assert claim.version == 4 and claim.seeds == SEEDS and claim.tuning_seeds == ()
  assert sk.FULL.split == "test" and claim.revisions[-1].kind == "protocol"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)
