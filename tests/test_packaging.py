"""The wheel: every package and nothing else, one version, typed, no dev dependency.

Builds the wheel from the repository's files (tracked or not ignored, as a fresh clone has
them) with `pip wheel --no-build-isolation`, as `.ci/examples` does, and reads it back.
"""

import os
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
            "transformers", "equinox"}


def _build(tmp_path_factory, **env):
  """The wheel of the repository's files (as a fresh clone has them), with `env` set."""
  if shutil.which("git") is None or not (ROOT / ".git").exists():
    pytest.skip("needs a git checkout to list the repository's files")
  src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
  files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
  for f in files:
    if (ROOT / f).is_file():
      (src / f).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(ROOT / f, src / f)
  environ = {k: v for k, v in os.environ.items() if k != "MATRICES_WITH_CORPUS"}
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", str(out), str(src)], check=True,
                 capture_output=True, env={**environ, **env})
  (path,) = out.glob("*.whl")
  return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  return _build(tmp_path_factory)


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


def test_the_text_corpus_ships_only_when_asked(wheel, tmp_path_factory):
  """The wheel holds no corpus text by default; `MATRICES_WITH_CORPUS=1` puts it in (an
  editable install reads it from the checkout either way)."""
  corpus = {"experiments/corpora/cpython-3.11.2.tar.gz", "experiments/corpora/README.md",
            "experiments/corpora/python-3.11.7-stdlib.tar.gz",
            "experiments/corpora/LICENSE-PSF.txt"}
  assert not [n for n in zipfile.ZipFile(wheel).namelist() if "corpora/" in n]
  asked = _build(tmp_path_factory, MATRICES_WITH_CORPUS="1")
  names = set(zipfile.ZipFile(asked).namelist())
  assert corpus <= names
  assert names - corpus == set(zipfile.ZipFile(wheel).namelist())  # and nothing else changes


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
  # The equinox example's dependency: in `[dev]` (`make test` runs the equinox tests), and
  # installed by `.ci/examples`, which runs examples/muon_equinox.py from the wheel.
  assert any(r.startswith("equinox") and 'extra == "dev"' in r for r in requires), requires
  assert (ROOT / "examples" / "muon_equinox.py").exists()
  assert '"equinox>=' in (ROOT / ".ci" / "examples").read_text()


def test_a_users_transformer_py(tmp_path):
  """Beside a user's `transformer.py`, `import optim` / `import analysis` refuse in one line
  naming it; run from a package (`python -m userproj.main`) both modules live side by side."""
  pkg = tmp_path / "userproj"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "transformer.py").write_text('NAME = "mine"\n')
  (pkg / "main.py").write_text(
      "import optim, transformer\nfrom userproj import transformer as mine\n"
      "print(mine.NAME, hasattr(transformer, 'init'), optim.labels.__module__)\n")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  for package in ("optim", "analysis"):
    run = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=pkg, env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: {package}: `import transformer` found "), last
    assert str(pkg / "transformer.py") in last and "python -m" in last
  run = subprocess.run([sys.executable, "-m", "userproj.main"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
  assert run.stdout.split() == ["mine", "True", "optim.roles"], run.stderr[-2000:]
