"""``diff`` says what it knows (issue 46): a repeated run's intervals with their real coverage (not "95 %" below six
repeats), and a latency percentile of requests of other sizes as not comparable (not a regression), in this process:
on run folders made through the real result writers (tests/support/made_runs.py, repeats.json by
``dlio_ckpt.tools.readers.repeated``) and on real runs of this machine at two chunk sizes. The rest of ``diff``'s rules:
tests/unit/test_results_tools.py and tests/unit/test_latency.py (intervals)."""

from __future__ import annotations

import json
from pathlib import Path

from dlio_ckpt.io.latency import LatencyRecorder
from dlio_ckpt.results.latency import operation_latency
from dlio_ckpt.results.summary import dumps
from dlio_ckpt.tools.drivers.repeats import repeat_folder, write_repeats
from tests.support.made_runs import make_run

MIB = 1 << 20
WRITE_P99, READ_P99, META_P99 = "save_checkpoint_write_p99_ms", "load_checkpoint_read_p99_ms", \
    "save_checkpoint_metadata_p99_ms"


# -- the interval's coverage ------------------------------------------------------------------------

def _repeated(folder: Path, n: int) -> Path:
    """A folder of ``n`` made repeats and its repeats.json, as ``run --repeat n`` leaves it."""
    for k in range(1, n + 1):
        make_run(Path(repeat_folder(str(folder), k)), 2, 1, seed=k)
    write_repeats(str(folder), n)
    return folder


def test_diff_prints_the_real_coverage_of_each_sides_interval(tmp_path, dlio_here):
    """1 - 2 P(Binomial(n, 1/2) < j) by hand: 3 repeats (j = 1) 1 - 2/8 = 75 %; 6 repeats (j = 1) 1 - 2/64 = 96.875 %;
    10 repeats (j = 2) 1 - 2 (1 + 10)/1024 = 97.85 %. Never "95 %", which no interval here has."""
    three, six, ten = (_repeated(tmp_path / f"r{n}", n) for n in (3, 6, 10))
    r = dlio_here(["diff", str(three), str(six), "--threshold", "50"])
    assert r.returncode == 0, r.stdout + r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("repeated runs"))
    assert "A 3 runs (75 % interval), B 6 runs (96.88 % interval)" in header, header
    assert "95 %" not in r.stdout
    once = make_run(tmp_path / "once", 2, 1)
    r = dlio_here(["diff", str(ten), str(once), "--threshold", "50"])
    assert "A 10 runs (97.85 % interval), B run once (no interval)" in r.stdout, r.stdout
    out = json.loads(dlio_here(["diff", str(three), str(ten), "--format", "json", "--threshold", "50"]).stdout)
    assert out["repeats"] == {"a": 3, "b": 10, "a_interval_coverage": 0.75,
                              "b_interval_coverage": 1 - 2 * 11 / 1024}
    recorded = json.loads((three / "repeats.json").read_text())["metrics"]  # the coverage repeats.json records
    assert {m["coverage"] for m in recorded.values()} == {out["repeats"]["a_interval_coverage"]}


# -- latency percentiles of requests of other sizes ------------------------------------------------

def _with_latency(folder: Path, write_bytes: int, write_p99_ms: float, sizes: bool = True) -> Path:
    """A made run whose saves record 100 write calls of ``write_bytes`` each and whose loads 100 reads of as many
    (through the real latency writer), its p99 headlines set; ``sizes=False``: calls recorded without bytes."""
    run = make_run(folder, 2, 1)
    body = json.loads((run / "summary.json").read_text())
    for phase, kind in (("save", "write"), ("load", "read")):
        rec = LatencyRecorder()
        for _ in range(100):
            rec.record(kind, int(write_p99_ms * 1e6), write_bytes if sizes else 0)
            rec.record("create", 100_000)
        figures = operation_latency({0: rec.take()}, seconds=1.0)
        assert figures is not None
        for c in body["checkpoints"][phase]:
            c["latency"] = json.loads(dumps(figures))
    body["metric"].update({WRITE_P99: write_p99_ms, READ_P99: write_p99_ms, META_P99: 0.1})
    (run / "summary.json").write_text(json.dumps(body))
    return run


