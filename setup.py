"""dlio_ckpt: DLIO-compatible LLM checkpoint I/O benchmark without GPUs."""

from setuptools import setup

CORE = ["hydra-core>=1.3.2,<1.4", "omegaconf>=2.3,<2.4", "pydantic>=2.7,<3", "numpy>=1.26"]

setup(
    name="dlio_ckpt",
    version="0.1.0",
    description="How fast storage saves and restores large-model checkpoints, without the GPUs",
    python_requires=">=3.11",
    packages=["dlio_ckpt", "dlio_ckpt.backends", "dlio_ckpt.formats", "dlio_ckpt.configs"],
    # configs/ lives at the top of the repository (as DLIO's users expect) and is installed inside
    # the package so that `pip install .` finds the workloads.
    package_dir={"dlio_ckpt.configs": "configs"},
    package_data={"dlio_ckpt.configs": ["*.yaml", "workload/*.yaml"]},
    install_requires=CORE,
    extras_require={
        "mpi": ["mpi4py>=4.0", "mpich>=4.2"],
        "progress": ["rich>=13"],
        "test": ["pytest>=8", "ruff>=0.5", "psutil>=5.9", "mpi4py>=4.0", "mpich>=4.2"],
    },
    entry_points={"console_scripts": ["dlio_ckpt = dlio_ckpt.cli:main"]},
)
