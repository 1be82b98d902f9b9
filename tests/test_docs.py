"""`make docs` covers every public name of `transformer`, `analysis` and `optim`.

Builds the API reference as `make docs` does (Sphinx, warnings as errors) and reads its
inventory (`objects.inv`): every name in a package's `__all__` must be documented, under
the package's own name (`optim.newton_schulz`) or where it is defined
(`transformer.linalg.polar.newton_schulz`); a module must have its page section.
"""

import importlib
import inspect
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("transformer", "analysis", "optim")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
  pytest.importorskip("sphinx", reason="needs the docs extra: pip install -e '.[docs]'")
  from sphinx.util.inventory import InventoryFile

  out = tmp_path_factory.mktemp("docs")
  run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                        "html", str(ROOT / "docs"), str(out)], capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[-4000:]
  with open(out / "objects.inv", "rb") as f:
    inv = InventoryFile.load(f, "", lambda base, uri: uri)
  return {name for entries in inv.values() for name in entries}


def _documented_as(package: str, name: str) -> set[str]:
  """The names under which `package.name` may appear in the reference."""
  obj = getattr(importlib.import_module(package), name)
  names = {f"{package}.{name}"}
  if inspect.ismodule(obj):
    names.add(obj.__name__)
  elif getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):
    names.add(f"{obj.__module__}.{obj.__qualname__}")
  else:  # data (a dict, a tuple): documented in a module that holds it
    names |= {f"{m}.{name}" for m, mod in list(sys.modules.items())
              if m.split(".")[0] in PACKAGES and getattr(mod, name, None) is obj}
  return names


@pytest.mark.slow
@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_in_the_reference(inventory, package):
  public = [n for n in importlib.import_module(package).__all__ if not n.startswith("__")]
  assert public, package
  missing = [n for n in public if not _documented_as(package, n) & inventory]
  assert not missing, f"{package}: not in the built reference: {missing}"


def test_the_reference_pages_name_the_modules_of_the_issue():
  """Without building: the pages that must hold them name them (a fast guard)."""
  analysis_rst = (ROOT / "docs" / "analysis.rst").read_text()
  for module in ("analysis.curvature", "analysis.powerlaw", "analysis.edge_of_stability"):
    assert f".. automodule:: {module}" in analysis_rst
  assert ".. autofunction:: optim.newton_schulz" in (ROOT / "docs" / "optim.rst").read_text()
