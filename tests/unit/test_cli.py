"""The command line in this process: each command's own options (another's is refused by argparse, naming it),
rates and sizes with units, the what-if's figures, every command's --help. A process adds nothing here: what a
user sees through ``python -m dlio_ckpt`` is tested by tests/e2e/test_console.py and
tests/e2e/test_bad_input.py (every bad input's case, in this process: test_validation.py)."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.cli import main as cli
from dlio_ckpt.cli.parser import COMMANDS, build_parsers
from dlio_ckpt.cluster.comm import SelfComm
from dlio_ckpt.units import RATE_RULE

LLAMA = ["plan", "--world-size", "8", "workload=llama_7b"]


@pytest.fixture
def dlio(tmp_path, monkeypatch, capsys):
    """``dlio_ckpt ARGS`` in this process, in an empty folder, as a world of one (no MPI in the test's
    process): its exit status (argparse's --help and --version exit by SystemExit) and its output."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "get_comm", SelfComm)

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = cli.main(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err
    return run


def test_a_run_given_plans_write_bandwidth_is_refused_by_name_and_writes_nothing(dlio, tmp_path):
    """It measured the storage and ignored the bandwidth it was told, silently, until a table refused it."""
    for head in (["run"], []):  # `dlio_ckpt run ...` and the bare `dlio_ckpt ...` are the same command
        code, out, err = dlio(*head, "--write-bandwidth", "20GB/s", "workload=tiny", "++hydra.run.dir=out",
                              "++workload.checkpoint.checkpoint_folder=ck")
        assert code == 2, err
        assert err == "dlio_ckpt: error: unrecognized arguments: --write-bandwidth\n" and out == ""
        assert list(tmp_path.iterdir()) == [], "the run's folder and checkpoints must not be created"


@pytest.mark.parametrize("command, given, flag", [
    ("sweep", ["workload=tiny", "--read-bandwidth", "40GB/s"], "--read-bandwidth"),
    ("tune", ["workload=tiny", "--mtbf-hours", "8"], "--mtbf-hours"),
    ("plan", ["workload=tiny", "--replace-results"], "--replace-results"),
    ("diff", ["a", "b", "--world-size", "2"], "--world-size"),
    ("check", ["run", "--threshold", "5"], "--threshold"),
    ("report", ["run", "--format", "json"], "--format"),
    ("keys", ["checkpoint", "--config-dir", "conf"], "--config-dir")])
def test_each_command_refuses_anothers_option_naming_it(dlio, tmp_path, command, given, flag):
    code, _, err = dlio(command, *given)
    assert code == 2 and f"dlio_ckpt{'' if command == 'plan' else ' ' + command}: error: unrecognized arguments: " \
        f"{flag}" in err, err
    assert err.count("error:") == 1 and list(tmp_path.iterdir()) == []


def test_plan_reads_a_rate_with_units_and_reports_the_loads_time(dlio, tmp_path):
    """The load's time from its restore (tests/unit/test_plan_loads.py): here rank 0 of 8 reads its model's file
    and its optimizer's, 23,584,759,482 B, the others their optimizer's alone."""
    code, out, err = dlio(*LLAMA, "--read-bandwidth", "40GB/s", "--format", "json")
    assert code == 0, err
    body = json.loads(out)
    size, reads = body["total_payload_bytes"], 23_584_759_482 * 8
    assert "goodput" not in body and body["load"]["checkpoint_bytes"] == size
    assert body["load"]["load_heaviest_rank_bytes_read"] == body["restore"]["bytes_read_per_rank"]["max"]
    assert body["load"]["load_seconds"] == pytest.approx(reads / 40e9)
    code, table, err = dlio(*LLAMA, "--read-bandwidth", "40GB/s")
    assert code == 0 and f"load_seconds: {reads / 40e9:.4g}\n" in table, err
    code, out, _ = dlio(*LLAMA, "--read-bandwidth", "500MiB/s", "--format", "json")  # binary units too
    assert code == 0 and json.loads(out)["load"]["load_seconds"] == pytest.approx(reads / (500 * 2**20))
    assert list(tmp_path.iterdir()) == []


def test_the_load_time_is_the_same_with_the_goodput_and_without(dlio):
    """One load time, whether the read bandwidth is given alone or with the goodput's other inputs."""
    _, alone, _ = dlio(*LLAMA, "--read-bandwidth", "1.5TB/s", "--format", "json")
    code, full, err = dlio(*LLAMA, "--read-bandwidth", "1.5TB/s", "--write-bandwidth", "20GB/s", "--mtbf-hours", "8",
                           "--format", "json")
    assert code == 0, err
    goodput = json.loads(full)["goodput"]
    assert goodput["load_seconds"] == json.loads(alone)["load"]["load_seconds"] > 0
    assert goodput["write_seconds"] == pytest.approx(json.loads(full)["total_payload_bytes"] / 20e9)


@pytest.mark.parametrize("flag", ["--write-bandwidth", "--read-bandwidth", "--drain-bandwidth",
                                  "--interconnect-bandwidth"])
@pytest.mark.parametrize("value", ["20", "20GB", "fast", "0GB/s", "-5GB/s", "20GB/h"])
def test_a_rate_without_its_unit_per_second_is_refused_naming_flag_value_and_rule(dlio, tmp_path, flag, value):
    """``20`` could be bytes or GB per second; ``20GB`` is a size: neither is guessed."""
    given = [f"{flag}={value}"] if value.startswith("-") else [flag, value]  # argparse reads -5GB/s as an option
    code, out, err = dlio(*LLAMA, "--read-bandwidth", "40GB/s", *given)
    assert code == 2 and out == ""
    assert err == f"dlio_ckpt: error: {flag}={value!r}: {RATE_RULE}\n"
    assert list(tmp_path.iterdir()) == []


def test_tunes_max_gib_counts_gib_and_takes_a_size_with_a_unit(dlio, tmp_path):
    tune = build_parsers().commands["tune"]
    assert tune.parse_intermixed_args(["workload=tiny"]).max_gib == 1.0
    assert tune.parse_intermixed_args(["workload=tiny", "--max-gib", "0.05"]).max_gib == 0.05
    assert tune.parse_intermixed_args(["workload=tiny", "--max-gib", "512MiB"]).max_gib == 0.5
    code, _, err = dlio("tune", "workload=tiny", "--max-gib", "lots")
    assert code == 2 and err.startswith("dlio_ckpt tune: error: --max-gib='lots': must be a size"), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "plan", "sweep", "tune"])
