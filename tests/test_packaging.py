"""The wheel: every package and nothing else, one version, typed, no dev dependency.

Builds the wheel from the repository's files (tracked or not ignored, as a fresh clone has
them) with `pip wheel --no-build-isolation`, as `.ci/examples` does, and reads it back.
"""

import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import analysis
import optim
import transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("transformer", "analysis", "optim", "experiments")
DEV_ONLY = {"pytest", "pytest-xdist", "hypothesis", "ruff", "chex", "sphinx", "torch",
            "transformers"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  if shutil.which("git") is None or not (ROOT / ".git").exists():
    pytest.skip("needs a git checkout to list the repository's files")
  src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
  files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
  for f in files:
    if (ROOT / f).is_file():
      (src / f).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(ROOT / f, src / f)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", str(out), str(src)], check=True,
                 capture_output=True)
  (path,) = out.glob("*.whl")
  return path


def test_one_version_everywhere(wheel):
  assert transformer.__version__ == optim.__version__ == analysis.__version__
  assert re.fullmatch(r"\d+\.\d+\.\d+", transformer.__version__)
  assert wheel.name == f"matrices_in_transformers-{transformer.__version__}-py3-none-any.whl"


def test_every_package_and_nothing_else(wheel):
  names = zipfile.ZipFile(wheel).namelist()
  tops = {n.split("/")[0] for n in names}
  assert tops == set(PACKAGES) | {f"matrices_in_transformers-{transformer.__version__}.dist-info"}
  in_wheel = {str(pathlib.PurePosixPath(n).parent) for n in names if n.endswith("/__init__.py")}
  in_repo = {str(p.parent.relative_to(ROOT).as_posix()) for pkg in PACKAGES
             for p in (ROOT / pkg).rglob("__init__.py")}
  assert in_wheel == in_repo
  for pkg in PACKAGES:
    assert f"{pkg}/py.typed" in names
  assert not [n for n in names if n.startswith(("tests/", "runs/", "examples/", "docs/"))]
  assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installing_pulls_no_dev_dependency(wheel):
  meta = zipfile.ZipFile(wheel).read(
      f"matrices_in_transformers-{transformer.__version__}.dist-info/METADATA").decode()
  requires = [line.split(":", 1)[1].strip() for line in meta.splitlines()
              if line.startswith("Requires-Dist:")]
  core = {re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in requires if "extra ==" not in r}
  assert {"jax", "flax", "optax", "numpy"} <= core
  assert not core & DEV_ONLY, core & DEV_ONLY
  extras = {m.group(1) for r in requires for m in [re.search(r'extra == "(\w+)"', r)] if m}
  assert {"dev", "hf", "docs"} <= extras
