"""MLPerf Storage 3.0 and the 4.0 draft: each rule failing and passing on run folders made through the
real result writers, the provenance hash held to mlpstorage's own values, and DLIO's own run folder judged by
the new rules (in this process; the facts a real run records, its invocation times, file systems and
accelerator: tests/e2e/test_mlperf_editions.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.results.provenance import core_config
from dlio_ckpt.tools.readers.mlperf import MODELS
from tests.support import DLIO_RUN
from tests.support.cli import load
from tests.support.made_runs import GIB, LLAMA3_8B, keep_phase, make_run
from tests.support.mlperf_rules import said, verdicts

# mlcommons/storage mlpstorage_py/rules/editions.yaml: the comparability class of each model, the
# core_config hash of DLIO's template for it (configs/dlio/workload/llama3_*.yaml)
CLASS_HASHES = {"llama3_8b": "68df04b7240e3fb0", "llama3_70b": "3c53fe70d64f91d4",
                "llama3_405b": "7adcfa87a5c4c8e6", "llama3_1t": "45fd627ad9dc5f4c"}
LLAMA3_70B = {"model": {"name": "llama_70b", "num_layers": 80, "model_datatype": "fp16", "optimizer_datatype": "fp32",
                        "parallelism": {"tensor": 8, "pipeline": 1, "zero_stage": 3},
                        "transformer": {"vocab_size": 128256, "hidden_size": 8192, "ffn_hidden_size": 28672,
                                        "num_attention_heads": 128, "num_kv_heads": 8}},
              "checkpoint": {"fsync": True}}
SEPARATE = {"checkpoint": {"mount_point": "/mnt/lustre", "type": "lustre", "device": "0:51"},
            "results": {"mount_point": "/", "type": "ext4", "device": "254:0"}, "same_file_system": False}


@cache
def _shipped(name: str, overrides: tuple[str, ...]) -> str:
    return json.dumps(compose([f"workload={name}", *overrides])[1])


def shipped(name: str = "llama3_8b", *overrides: str) -> dict:
    """Our workload YAML of an MLPerf model as a run records it (.hydra/config.yaml), with ``overrides``."""
    return json.loads(_shipped(name, overrides))


@pytest.mark.parametrize("name", sorted(CLASS_HASHES))
def test_our_mlperf_workloads_hash_into_mlpstorages_classes(name):
    """core_config computed as mlpstorage computes it: our workload YAML of each model, as a run
    records it, hashes to the class mlpstorage's editions.yaml gives DLIO's template of it, the class
    check holds a CLOSED run to."""
    raw = shipped(name)
    stamp = core_config(raw)
    assert stamp["hash"] == CLASS_HASHES[name] and stamp["allowlist"] == "checkpointing@1"
    assert next(m.class_hash for m in MODELS if m.name == name) == CLASS_HASHES[name]
    assert not {"checkpoint.checkpoint_folder", "checkpoint.num_checkpoints_read"} & set(stamp["keys"])
    # values canonicalised as mlpstorage does: "True" and True, "5.0", 5.0 and 5 are one workload
    spelled = json.loads(json.dumps(raw))
    spelled["checkpoint"].update(fsync="True", time_between_checkpoints="5.0")
    assert core_config(spelled)["hash"] == CLASS_HASHES[name]


def conforming(folder: Path, config: dict | None = None, processes: int = 8, size_gib: float = 105, *,
               accelerator: str | None = "b200", invocation: tuple[float, float] = (0.0, 130.0),
               file_systems: dict | None = SEPARATE, stamp: str | None = CLASS_HASHES["llama3_8b"],
               checkpoints: int = 10, **made) -> Path:
    """A run that meets 4.0's rules (one invocation of 10 writes and 10 reads of llama3_8b on b200s,
    folders apart, our llama3_8b.yaml as shipped), less what the arguments change. Its provenance.json holds
    ``stamp`` (None: no file), by default mlpstorage's recorded class of the 8B written literally above, never a
    hash computed by the code under test: a PASS then needs the run's config to hash to mlpstorage's value."""
    config = shipped() if config is None else config
    files = 6
    run = make_run(folder, processes, checkpoints, config=config,
                   bytes_per_process=int(size_gib * GIB / processes) // files * files, files=files, **made)
    summary = load(run / "summary.json")
    begin = datetime(2026, 11, 24, 8, 0, 0)
    summary.update(accelerator_type=accelerator,
                   invocation_start_time=(begin + timedelta(0, invocation[0])).isoformat(),
                   invocation_end_time=(begin + timedelta(0, invocation[1])).isoformat())
    if file_systems is not None:
        summary["file_systems"] = file_systems
    (run / "summary.json").write_text(json.dumps(summary))
    if stamp is not None:
        (run / "provenance.json").write_text(json.dumps({"core_config": {
            "algorithm": "core-config-v1", "allowlist": "checkpointing@1", "hash": stamp}}))
    return run


def test_a_conforming_run_passes_every_rule_of_both_editions(tmp_path):
    run = conforming(tmp_path / "ok")
    for edition in ("3.0", "4.0"):
        assert set(verdicts([run], edition).values()) == {"PASS"}, verdicts([run], edition)
    assert "8 x b200 at 180 GB = 1440 vs a 105.00 GiB checkpoint" in said([run], "accelerator memory")
    assert "105.00 GiB (112.74 GB decimal)" in said([run], "checkpoint size")


def _retimed(run: Path) -> Path:
    """The summary's first save reported at half its slowest process's duration (a figure not recomputed)."""
    summary = load(run / "summary.json")
    summary["checkpoints"]["save"][0]["duration_seconds"] /= 2
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _two(tmp_path: Path, gap: float) -> list[Path]:
    write = keep_phase(conforming(tmp_path / "w", invocation=(0.0, 130.0)), "save")
    return [write, keep_phase(conforming(tmp_path / "r", invocation=(130.0 + gap, 200.0)), "load")]


# Each rule made to fail by one change to a conforming run: the rule's verdict per edition (absent: the edition
# has no such rule), words of its "actual" that name the cause, and the other rules the same change breaks.
BROKEN = {
    "model": (lambda t: [conforming(t, shipped("llama3_8b", "++workload.model.num_layers=31"))],
              {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"}, "closest is llama3_8b, but num_layers=31 (not 32)",
              {"process count", "checkpoint size", "provenance"}),
    "process count": (lambda t: [conforming(t, processes=16)], {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"},
                      "16 processes for 16 simulated accelerators", set()),
    "subset": (lambda t: [conforming(t, shipped("llama3_8b", "++workload.checkpoint.mode=subset",
                                                "++workload.model.parallelism.data=2"), 16)],
               {"3.0": "FAIL", "4.0": "FAIL"}, "subset run of llama3_8b on 16 processes",
               {"process count", "provenance"}),
    "accelerators per host": (lambda t: [conforming(t, per_host=4)], {"3.0": "FAIL", "4.0": "FAIL"},
                              "4 per host (8 on 2 hosts)", set()),
    "emulated I/O": (lambda t: [conforming(t, shipped("llama3_8b", "++workload.mode=fsdp"))],
                     {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"},
                     "workload.mode='fsdp': the rules emulate DLIO's I/O (mode=emulated)", set()),
    "checkpoint size": (lambda t: [conforming(t, size_gib=100)], {"3.0": "FAIL", "4.0": "FAIL"},
                        "100.00 GiB", set()),
    "accelerator memory": (lambda t: [conforming(t, accelerator="tpu")], {"3.0": "WARN", "4.0": "FAIL"},
                           "tpu: not in Table 3", set()),
    "10 writes then 10 reads": (lambda t: [conforming(t, checkpoints=9)], {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"},
                                "9 written, 9 read in one run", set()),
    "write-to-read gap": (lambda t: _two(t, 45.0), {"3.0": "WARN", "4.0": "FAIL"},
                          "45.0 s from the write's invocation end", set()),
    "fsync": (lambda t: [conforming(t, fsync=False)], {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"},
              "checkpoint.fsync=True; False", set()),
    "page cache": (lambda t: [conforming(t, read_cache="page cache")], {"2.0": "FAIL", "3.0": "WARN", "4.0": "WARN"},
                   "105.00 GiB per host, 256.0 GiB memory; reads: page cache", set()),
    "separate file systems": (lambda t: [conforming(t, file_systems={**SEPARATE, "same_file_system": True})],
                              {"3.0": "WARN", "4.0": "FAIL"}, "the same file system", set()),
    "provenance": (lambda t: [conforming(t, stamp=CLASS_HASHES["llama3_70b"])], {"3.0": "WARN", "4.0": "FAIL"},
                   f"core_config {CLASS_HASHES['llama3_70b']}, but its config hashes to {CLASS_HASHES['llama3_8b']}",
                   set()),
    "max duration, min throughput": (lambda t: [_retimed(conforming(t))], {"2.0": "FAIL", "3.0": "FAIL", "4.0": "FAIL"},
                                     "save_ckpt1: reported", set()),
    "full-size checkpoint": (lambda t: [conforming(t, shipped("llama3_8b", "++workload.checkpoint.scale=0.5"))],
                             {"2.0": "FAIL"}, "scale=0.5", {"provenance"}),
}


@pytest.mark.parametrize("edition", ["2.0", "3.0", "4.0"])
def test_every_rule_of_an_edition_is_shown_failing_here_and_passing_on_the_conforming_run(tmp_path, edition):
    """The conforming run passes every rule of the edition; BROKEN below holds a failing case for each of them, so
    a rule added to an edition without one fails this test."""
    names = list(verdicts([conforming(tmp_path / "ok")], edition))
    assert set(verdicts([conforming(tmp_path / "ok2")], edition).values()) == {"PASS"}
    assert sorted(names) == sorted(rule for rule, (_, by, _, _) in BROKEN.items() if edition in by)


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_fails_for_its_own_cause(tmp_path, rule):
    """One change to a conforming run: that rule fails (or warns, where the edition reports it so) in each edition
    that has it, saying why, and no rule but the ones that change breaks too leaves PASS."""
    make, by, words, also = BROKEN[rule]
    runs = make(tmp_path / "r")
    for edition, verdict in by.items():
        got = verdicts(runs, edition)
        assert got[rule] == verdict, (edition, got)
        assert {k for k, v in got.items() if v != "PASS"} == {rule} | (also & set(got)), (edition, got)
        assert words in said(runs, rule, edition), said(runs, rule, edition)
    for edition in {"2.0", "3.0", "4.0"} - set(by):
        assert rule not in verdicts(runs, edition)


@pytest.mark.parametrize("name", sorted(CLASS_HASHES))
def test_a_closed_run_of_each_model_stamped_with_mlpstorages_class_passes_provenance(tmp_path, name):
    """Our workload YAML of each model, stamped with the class hash mlpstorage's editions.yaml records for it
    (written literally in CLASS_HASHES, not computed here), passes provenance in CLOSED; stamped with another
    model's class, it fails."""
    run = conforming(tmp_path / "r", shipped(name), stamp=CLASS_HASHES[name])
    assert verdicts([run])["provenance"] == "PASS", said([run], "provenance")
    assert said([run], "provenance").endswith(f"core_config {CLASS_HASHES[name]}, recomputed equal")
    other = next(h for n, h in sorted(CLASS_HASHES.items()) if n != name)
    wrong = conforming(tmp_path / "w", shipped(name), stamp=other)
    assert verdicts([wrong])["provenance"] == "FAIL"
    assert f"but its config hashes to {CLASS_HASHES[name]}" in said([wrong], "provenance")