def test_options_may_come_between_overrides(command):
    args = build_parsers().commands[command].parse_intermixed_args(
        ["workload=tiny", "--world-size", "2", "++workload.checkpoint.scale=0.5", "-cd", "conf", "a.b=c"])
    assert args.overrides == ["workload=tiny", "++workload.checkpoint.scale=0.5", "a.b=c"]
    assert str(args.world_size) == "2" and args.config_dir == "conf"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_commands_help_exits_0_with_its_usage_and_options(dlio, tmp_path, command):
    code, out, err = dlio(command, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"usage: {COMMANDS[command].usage.splitlines()[0]}\n"), out
    assert "-h, --help" in out and list(tmp_path.iterdir()) == []


def test_the_top_levels_help_and_version_exit_0(dlio):
    code, out, _ = dlio("--help")
    assert code == 0 and all(f"  {c.label} " in out for c in COMMANDS.values()) and "llama_7b" in out
    assert dlio("-h")[1] == out
    code, out, _ = dlio("--version")
    assert code == 0 and out.startswith("dlio_ckpt ")


def test_the_what_if_is_arithmetic_on_the_plans_sizes_without_the_command_line():
    """dlio_ckpt.results.whatif on a plan of 4 GB (two ranks of 2 GB) and values worked out by hand."""
    from types import SimpleNamespace

    from dlio_ckpt.errors import ConfigError
    from dlio_ckpt.results.whatif import Assumptions, Rate, what_if

    job = SimpleNamespace(total_payload_bytes=4 * 10**9, ranks=[SimpleNamespace(payload_bytes=2 * 10**9)] * 2)
    workload = SimpleNamespace(checkpoint=SimpleNamespace(async_save=False, time_between_checkpoints=100.0))
    read, write = Rate("2GB/s", 2e9), Rate("1GB/s", 1e9)
    assert what_if(Assumptions(), workload, job, None) is None
    assert what_if(Assumptions(read_bandwidth=read), workload, job, None)["load_seconds"] == 2.0
    resharded = {"bytes_read_per_rank": {"max": 3 * 10**9}, "world_size": 2, "heaviest_rank": 1}
    load = what_if(Assumptions(read_bandwidth=read), workload, job, resharded)
    assert load["load_seconds"] == 3.0 and load["load_heaviest_rank"] == 1  # 3 GB x 2 ranks / 2 GB/s
    full = what_if(Assumptions(write_bandwidth=write, read_bandwidth=read, mtbf_hours=1.0), workload, job, None)
    assert full["write_seconds"] == full["held_seconds_per_checkpoint"] == 4.0 and full["load_seconds"] == 2.0
    assert full["lost_per_failure_seconds"] == 100 / 2 + 4.0 + 2.0
    assert full["goodput"] == pytest.approx(100 / 104 * (1 - 56 / 3600))
    assert full["interval_seconds"] == 100.0
    assert full["interval_from"] == "workload.checkpoint.time_between_checkpoints=100 s"
    assert what_if(Assumptions(write_bandwidth=write), workload, job, None) == {"checkpoint_bytes": 4 * 10**9,
                                                                               "write_seconds": 4.0}
    with pytest.raises(ConfigError, match=r"--mtbf-hours=1.0: the goodput what-if needs --write-bandwidth and "
                                          r"--read-bandwidth too"):
        what_if(Assumptions(mtbf_hours=1.0), workload, job, None)
