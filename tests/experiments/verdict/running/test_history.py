"""A re-registration is confirmed on fresh seeds; each revision says defect or protocol."""

import os
import re

import pytest

from experiments import jsonio
from experiments.claims import CLAIMS
from experiments.verdict import Claim, Threshold
from experiments.verdict.declare.revision import Revision
from experiments.verdict.running import folders, history, runner
from tests.experiments.verdict.toy_claims import ScaleSizes, valid_results

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
GAIN = Threshold("gain", "treated", "score", baseline="control", supports="> 0.2")
V2 = ("v2: the old line of a version registered before Revision",)


def _run(spec):
  return {"runs": {"treated": {s: {"score": 1.0 + 0.1 * s} for s in spec.seeds},
                   "control": {s: {"score": 0.5} for s in spec.seeds}}}


def _claim(version=3, seeds=(0, 1, 2), tuning_seeds=(100,), revisions=None):
  if revisions is None:
    revisions = (*V2, Revision(3, "protocol", "a new rule, read on fresh seeds"))[:version - 1]
  return Claim(id="toy", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
               thresholds=(GAIN,), run=_run, seeds=seeds, tuning_seeds=tuning_seeds,
               trains=False, QUICK=ScaleSizes("mini"), FULL=ScaleSizes("small"),
               version=version, revisions=revisions)


@pytest.fixture
def kept(tmp_path):
  """A results folder where toy v1 was kept (seeds 0-2, tuning 100), then v2 (the same)."""
  root = tmp_path / "results"
  (root / "toy").mkdir(parents=True)
  v1 = {**valid_results(), "seeds": [0, 1, 2], "tuning_seeds": [100], "git": "aaa"}
  history.write({"toy": [history.entry(v1)]}, str(root / history.HISTORY))
  jsonio.dump_strict({**v1, "version": 2, "verdict": "refuted", "git": "bbb"},
                     str(root / "toy" / "results.json"))
  return str(root)


def test_kept_versions_are_the_history_and_the_current_result(kept):
  got = history.kept("toy", kept)
  assert [(e["version"], e["seeds"], e["tuning_seeds"], e["verdict"]) for e in got] == [
      (1, [0, 1, 2], [100], "supported"), (2, [0, 1, 2], [100], "refuted")]
  assert history.record("toy", kept) == got
  assert history.load(kept)["toy"] == got  # v2 recorded before a keep replaces it


def test_a_new_version_on_the_kept_seeds_is_refused(kept, tmp_path):
  claim = _claim()
  with pytest.raises(ValueError, match=r"^--keep: 'toy' v3 runs on seeds \[0, 1, 2, 100\] that "
                                       r"kept v1, v2 ran on .* Fix: register seeds and "
                                       r"tuning_seeds outside \[0, 1, 2, 100\], e\.g\. seeds "
                                       r"10-12 and tuning seeds from 110\.$"):
    runner.run_claim(claim, root=str(tmp_path / "runs"), log=lambda s: 0, keep=True,
                     results_root=kept)
  assert not os.path.exists(tmp_path / "runs")  # refused before any compute
  runner.run_claim(claim, root=str(tmp_path / "runs"), log=lambda s: 0)  # an unkept run is fine


def test_fresh_seeds_pass_and_the_kept_result_is_recorded(kept, tmp_path):
  claim = _claim(seeds=(10, 11, 12), tuning_seeds=(110,))
  results, _ = runner.run_claim(claim, root=str(tmp_path / "runs"), log=lambda s: 0,
                                keep=True, results_root=kept)
  assert results["version"] == 3 and results["seeds"] == [10, 11, 12]
  assert [e["version"] for e in history.load(kept)["toy"]] == [1, 2]


@pytest.mark.parametrize("seeds, tuning_seeds, overlap", [
    ((10, 11, 12), (2,), "[2]"),  # a tuning seed an earlier version reported
    ((10, 11, 100), (110,), "[100]"),  # a reported seed an earlier version tuned on
])
def test_any_overlap_of_reported_and_tuning_seeds_is_refused(kept, seeds, tuning_seeds, overlap):
  with pytest.raises(ValueError, match=re.escape(f"runs on seeds {overlap} that kept")):
    history.check_fresh(_claim(seeds=seeds, tuning_seeds=tuning_seeds), seeds, kept)


