"""bench/fuzz_report.py, which scripts/fuzz.sh runs after the targets: what it
reads from a run's logs, how a finding is shown, and the report it commits.
CI's fuzzing lane runs it on real logs that pass; a failing run is made here,
from log lines libFuzzer and ASan write."""

import subprocess
import sys
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[2]

PASSING_LOG = """INFO: Seed: 3
#2	INITED cov: 3120 ft: 9000 corp: 70/9100Kb exec/s: 0 rss: 300Mb
#31856	NEW    cov: 3958 ft: 17966 corp: 673/13959Kb lim: 133747 exec/s: 568 rss: 454Mb L: 855/133747 MS: 1 ChangeBinInt-
#32000	DONE   cov: 3959 ft: 17966 corp: 673/13959Kb lim: 133747 exec/s: 571 rss: 454Mb
stat::number_of_executed_units: 32000
stat::average_exec_per_sec:     571
stat::new_units_added:          796
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              454
"""  # noqa: E501  (libFuzzer's log as it prints it: a line is not to be broken)

FAILING_LOG = """INFO: Seed: 4
#2	INITED cov: 4800 ft: 9000 corp: 70/9100Kb exec/s: 0 rss: 300Mb
==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000011
    #0 0x55d in hiertag::Extract(...) tool/extract.cpp:120
SUMMARY: AddressSanitizer: heap-buffer-overflow tool/extract.cpp:120 in hiertag::Extract(...)
MS: 1 ChangeByte-; base unit: 0000
Test unit written to build/fuzz/artifacts/extract-crash-1234
stat::number_of_executed_units: 100
stat::average_exec_per_sec:     50
stat::peak_rss_mb:              501
"""


def run_report(folder, *extra):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_report.py"), "--dir", str(folder),
                           "--regressions", str(folder / "regressions"),
                           "--targets", "tree,extract", "--prepared", "54", "--fuzzing", "184", "--jobs", "2",
                           "--flags=-O1 -fsanitize=address,undefined", "--options=-timeout=10", *extra],
                          capture_output=True, text=True, cwd=ROOT)


def make_run(folder, extract_status):
    (folder / "logs").mkdir(parents=True)
    (folder / "artifacts").mkdir()
    (folder / "seeds" / "model").mkdir(parents=True)  # tree's and extract's seeds
    for index in range(3):
        (folder / "seeds" / "model" / f"seed{index}").write_bytes(b"x")
    (folder / "logs" / "tree.log").write_text(PASSING_LOG)
    (folder / "logs" / "tree.status").write_text("0\n")
    (folder / "logs" / "extract.log").write_text(FAILING_LOG if extract_status else PASSING_LOG)
    (folder / "logs" / "extract.status").write_text(f"{extract_status}\n")
    (folder / "regressions" / "tree").mkdir(parents=True)  # one past finding of tree's, none of extract's
    (folder / "regressions" / "tree" / "crash-0").write_bytes(b"y")


def test_a_passing_run_is_a_line_per_target_and_a_summary(tmp_path):
    make_run(tmp_path, 0)
    done = run_report(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "fuzz: tree              32000 executions (571/s),   3 seeds, corpus 673/13959Kb, 0 crashes"
    assert lines[-1] == ("fuzz: 2 targets (seeds, past findings and fixed mutations): 64000 executions, 0 failing; "
                         "build+seeds 54s, fuzzing 184s")


def test_a_finding_fails_the_run_with_its_errors_path_and_first_bytes(tmp_path):
    make_run(tmp_path, 77)
    finding = tmp_path / "artifacts" / "extract-crash-1234"
    finding.write_bytes(b"\x08\x07\x12\x04ONNX" + bytes(range(40)))
    done = run_report(tmp_path)
    assert done.returncode == 1
    out = done.stdout
    assert f"fuzz: extract       FAILED (exit 77) after 100 executions; log {tmp_path}/logs/extract.log" in out
    assert "    ==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000011" in out
    assert "    SUMMARY: AddressSanitizer: heap-buffer-overflow tool/extract.cpp:120 in hiertag::Extract(...)" in out
    assert f"    finding: {finding} (48 bytes), first bytes:" in out
    assert "      000000 08 07 12 04 4f 4e 4e 58 00 01 02 03 04 05 06 07  >....ONNX........<" in out
    assert out.splitlines()[-1].startswith("fuzz: FAILED (extract): 2 targets (seeds, past findings and fixed "
                                           "mutations): 32100 executions, 1 failing;")


def test_a_finding_is_kept_where_every_later_run_replays_it(tmp_path):
    """Check that a finding is copied into its target's regressions folder (which
    scripts/fuzz.sh hands every run of the target), once, and that the next run
    counts it among the past findings it replayed."""
    make_run(tmp_path, 77)
    finding = tmp_path / "artifacts" / "extract-crash-1234"
    finding.write_bytes(b"\x08\x07 a finding")
    (tmp_path / "artifacts" / "extract-notes.txt").write_text("not libFuzzer's")
    done = run_report(tmp_path)
    kept = tmp_path / "regressions" / "extract" / "crash-1234"
    assert done.returncode == 1 and kept.read_bytes() == finding.read_bytes()
    assert f"    kept as {kept}: every run replays it from now on (commit it with the fix)" in done.stdout
    report = tmp_path / "fuzz.md"
    run_report(tmp_path, "--markdown", str(report))
    assert sorted(path.name for path in kept.parent.iterdir()) == ["crash-1234"]
    assert "| `extract` | 100 | 50 | 3 | 1 |" in report.read_text()


def test_a_passing_run_keeps_nothing(tmp_path):
    make_run(tmp_path, 0)
    assert run_report(tmp_path).returncode == 0
    assert sorted(path.name for path in (tmp_path / "regressions").iterdir()) == ["tree"]


def test_the_report_names_the_command_the_commit_and_each_target(tmp_path):
    make_run(tmp_path, 77)
    report = tmp_path / "fuzz.md"
    done = run_report(tmp_path, "--seconds", "600", "--command", "scripts/fuzz.sh --seconds 600", "--markdown",
                      str(report))
    assert done.returncode == 1
    text = report.read_text()
    assert text.startswith("# Fuzzing the tool\n\nCommand: `scripts/fuzz.sh --seconds 600` (")
    assert "on a fresh corpus from the seeds" in text
    assert done.stdout.splitlines()[0] == f"fuzz: report written to {report}"
    assert provenance.describe(provenance.git_state()) in text
    assert "600 s per target from a random seed" in text
    assert "built with `-O1 -fsanitize=address,undefined`, run with `-timeout=10`" in text
    assert "| `tree` | 32,000 | 571 | 3 | 1 | 673 / 13959Kb | 3959 | 454 | 0 crashes, leaks, timeouts, OOMs |" in text
    assert "| `extract` | 100 | 50 | 3 | 0 | 70 / 9100Kb | 4800 | 501 | **failed** (exit 77) |" in text
    assert "| **all** | **32,100** | | | | | | | **1 failing** |" in text
