"""The one thing pyproject.toml cannot say: configs/ lives at the top of the repository (where DLIO's
users look for workloads) and is installed inside the package as ``dlio_ckpt.configs``, so that
``pip install .`` finds the workloads. Everything else (metadata, dependencies, extras, the packages,
found) is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["dlio_ckpt*"]), "dlio_ckpt.configs"],
    package_dir={"dlio_ckpt.configs": "configs"},
    package_data={"dlio_ckpt.configs": ["*.yaml", "workload/*.yaml"]},
)
