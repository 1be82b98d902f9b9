"""Matrices in Transformers: a JAX library that treats a transformer as a train of matrices."""

from setuptools import find_packages, setup

setup(
    name="matrices-in-transformers",
    version="0.1.0",
    description="Explicit-matrix transformers in JAX/Flax with spectral analysis and "
                "matrix-aware optimizers.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["transformer*", "analysis*", "optim*", "experiments*"]),
    install_requires=[
        "jax>=0.6.0",
        "flax>=0.10.0",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "chex>=0.1.88",
        "numpy>=1.26",
        "matplotlib>=3.8",
        "tqdm>=4.66",
        "tensorboardX>=2.6",
    ],
    extras_require={
        "dev": ["pytest>=8.0", "pytest-xdist>=3.5", "hypothesis>=6.100", "scipy>=1.11",
                "ruff>=0.5"],
        # Loading needs only safetensors; transformers and torch are for the conversion tests
        # and `to_hf` users. torch is pinned to the CPU build this project's machines carry.
        "hf": ["safetensors>=0.4", "transformers>=4.44", "torch==2.13.0"],
    },
)