@pytest.mark.parametrize("accelerator, v3, v4, text", [
    (None, "PASS", "FAIL", "not recorded"),  # 3.0 assumed an 80 GB H100: 8 x 80 holds 105 GiB
    ("h100", "PASS", "FAIL", "h100 is what-if only"),
    ("mi355", "PASS", "PASS", "8 x mi355 at 288 GB"),
])
def test_the_accelerator_is_declared_and_submittable_in_4_0(tmp_path, accelerator, v3, v4, text):
    run = conforming(tmp_path / "r", accelerator=accelerator)
    assert verdicts([run], "3.0")["accelerator memory"] == v3 and verdicts([run])["accelerator memory"] == v4
    assert text in said([run], "accelerator memory")


def test_accelerator_memory_must_hold_the_checkpoint(tmp_path):
    """An OPEN 70B run on 8 processes (a multiple of TP x PP = 8): 8 x 80 GB H100s cannot hold its
    912 GiB (3.0's warning, 4.0's failure: what-if only besides); 8 b200s at 180 GB can."""
    small = conforming(tmp_path / "h100", LLAMA3_70B, 8, 912, accelerator="h100")
    assert verdicts([small], "3.0", "open")["accelerator memory"] == "WARN"
    assert verdicts([small], "4.0", "open")["accelerator memory"] == "FAIL"
    assert "8 x h100 at 80 GB = 640 vs a 912.00 GiB checkpoint" in said([small], "accelerator memory", "3.0", "open")
    enough = conforming(tmp_path / "b200", LLAMA3_70B, 8, 912)
    assert verdicts([enough], "4.0", "open")["accelerator memory"] == "PASS"
    assert verdicts([enough], "4.0", "open")["process count"] == "PASS"
    assert verdicts([enough], "4.0", "closed")["process count"] == "FAIL"
    assert "a multiple of TP x PP = 8: qualifies for OPEN" in said([enough], "process count")


