"""Matrices in Transformers: a JAX library that treats a transformer as a train of matrices."""

import os
import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
# The corpora (experiments/corpora/, 7.4 MB: the pinned `stdlib` archive and the `mixed`
# corpus's CPython docs and scripts) go into a wheel only when asked:
# `MATRICES_WITH_CORPUS=1 pip wheel .` (or `pip install .`). An editable install
# (`pip install -e .`, what `make` does) reads them from the checkout either way.
WITH_CORPUS = os.environ.get("MATRICES_WITH_CORPUS", "") not in ("", "0")
CORPUS = ["corpora/*.tar.gz", "corpora/README.md", "corpora/LICENSE-PSF.txt"]
# The one place the version is written: transformer/version.py (exported as `__version__`).
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "transformer" / "version.py").read_text(encoding="utf-8"),
                    re.MULTILINE).group(1)

setup(
    name="matrices-in-transformers",
    version=VERSION,
    description="Explicit-matrix transformers in JAX/Flax with spectral analysis and "
                "matrix-aware optimizers.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # Every package and subpackage of the four, nothing else (no tests/, runs/, examples/).
    packages=find_packages(include=["transformer", "transformer.*", "analysis", "analysis.*",
                                    "optim", "optim.*", "experiments", "experiments.*"]),
    package_data={"transformer": ["py.typed"], "analysis": ["py.typed"], "optim": ["py.typed"],
                  # The corpus archives (experiments/corpora/README.md), if asked.
                  "experiments": ["py.typed", *(CORPUS if WITH_CORPUS else [])]},
    include_package_data=False,
    install_requires=[
        "jax>=0.6.0",
        "flax>=0.10.0",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "numpy>=1.26",
        "scipy>=1.11",
        "matplotlib>=3.8",
        "tqdm>=4.66",
        "tensorboardX>=2.6",
    ],
    extras_require={
        # equinox: the equinox example (examples/muon_equinox.py) and the tests of equinox trees.
        "dev": ["pytest>=8.0", "pytest-xdist>=3.5", "hypothesis>=6.100", "chex>=0.1.88",
                "ruff>=0.5", "equinox>=0.11"],
        # Loading needs only safetensors; transformers and torch are for the conversion tests
        # and `to_hf` users. torch is pinned to the CPU build this project's machines carry.
        "hf": ["safetensors>=0.4", "transformers>=4.44", "torch==2.13.0"],
        # `make docs`: the API reference from the docstrings.
        "docs": ["sphinx>=7.0"],
    },
)
