"""The registry `experiments.claims.CLAIMS`, checked against itself: its ids, order and count are
read from it, so a new claim is its module and its registry line, and no test lists the ids."""

import os

from experiments import claims
from experiments.claims import CLAIMS


def test_each_topic_registers_its_claims_together_existing_first():
  """Tour order (DESIGN.md): per topic, the existing application, then the new one."""
  assert CLAIMS and all(cid == c.id for cid, c in CLAIMS.items())
  for claim in CLAIMS.values():
    assert claim.kind in ("existing", "new") and claim.preface and claim.topic, claim.id
  topics = [c.topic for c in CLAIMS.values()]
  starts = [t for i, t in enumerate(topics) if i == 0 or topics[i - 1] != t]
  assert len(starts) == len(set(starts)), f"a topic's claims are apart: {topics}"
  for topic in starts:
    kinds = [c.kind for c in CLAIMS.values() if c.topic == topic]
    assert kinds == sorted(kinds, key=("existing", "new").index), (topic, kinds)


def test_every_claim_module_is_registered_once_under_its_own_id():
  """`experiments/claims/<id>.py` (`-` → `_`) holds the `CLAIM` registered under `id`."""
  folder = os.path.dirname(claims.__file__)
  names = sorted(n[:-3] for n in os.listdir(folder) if n.endswith(".py") and n != "__init__.py")
  assert sorted(cid.replace("-", "_") for cid in CLAIMS) == names
  for cid, claim in CLAIMS.items():
    assert getattr(claims, cid.replace("-", "_")).CLAIM is claim, cid


def test_built_claims_state_what_would_refute_them():
  built = [c for c in CLAIMS.values() if c.built]
  assert built
  for claim in built:
    assert claim.thresholds and claim.hypothesis and claim.refuted_if, claim.id