def test_process_counts_closed_and_open(tmp_path):
    odd = conforming(tmp_path / "odd", LLAMA3_70B, 12, 912)
    assert verdicts([odd], "4.0", "open")["process count"] == "FAIL"  # 12 is no multiple of 8
    sparse = conforming(tmp_path / "sparse", per_host=4)  # 8 processes on 2 hosts
    assert verdicts([sparse])["accelerators per host"] == "FAIL"
    assert "4 per host (8 on 2 hosts)" in said([sparse], "accelerators per host")
    assert "accelerators per host" not in verdicts([sparse], "4.0", "open")


def test_subset_mode_is_for_the_8b_on_8_processes_only(tmp_path):
    """v2.0 ran the 70B as a subset of 8 processes; 3.0 defines subset mode only for the 8B."""
    subset_70b = {**LLAMA3_70B, "model": {**LLAMA3_70B["model"], "parallelism": {
        **LLAMA3_70B["model"]["parallelism"], "data": 8}}, "checkpoint": {"fsync": True, "mode": "subset"}}
    run = conforming(tmp_path / "r", subset_70b, 8, 912)
    assert verdicts([run], "2.0")["process count"] == "PASS"
    assert verdicts([run], "3.0")["subset"] == verdicts([run])["subset"] == "FAIL"
    assert "subset run of llama3_70b on 8 processes" in said([run], "subset")
    subset_8b = {**LLAMA3_8B, "checkpoint": {**LLAMA3_8B["checkpoint"], "mode": "subset"}}
    assert verdicts([conforming(tmp_path / "s8", subset_8b)])["subset"] == "PASS"


