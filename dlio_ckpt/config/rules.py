"""The rules that read more than one section of the workload: what a layout, the tiers or a real mode
cannot do with the rest of the configuration, refused before anything is written, each naming key, value
and rule (exit 2). The layout's own rules (its ``check``, the keys it reads) run in the plan layer's step
after these (:func:`dlio_ckpt.plan.layouts.check_job`): validating a workload runs no layout code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlio_ckpt.cluster.placement import surviving_keeper
from dlio_ckpt.config.schema import EMULATOR_ONLY, Checkpoint, Restore, Storage, tier_key
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.dtypes import TRAINABLE
from dlio_ckpt.registry import BACKENDS, MODES

if TYPE_CHECKING:
    from dlio_ckpt.config.schema import Workload


def check(workload: Workload) -> None:
    """Every rule across sections, in the order a reader meets the sections."""
    layout_rules(workload)
    tier_rules(workload)
    real_mode_rules(workload)


def layout_rules(workload: Workload) -> None:
    par, ck = workload.model.parallelism, workload.checkpoint
    key = "workload.model"
    if workload.model.num_layers < par.pipeline:
        raise ConfigError(f"{key}.num_layers", workload.model.num_layers,
                          f"must be >= model.parallelism.pipeline ({par.pipeline}): every "
                          "pipeline stage needs a layer")
    if par.zero_stage == 3 and par.pipeline != 1:
        raise ConfigError(f"{key}.parallelism.pipeline", par.pipeline,
                          "must be 1 with zero_stage=3 (ZeRO-3 does not combine with "
                          "pipeline parallelism)")
    if ck.mode == "subset" and par.data is None:
        raise ConfigError(f"{key}.parallelism.data", None,
                          "is required when checkpoint.mode=subset (the data-parallel size of "
                          "the full job whose first ranks this run emulates)")
    if ck.mode == "default" and par.data is not None:
        raise ConfigError(f"{key}.parallelism.data", par.data,
                          "is only allowed with checkpoint.mode=subset; in default mode the "
                          "data-parallel size is world size // (tensor*pipeline)")
    if ck.miniature == "sample" and ck.scale == 1.0:
        raise ConfigError("workload.checkpoint.miniature", "sample", "means nothing at checkpoint.scale=1 (the full "
                          "size): set checkpoint.scale below 1, or leave checkpoint.miniature out")


def tier_rules(workload: Workload) -> None:
    """Tiers that cannot work are refused before anything is written: one place listed twice, a
    storage a drain cannot copy through, steps the read phase needs that keep_last removes."""
    ck, everywhere = workload.checkpoint, workload.storages
    if ck.read_tier > len(workload.tiers):
        raise ConfigError("workload.checkpoint.read_tier", ck.read_tier,
                          f"must be <= the number of tiers ({len(workload.tiers)}): 0 reads from storage")
    seen: dict[tuple[str, str, str], str] = {}
    for k, st in enumerate(everywhere):
        key = tier_key(k)
        if st.identity() in seen:
            raise ConfigError(f"{key}.storage_root", st.storage_root,
                              f"is the same storage as {seen[st.identity()]}: each tier must be another place")
        seen[st.identity()] = key
        if workload.tiers and not BACKENDS[st.storage_type].tier:
            raise ConfigError(f"{key}.storage_type", st.storage_type,
                              "cannot be a tier: a drain reads each file back and verifies it on the host")
        if st.scope != "shared" and not BACKENDS[st.storage_type].local_folder:
            raise ConfigError(f"{key}.scope", st.scope, f"needs a folder on each host (local_fs); storage_type="
                              f"{st.storage_type} is one store every host reaches: scope shared")
        if st.scope != "peer" and (st.replicas != 1 or st.replication != "ring"):
            raise ConfigError(f"{key}.replicas" if st.replicas != 1 else f"{key}.replication",
                              st.replicas if st.replicas != 1 else st.replication, "applies to scope=peer only")
        if st.scope == "peer" and k == 0:
            raise ConfigError(f"{key}.scope", "peer", "cannot be the first storage: a peer tier keeps copies "
                              "of what a tier above holds (list it in workload.tiers, after a node tier)")
        if st.scope == "peer" and (bad := _peer_rule(st, workload.hosts.simulate)):
            raise ConfigError(f"{key}.replicas", st.replicas, bad)
    lost = workload.restore.lost_hosts
    read_tiers = [ck.read_tier, *([lost_hosts_tier(workload)] if lost else [])]
    for t in read_tiers:
        reader = everywhere[t]
        if ck.num_checkpoints_read and reader.keep_last and reader.keep_last < ck.num_checkpoints_write:
            key = tier_key(t)
            raise ConfigError(f"{key}.keep_last", reader.keep_last,
                              f"keeps only the newest {reader.keep_last} of {ck.num_checkpoints_write} steps "
                              f"there, and the read phase reads steps 1..{ck.num_checkpoints_read} from it: "
                              "raise keep_last to num_checkpoints_write, or read from another tier "
                              "(checkpoint.read_tier)")
    if everywhere[ck.read_tier].scope == "peer":
        raise ConfigError("workload.checkpoint.read_tier", ck.read_tier, f"{tier_key(ck.read_tier)} is a peer "
                          "tier: each host keeps other hosts' parts there, read only by a lost host's "
                          "replacement (restore.lost_hosts); read from a node or shared tier")
    asked = workload.restore
    if everywhere[ck.read_tier].scope == "node" and (asked.world_size or asked.tensor or asked.expert):
        key = "world_size" if asked.world_size else "tensor" if asked.tensor else "expert"
        raise ConfigError(f"workload.restore.{key}", getattr(asked, key), "reshards, reading other ranks' files, "
                          f"and {tier_key(ck.read_tier)} (the read tier) is node-scoped: each host holds only its "
                          "own; read from a shared tier (checkpoint.read_tier)")
    if everywhere[ck.read_tier].scope == "node" and ck.recovery_rank_shift:
        raise ConfigError("workload.checkpoint.recovery_rank_shift", True, f"reads another host's files, and "
                          f"{tier_key(ck.read_tier)} (the read tier) is node-scoped: each host holds only its "
                          "own; declare hosts lost instead (restore.lost_hosts), or read from a shared tier")


def lost_hosts_tier(workload: Workload, hosts: int = 0) -> int:
    """The tier lost hosts restore from: the first peer or shared one below the read tier, the fastest that
    still holds their share (a node tier below is each host's own, gone with the host); an error (exit 2)
    where there is none."""
    ck, lost = workload.checkpoint, workload.restore.lost_hosts
    if workload.storages[ck.read_tier].scope != "node":
        raise ConfigError("workload.restore.lost_hosts", lost, f"needs a node-scoped read tier: "
                          f"{tier_key(ck.read_tier)} is shared, and every host reads it alike")
    hosts = hosts or workload.hosts.simulate  # 0: not known before the run (real hosts), checked again once placed
    if hosts and (beyond := [h for h in lost if h >= hosts]):
        raise ConfigError("workload.restore.lost_hosts", lost, f"host {beyond[0]} is not one of the job's "
                          f"{hosts} hosts (0..{hosts - 1}, in the order of their first rank)")
    for k in range(ck.read_tier + 1, len(workload.storages)):
        st = workload.storages[k]
        if st.scope == "shared" or st.scope == "peer" and (not hosts or all(
                surviving_keeper(hosts, h, st.replicas, st.replication, lost) is not None for h in lost)):
            return k
    raise ConfigError("workload.restore.lost_hosts", lost, f"no tier below {tier_key(ck.read_tier)} holds a "
                      "lost host's share: every tier after it is node-scoped (gone with the host); add a "
                      "peer or shared tier (workload.tiers) for the restore to read from")


def real_mode_rules(workload: Workload) -> None:
    """What a real mode cannot honour is refused here, never silently dropped (DLIO's defect)."""
    if workload.mode == "emulated":
        return
    st, ck, mode = workload.storage, workload.checkpoint, workload.mode
    if workload.model.family != "dense":
        raise ConfigError("workload.model.family", workload.model.family, f"mode={mode} trains the dense Llama "
                          "of real/llama.py; MoE models run emulated (leave workload.mode out)")
    supported = [name for name, entry in BACKENDS.items() if entry.kind in MODES[mode].storage]
    if st.storage_type not in supported:
        raise ConfigError("workload.storage.storage_type", st.storage_type,
                          f"mode={mode} supports storage_type {', '.join(supported)}")
    for name in EMULATOR_ONLY:
        value = getattr(ck, name)
        if value != Checkpoint.model_fields[name].default:
            raise ConfigError(f"workload.checkpoint.{name}", value, f"applies to emulated runs only: in "
                              f"mode={mode} the framework decides it; leave it out")
    if workload.tiers or st.keep_last is not None or ck.read_tier:
        raise ConfigError("workload.tiers" if workload.tiers else "workload.storage.keep_last" if st.keep_last
                          else "workload.checkpoint.read_tier",
                          [t.storage_root for t in workload.tiers] or st.keep_last or ck.read_tier,  # no options: keys
                          f"tiers apply to emulated runs only: in mode={mode} the framework saves to one storage")
    if workload.restore != Restore():
        raise ConfigError("workload.restore", workload.restore.model_dump(exclude_defaults=True),
                          f"applies to emulated runs only: mode={mode} loads what it saved, as it saved it")
    if st.scope != "shared" or workload.hosts.simulate:
        key, value = ("workload.storage.scope", st.scope) if st.scope != "shared" else \
            ("workload.hosts.simulate", workload.hosts.simulate)
        raise ConfigError(key, value, f"applies to emulated runs only: in mode={mode} the framework places "
                          "its files and its processes")
    if st.storage_options.get("spread_prefixes"):
        raise ConfigError("workload.storage.storage_options.spread_prefixes", st.storage_options["spread_prefixes"],
                          "applies to emulated runs only: in real modes the framework names the objects")
    if st.storage_options.get("library", "s3torchconnector") != "s3torchconnector":
        raise ConfigError("workload.storage.storage_options.library", st.storage_options["library"],
                          f"applies to emulated runs only: mode={mode} writes through its framework's own client")
    if ck.num_checkpoints_write == 0:
        raise ConfigError("workload.checkpoint.num_checkpoints_write", 0,
                          f"must be >= 1 in mode={mode} (it reads back what this run saved)")
    store = {"s3": "s3", "dataflux": "gcs"}.get(workload.lightning.checkpoint_io)
    if mode == "lightning" and store and st.storage_type != store:
        raise ConfigError("workload.lightning.checkpoint_io", workload.lightning.checkpoint_io,
                          f"needs storage_type={store} (storage_type is {st.storage_type})")
    if mode == "fsdp" and workload.model.model_datatype not in TRAINABLE:
        raise ConfigError("workload.model.model_datatype", workload.model.model_datatype,
                          f"mode=fsdp trains in one of {', '.join(TRAINABLE)}")


def _peer_rule(st: Storage, hosts: int) -> str | None:
    """What a peer tier's replication cannot do on ``hosts`` hosts (0: not known before the run)."""
    if hosts and st.replicas >= hosts:
        return f"must be below the number of hosts ({hosts}): a host cannot keep its own copy as a peer's"
    if hosts and st.replication == "clique" and hosts % (st.replicas + 1):
        return f"cliques of replicas+1={st.replicas + 1} hosts must divide the {hosts} hosts"
    return None


