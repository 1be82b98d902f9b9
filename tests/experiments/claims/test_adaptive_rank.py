"""The adaptive-rank claim: the allocation against brute force, the needed rank against direct
computation, its primary threshold."""

import itertools

import numpy as np
import pytest
import scipy.linalg
import scipy.stats

from experiments.claims import adaptive_rank
from experiments.verdict.arithmetic import rule
from experiments.verdict.arithmetic.rule import decide
from experiments.verdict.declare.clause import conjunction
from experiments.verdict.running import history
from tests.experiments.claims.rank_helpers import seed_runs

# ----------------------------------------------------------------------------- adaptive-rank


def _brute_force(losses, ranks, budget):
  B = losses.shape[1]
  return min(sum(losses[ranks.index(r), b] for b, r in enumerate(combo))
             for combo in itertools.product(ranks, repeat=B) if np.mean(combo) <= budget)


@pytest.mark.parametrize("seed", range(4))
def test_allocate_against_brute_force_and_uniform(seed):
  """On non-convex curves: within budget, never worse than uniform, near the exact optimum."""
  rng = np.random.default_rng(seed)
  ranks = [1, 2, 4, 8]
  B = 5
  # Decreasing but non-convex curves (random drops), which broke the old greedy allocator.
  drops = rng.uniform(0, 1, (3, B)) * rng.choice([0.05, 1.0], (3, B))
  losses = 5 - np.concatenate([np.zeros((1, B)), np.cumsum(drops, 0)])
  for budget in (2, 4):
    chosen = adaptive_rank.allocate(losses, ranks, budget)
    got = sum(losses[ranks.index(r), b] for b, r in enumerate(chosen))
    assert chosen.mean() <= budget
    assert got <= losses[ranks.index(budget)].sum() + 1e-12  # uniform is feasible
    best = _brute_force(losses, ranks, budget)
    assert got >= best - 1e-12
    # At most one sequence's span off the optimum (one item of the LP relaxation rounded).
    assert got - best <= (losses[0] - losses[-1]).max() + 1e-12
    assert adaptive_rank.picked_loss(losses, ranks, chosen) == pytest.approx(got / B)
  with pytest.raises(ValueError, match="below the smallest rank"):
    adaptive_rank.allocate(losses, ranks, 0.5)


def test_allocate_finds_the_exact_optimum_on_convex_curves():
  ranks = [1, 2, 4, 8]
  # Sequence 0 gains a lot from rank, sequence 1 nothing: give 0 the budget 1 would waste.
  losses = np.array([[4.0, 1.0], [2.0, 1.0], [1.0, 1.0], [0.5, 1.0]])
  assert adaptive_rank.allocate(losses, ranks, 4).tolist() == [4, 4]  # uniform ties: uniform
  assert adaptive_rank.allocate(losses, ranks, 4.5).tolist() == [8, 1]
  assert _brute_force(losses, ranks, 4.5) == pytest.approx(0.5 + 1.0)


def test_needed_rank_and_measure_against_direct_computation():
  rng = np.random.default_rng(1)
  ranks = [1, 2, 4, 8]
  full = rng.uniform(1.0, 3.0, 40)
  excess = rng.uniform(0, 0.2, (1, 40)) * np.array([[8.0], [3.0], [0.5], [0.0]])
  losses = full + excess
  prefix = losses + rng.normal(0, 0.05, losses.shape)
  tol = 0.01 * full.mean()
  need = np.array([next(r for i, r in enumerate(ranks) if losses[i, b] <= full[b] + tol)
                   for b in range(40)])
  np.testing.assert_array_equal(adaptive_rank.needed_rank(losses, ranks), need)
  out = adaptive_rank.measure(losses, prefix, ranks, {"b": 2}, model_loss=full.mean())
  assert out["needs"]["spearman_loss_rank"] == pytest.approx(scipy.stats.spearmanr(full,
                                                                                   need)[0])
  assert out["needs"]["full_rank_error"] == pytest.approx(0, abs=1e-12)
  b = out["b"]
  policy = adaptive_rank.allocate(prefix, ranks, 2)
  want = (adaptive_rank.picked_loss(losses, ranks, policy) - losses[1].mean()) / full.mean()
  assert b["policy_vs_uniform"] == pytest.approx(want)
  assert b["oracle_vs_uniform"] <= 0 and b["policy_over_budget"] <= 0
  # A policy that reads the true curves is the oracle.
  same = adaptive_rank.measure(losses, losses, ranks, {"b": 2})["b"]
  assert same["policy_vs_uniform"] == pytest.approx(same["oracle_vs_uniform"])


SEEDS = (10, 11, 12, 13, 14)


def _runs(diffs, rho=(0.4,) * 5, error=(1e-7,) * 5):
  return seed_runs({("budget-quarter", "policy_vs_uniform"): diffs,
                    ("budget-quarter", "policy_over_budget"): (0.0,) * 5,
                    ("needs", "spearman_loss_rank"): rho,
                    ("needs", "full_rank_error"): error}, SEEDS)


@pytest.mark.parametrize("diffs, expected", [
    ((-0.006, -0.005, -0.004, -0.005, -0.006), "supported"),
    ((0.001, 0.003, 0.002, 0.004, 0.003), "refuted"),    # the policy loses: no ratio hides it
    ((-0.0005, -0.001, 0.0, -0.0008, -0.0002), "refuted"),  # gains, but inside the margin
    ((-0.01, 0.004, -0.006, 0.002, -0.003), "inconclusive"),
])
def test_adaptive_rank_clause_one_is_a_difference_with_a_margin(diffs, expected):
  claim = adaptive_rank.CLAIM
  runs = _runs(diffs)
  parts = rule.clause_verdicts(claim, runs, SEEDS, indicative=False)
  assert [p["verdict"] for p in parts] == [expected, "supported"]
  assert rule.verdict(claim, runs, SEEDS, indicative=False)[0] == conjunction(
      [p["verdict"] for p in parts])
  runs = _runs(diffs, error=(1e-7, 1e-7, 1e-3, 1e-7, 1e-7))  # the instrument is broken
  assert decide(claim.thresholds, runs, SEEDS)[0] == "inconclusive"


@pytest.mark.parametrize("rho, expected", [
    ((0.4, 0.35, 0.5, 0.45, 0.38), "supported"),
    ((-0.1, 0.0, 0.05, -0.05, 0.02), "refuted"),   # hard inputs do not need more rank
    ((0.3, -0.1, 0.25, 0.0, 0.2), "inconclusive"),
])
def test_adaptive_rank_clause_two_reads_the_spearman_above_a_small_effect(rho, expected):
  parts = rule.clause_verdicts(adaptive_rank.CLAIM, _runs((-0.006,) * 5, rho), SEEDS,
                               indicative=False)
  assert parts[1]["verdict"] == expected and parts[0]["verdict"] == "supported"
  assert [e.name for e in adaptive_rank.CLAIM.extensions] == ["headroom", "other budgets"]


def test_v3_reads_on_seeds_no_kept_version_used_and_on_the_test_split():
  claim = adaptive_rank.CLAIM
  assert claim.version == 3 and claim.seeds == SEEDS and claim.tuning_seeds == ()
  assert adaptive_rank.FULL.split == "test" and claim.revisions[-1].kind == "protocol"
  used = {s for e in history.kept(claim.id) if e["version"] < claim.version
          for s in (*e["seeds"], *e["tuning_seeds"])}
  assert used and not used & {*claim.seeds, *claim.tuning_seeds}
  history.check_fresh(claim, claim.seeds)