def test_table_2_sizes_are_binary(tmp_path):
    """105 GB in Table 2 is 105 GiB: a checkpoint of 105 decimal GB (97.8 GiB) is not the 8B's."""
    decimal = conforming(tmp_path / "r", size_gib=105e9 / GIB)
    assert verdicts([decimal])["checkpoint size"] == "FAIL"
    assert "97.79 GiB (105.00 GB decimal)" in said([decimal], "checkpoint size")


@pytest.mark.parametrize("gap, v3, v4", [(12.0, "PASS", "PASS"), (30.0, "PASS", "PASS"), (45.0, "WARN", "FAIL"),
                                         (-5.0, "WARN", "WARN")])
def test_two_invocations_start_the_read_within_30_s(tmp_path, gap, v3, v4):
    write = keep_phase(conforming(tmp_path / "w", invocation=(0.0, 130.0)), "save")
    read = keep_phase(conforming(tmp_path / "r", invocation=(130.0 + gap, 200.0)), "load")
    assert verdicts([write, read], "3.0")["write-to-read gap"] == v3
    assert verdicts([write, read])["write-to-read gap"] == v4
    assert verdicts([write, read])["10 writes then 10 reads"] == "PASS"
    assert f"{gap:.1f} s from the write's invocation end to the read's invocation start" in said(
        [write, read], "write-to-read gap")


@pytest.mark.parametrize("file_systems, v3, v4, text", [
    ({**SEPARATE, "same_file_system": True}, "WARN", "FAIL", "the same file system"),
    (None, "WARN", "FAIL", "not recorded"),
    ({"checkpoint_storage": "s3", "checkpoint": None, "results": SEPARATE["results"], "same_file_system": None},
     "PASS", "PASS", "an object store: no file system"),
    ({"checkpoint_storage": "null", "checkpoint": None, "results": SEPARATE["results"], "same_file_system": None},
     "WARN", "FAIL", "null storage: nothing written"),
])
def test_checkpoints_and_results_on_different_file_systems(tmp_path, file_systems, v3, v4, text):
    run = conforming(tmp_path / "r", file_systems=file_systems)
    assert verdicts([run], "3.0")["separate file systems"] == v3 and verdicts([run])["separate file systems"] == v4
    assert text in said([run], "separate file systems")