def test_a_latency_percentile_of_requests_of_other_sizes_is_not_comparable(tmp_path, dlio_here):
    """The rule: the mean bytes per request within 10 % (the larger at most 1.1 times the smaller). Each side of its
    edge, and 16 MiB against 1 MiB writes (a p99 8 times A's, no regression but not comparable, naming both sizes)."""
    a = _with_latency(tmp_path / "a", MIB, 10.0)

    def diff(b: Path) -> tuple[int, dict, str]:
        r = dlio_here(["diff", str(a), str(b), "--metrics", "p99", "--format", "json"])
        table = dlio_here(["diff", str(a), str(b), "--metrics", "p99"]).stdout
        return r.returncode, {m["name"]: m for m in json.loads(r.stdout)["metrics"]}, table

    code, within, _ = diff(_with_latency(tmp_path / "within", int(1.09 * MIB), 20.0))  # 9 % larger: compared
    assert code == 1 and within[WRITE_P99]["verdict"] == "regression" and within[WRITE_P99]["why"] is None
    assert within[READ_P99]["change_pct"] == 100.0
    code, beyond, table = diff(_with_latency(tmp_path / "beyond", int(1.11 * MIB), 20.0))  # 11 % larger
    assert code == 0, table
    assert [beyond[n]["verdict"] for n in (WRITE_P99, READ_P99)] == ["not comparable"] * 2
    assert beyond[WRITE_P99]["change_pct"] is None
    assert beyond[META_P99]["verdict"] == "same"  # metadata calls move no bytes: compared
    code, big, table = diff(_with_latency(tmp_path / "big", 16 * MIB, 80.0))
    assert code == 0 and big[WRITE_P99]["verdict"] == "not comparable", table
    assert big[WRITE_P99]["why"] == "the request sizes differ: A 1 MiB, B 16 MiB per write (mean bytes per request)"
    row = next(line for line in table.splitlines() if line.startswith(WRITE_P99))
    assert row.split()[-2:] == ["not", "comparable"] and "%" not in row  # no percentage
    assert ("not comparable: a latency percentile is compared only where both runs' requests of its kind are of one "
            "size: their mean bytes per request (count and bytes of the phase's checkpoints, every process) within "
            "10 %, the larger at most 1.1 times the smaller") in table
    assert f"  {READ_P99}: the request sizes differ: A 1 MiB, B 16 MiB per read" in table
    code, unknown, _ = diff(_with_latency(tmp_path / "unknown", MIB, 20.0, sizes=False))
    assert code == 0 and unknown[WRITE_P99]["verdict"] == "not comparable"
    assert unknown[WRITE_P99]["why"] == "the request sizes are not known: B records no bytes of its write calls"


def test_real_runs_of_other_chunk_sizes_compare_no_request_latency(tmp_path, dlio_here):
    """Two runs of this machine that differ only in chunk_size, 1 MiB and 16 MiB (tiny's checkpoint of 47,855,438 B
    in 4 files: 48 writes against 6): their write and read p99 are not comparable, and the gate on them passes; two
    repeats of one job record the same sizes to the byte and are compared."""
    def run(chunk: str, folder: str, repeat: int = 1) -> Path:
        r = dlio_here(["workload=tiny", "--world-size", "2", "--repeat", str(repeat), f"++hydra.run.dir={folder}",
                       f"++workload.checkpoint.chunk_size={chunk}", "++workload.checkpoint.num_checkpoints_read=1",
                       f"++workload.checkpoint.checkpoint_folder=ck_{folder}"])
        assert r.returncode == 0, r.stderr
        return tmp_path / folder

    small, big = run("1MiB", "small", repeat=2), run("16MiB", "big")
    r = dlio_here(["diff", str(small / "repeat1"), str(big), "--metrics", "(write|read)_p99", "--format", "json"])
    assert r.returncode == 0, r.stdout
    changes = {m["name"]: m for m in json.loads(r.stdout)["metrics"]}
    assert [changes[n]["verdict"] for n in (WRITE_P99, READ_P99)] == ["not comparable"] * 2
    assert changes[WRITE_P99]["why"] == ("the request sizes differ: A 973.6 KiB, B 7.606 MiB per write (mean bytes per "
                                         "request)")  # 47,855,438 B in 48 writes against 6
    recorded = [{(c["latency"]["kinds"][k]["count"], c["latency"]["kinds"][k]["bytes"])
                 for phase, k in (("save", "write"), ("load", "read")) for c in summary["checkpoints"][phase]}
                for summary in (json.loads((small / f"repeat{i}" / "summary.json").read_text()) for i in (1, 2))]
    assert recorded[0] == recorded[1] == {(48, 47_855_438)}  # one job: the same sizes to the byte
    same = dlio_here(["diff", str(small / "repeat1"), str(small / "repeat2"), "--metrics", "p99", "--format", "json"])
    assert {m["verdict"] for m in json.loads(same.stdout)["metrics"]} <= {"better", "worse", "regression", "same"}
