"""dlio_ckpt: how fast storage saves and restores large-model training checkpoints, without GPUs."""

__version__ = "0.1.0"