def test_the_gap_reads_times_with_an_offset_as_local_times(tmp_path):
    """mlpstorage's and other tools' times may carry an offset (``Z``): the gap is taken on one clock."""
    write = keep_phase(conforming(tmp_path / "w"), "save")
    read = keep_phase(conforming(tmp_path / "r"), "load")
    end = datetime(2026, 11, 24, 8, 0, 0).astimezone()
    for run, key, when in ((write, "invocation_end_time", end), (read, "invocation_start_time",
                                                                    end + timedelta(seconds=20))):
        summary = load(run / "summary.json")
        summary[key] = when.astimezone(UTC).isoformat().replace("+00:00", "Z")
        (run / "summary.json").write_text(json.dumps(summary))
    assert said([write, read], "write-to-read gap").startswith("20.0 s from")


def test_provenance_must_be_stamped_and_agree_with_the_config(tmp_path):
    missing = conforming(tmp_path / "none", stamp=None)
    assert verdicts([missing], "3.0")["provenance"] == "WARN" and verdicts([missing])["provenance"] == "FAIL"
    forged = conforming(tmp_path / "forged", LLAMA3_8B)
    (forged / "provenance.json").write_text(json.dumps({"core_config": {"hash": CLASS_HASHES["llama3_8b"]}}))
    assert verdicts([forged])["provenance"] == "FAIL"  # LLAMA3_8B here is named llama3_8b, DLIO's llama_8b
    assert f"core_config {CLASS_HASHES['llama3_8b']}, but its config hashes to" in said([forged], "provenance")


@pytest.mark.parametrize("edition", ["2.0", "3.0", "4.0"])
def test_the_rules_run_dlios_files_not_another_layouts(tmp_path, edition):
    """llama3_8b in Megatron's layout has the model's shape, is emulated and stamped: it passed as MLPerf's
    workload. Its files are not DLIO's, so the emulated I/O rule fails, naming the key and its value."""
    megatron = conforming(tmp_path / "m", shipped("llama3_8b", "++workload.checkpoint.layout=megatron"))
    v = verdicts([megatron], edition)
    assert v["model"] == "PASS" and v["emulated I/O"] == "FAIL"
    assert "workload.checkpoint.layout='megatron': MLPerf runs DLIO's workload" in said([megatron], "emulated I/O",
                                                                                       edition)
    assert verdicts([conforming(tmp_path / "d")], edition)["emulated I/O"] == "PASS"
    assert said([conforming(tmp_path / "d2")], "emulated I/O", edition) == \
        "mode=emulated, layout=dlio, format=pt, reference=none"


def test_a_full_size_70b_in_another_layout_is_not_table_2s_run(tmp_path):
    """A full-size llama3_70b in Megatron's layout on 64 processes: Table 2's size, but not DLIO's files."""
    run = conforming(tmp_path / "m", shipped("llama3_70b", "++workload.checkpoint.layout=megatron"), 64, 912)
    v = verdicts([run])
    assert v["checkpoint size"] == v["process count"] == "PASS"
    assert v["emulated I/O"] == v["provenance"] == "FAIL"
    assert "workload.checkpoint.layout='megatron'" in said([run], "emulated I/O")


@pytest.mark.parametrize("overrides, edition, verdict, text", [
    (["++workload.checkpoint.format=raw"], "4.0", "FAIL", "workload.checkpoint.format='raw': DLIO's files are pt"),
    (["++workload.checkpoint.reference=mlcommons"], "4.0", "PASS", "format=raw, reference=mlcommons"),
    (["++workload.checkpoint.reference=mlcommons"], "3.0", "PASS", "format=raw, reference=mlcommons"),
    (["++workload.checkpoint.reference=dlio-2.0"], "4.0", "FAIL",
     "workload.checkpoint.reference='dlio-2.0': v4.0's results come from the MLCommons DLIO fork"),
    (["++workload.checkpoint.reference=dlio-2.0"], "2.0", "PASS", "format=pt, reference=dlio-2.0"),
    (["++workload.checkpoint.reference=mlcommons"], "2.0", "FAIL",
     "workload.checkpoint.reference='mlcommons': v2.0's results come from upstream DLIO v2.0.1"),
])
def test_the_format_and_reference_are_the_editions(tmp_path, overrides, edition, verdict, text):
    """DLIO's files are torch.save archives (pt); the reference a run follows is none (ours) or the edition's
    tool (raw files under the MLCommons fork's preset), as the run's recorded config says."""
    run = conforming(tmp_path / "r", shipped("llama3_8b", *overrides))
    assert verdicts([run], edition)["emulated I/O"] == verdict
    assert text in said([run], "emulated I/O", edition)


