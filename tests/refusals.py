"""`refused`: the shared check that a bad input was refused in one line by our own code."""

import pathlib

import transformer


def refused(excinfo, *needles, package) -> None:
  """One line, containing `needles`, raised by a frame of `package` or `transformer.linalg`
  (nothing of jax below it: the input was checked before tracing)."""
  msg = str(excinfo.value)
  assert "\n" not in msg, msg
  for n in needles:
    assert n in msg, msg
  ours = (pathlib.Path(package.__file__).parent,
          pathlib.Path(transformer.__file__).parent / "linalg")
  raiser = pathlib.Path(str(excinfo.traceback[-1].path))
  assert any(root in raiser.parents for root in ours), raiser
