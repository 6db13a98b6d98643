"""The workload configuration: DLIO's YAML keys and ours, composed by Hydra, validated by pydantic.

One module per job: :mod:`~dlio_ckpt.config.schema` (the sections, each with its own rules),
:mod:`~dlio_ckpt.config.rules` (the rules across sections), :mod:`~dlio_ckpt.config.world` (the rules
that need the world size), :mod:`~dlio_ckpt.config.compose` (Hydra's composition and the messages that
teach), :mod:`~dlio_ckpt.config.keys` (every key, described), :mod:`~dlio_ckpt.config.references` (the
reference tools' presets), :mod:`~dlio_ckpt.config.accelerators` (MLPerf's accelerators). What the rest
of the tool reads is re-exported here; the world-size rules are not: only the plan layer's ``check_job`` runs
them, from :mod:`~dlio_ckpt.config.world`.
"""

from dlio_ckpt.config.compose import (
    available_workloads,
    check_override_keys,
    compose,
    config_root,
    parse_overrides,
    validate,
)
from dlio_ckpt.config.keys import describe_keys, workload_keys
from dlio_ckpt.config.schema import (
    EMULATOR_ONLY,
    Checkpoint,
    FSDPSettings,
    GDSSettings,
    Hosts,
    LightningSettings,
    Model,
    Moe,
    Parallelism,
    Restore,
    Storage,
    Transformer,
    Workload,
    tier_key,
)

__all__ = ["EMULATOR_ONLY", "Checkpoint", "FSDPSettings", "GDSSettings", "Hosts",
           "LightningSettings", "Model", "Moe", "Parallelism", "Restore", "Storage", "Transformer", "Workload",
           "available_workloads", "check_override_keys", "compose", "config_root",
           "describe_keys", "parse_overrides", "tier_key", "validate", "workload_keys"]