def test_a_read_run_in_another_layout_fails_too(tmp_path):
    """Two invocations: the read-only one is judged as the write-only one."""
    write = keep_phase(conforming(tmp_path / "w"), "save")
    read = keep_phase(conforming(tmp_path / "r", shipped("llama3_8b", "++workload.checkpoint.layout=dcp")), "load")
    assert verdicts([write, read])["emulated I/O"] == "FAIL"
    assert "workload.checkpoint.layout='dcp'" in said([write, read], "emulated I/O")


def test_a_closed_run_hashes_to_its_models_class(tmp_path):
    """A stamp that the run's own config recomputes is not enough in CLOSED: mlpstorage compares a run with
    its class alone, and any hashed key changed makes another workload (3.0 warns, 4.0 fails; OPEN has no
    class). The keys that differ from DLIO's template are named."""
    config = shipped("llama3_8b", "++workload.checkpoint.time_between_checkpoints=1")
    changed = conforming(tmp_path / "c", config, stamp=core_config(config)["hash"])  # stamped as a run stamps
    assert verdicts([changed])["provenance"] == "FAIL" and verdicts([changed], "3.0")["provenance"] == "WARN"
    text = said([changed], "provenance")
    assert "recomputed equal" in text and f"not llama3_8b's CLOSED class {CLASS_HASHES['llama3_8b']}" in text
    assert "checkpoint.time_between_checkpoints=1 (DLIO's template: 5)" in text
    assert verdicts([changed], "4.0", "open")["provenance"] == "PASS"
    megatron = conforming(tmp_path / "m", shipped("llama3_8b", "++workload.checkpoint.layout=megatron"))
    assert "checkpoint.layout='megatron' (not in DLIO's template)" in said([megatron], "provenance")
    ok = conforming(tmp_path / "ok")
    assert verdicts([ok])["provenance"] == "PASS"
    assert f"{CLASS_HASHES['llama3_8b']}, recomputed equal" in said([ok], "provenance")


def test_dlio_run_folders_are_judged_by_the_new_rules(dlio_here):
    """DLIO's own run folder (upstream v2.0.1) records none of what 3.0 asks beyond 2.0: the 4.0
    verdicts say so, rule by rule, and check writes nothing there."""
    r = dlio_here(["check", str(DLIO_RUN), "--format", "json"])
    assert r.returncode == 1, r.stderr
    body = json.loads(r.stdout)
    assert body["edition"] == "4.0"
    rules = {x["name"]: x for x in body["rules"]}
    assert rules["accelerator memory"]["actual"].startswith("not recorded")
    assert rules["separate file systems"]["actual"] == "not recorded"
    assert "no provenance.json" in rules["provenance"]["actual"]
    assert rules["write-to-read gap"]["verdict"] == "PASS"  # one invocation
    r3 = json.loads(dlio_here(["check", str(DLIO_RUN), "--edition", "3.0", "--format", "json"]).stdout)
    soft = {x["name"]: x["verdict"] for x in r3["rules"]}
    assert soft["separate file systems"] == soft["provenance"] == "WARN"


def test_mlpstorage_leaf_facts_are_read(tmp_path):
    """A run folder as mlpstorage leaves it: DLIO's summary, plus its ``*_metadata.json`` (accelerator,
    invocation times) and ``fs_separation.json``."""
    import shutil

    leaf = tmp_path / "20261124_080000"
    shutil.copytree(DLIO_RUN, leaf)
    (leaf / "checkpointing_20261124_080000_metadata.json").write_text(json.dumps(
        {"accelerator": "mi355", "invocation_start_time": "2026-11-24T08:00:00",
         "invocation_end_time": "2026-11-24T08:10:00"}))
    (leaf / "fs_separation.json").write_text(json.dumps({"same_filesystem": False}))
    v = verdicts([leaf])
    assert v["separate file systems"] == "PASS"
    assert "x mi355 at 288 GB" in said([leaf], "accelerator memory")