def test_a_kept_version_may_be_kept_again_and_an_older_one_not(kept):
  history.check_fresh(_claim(version=2), (0, 1, 2), kept)  # e.g. an axis added onto it
  history.check_fresh(_claim(version=1), (0, 1, 2), kept)
  empty = os.path.join(kept, "nothing-kept-here")
  history.check_fresh(_claim(seeds=(0, 1, 2)), (0, 1, 2), empty)  # nothing seen yet


def test_a_new_version_must_say_why_with_a_revision(kept):
  legacy = _claim(seeds=(10, 11, 12), tuning_seeds=(110,),
                  revisions=(*V2, "v3: a line, not a Revision"))
  with pytest.raises(ValueError, match=r"v3 is revised by a line, not a Revision"):
    history.check_fresh(legacy, (10, 11, 12), kept)


def test_a_revision_is_a_defect_with_its_test_or_a_protocol_change():
  defect = Revision(4, "defect", "the mask leaked", test="tests/x/test_y.py::test_z")
  assert str(defect) == ("v4 (defect; fails on the old code: tests/x/test_y.py::test_z): the "
                         "mask leaked")
  assert Revision.from_dict(defect.to_dict()) == defect
  with pytest.raises(ValueError, match=r"kind='defect' needs test.*Fix: test="):
    Revision(4, "defect", "the mask leaked")
  with pytest.raises(ValueError, match=r"kind='tweak' is unknown"):
    Revision(4, "tweak", "x")
  with pytest.raises(ValueError, match=r"test='test_z' is not a test id"):
    Revision(4, "defect", "x", test="test_z")
  with pytest.raises(ValueError, match="version must be an integer >= 2"):
    Revision(1, "protocol", "x")
  with pytest.raises(ValueError, match=r"needs exactly 2 revisions.*Fix: add Revision"):
    _claim(revisions=(*V2, Revision(4, "protocol", "the wrong number")))
  claim = _claim()
  assert Claim.from_dict(claim.to_dict()).revisions == claim.revisions


def test_the_committed_history_covers_every_kept_result():
  hist = history.load()
  for cid in CLAIMS:
    path = os.path.join(folders.RESULTS_DIR, cid, "results.json")
    if os.path.exists(path):
      res = jsonio.load_strict(path)
      assert history.entry(res) in hist[cid] or any(
          e["version"] == res.get("version", 1) and set(res["seeds"]) <= set(e["seeds"])
          for e in hist[cid]), cid
      assert [e["version"] for e in hist[cid]] == list(range(1, len(hist[cid]) + 1))


def test_every_defect_revision_names_a_test_that_exists():
  for claim in CLAIMS.values():
    for r in claim.revisions:
      if isinstance(r, Revision) and r.test:
        path, name = r.test.split("::")
        assert f"def {name}(" in open(os.path.join(ROOT, path)).read(), (claim.id, r.test)


def test_the_verdict_history_reads_oldest_first_with_the_reasons(kept):
  assert history.verdict_path("toy", kept) == "v1 supported → v2 refuted"
  assert history.revision_lines(_claim(version=2), kept) == [
      "- v1 supported (seeds [0, 1, 2], tuning seeds [100])",
      "- v2 refuted (seeds [0, 1, 2], tuning seeds [100]): the old line of a version registered "
      "before Revision"]
  assert history.verdict_path("lora").startswith("v1 refuted → v2 inconclusive → v3 refuted")


@pytest.mark.parametrize("cid", list(CLAIMS))
def test_every_registered_version_reads_on_seeds_no_earlier_kept_version_used(cid):
  """Issue 47 item 2, for every claim as registered now: its reported and tuning seeds are
  disjoint from those of every kept version before it, the last revision says why it was
  registered, and the runner's `--keep` rule (`check_fresh`) passes."""
  c = CLAIMS[cid]
  earlier = [e for e in history.kept(cid) if e["version"] < c.version]
  used = {s for e in earlier for s in (*e["seeds"], *e["tuning_seeds"])}
  assert not used & {*c.seeds, *c.tuning_seeds}, (cid, sorted(used & {*c.seeds}))
  if earlier:
    assert isinstance(c.revisions[-1], Revision) and c.revisions[-1].version == c.version
  history.check_fresh(c, c.seeds)
