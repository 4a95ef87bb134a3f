"""bench/instruction_count.py's report (the count itself, four runs under
valgrind, takes ten minutes and is a benchmark, not a test): the export's
instructions are each run's less the run that exports nothing, the two plain
runs' difference is reported beside the overhead, and the report names the commit."""

import instruction_count
import provenance


def test_the_report_takes_the_baseline_off_both_exports(tmp_path):
    results = {"commit": "abc1234", "uncommitted_changes": True, "date": "today",
               "command": ".venv/bin/python bench/instruction_count.py",
               "machine": {"cpu": "a CPU", "cores": 2, "versions": {"torch": "2.13.0"}},
               "counts": {"none": 1_000, "plain": 3_000, "tagged": 3_050, "plain again": 3_010}}
    instruction_count.render(results, tmp_path)
    report = (tmp_path / "instruction-count.md").read_text()
    assert provenance.describe(results) in report and "(with uncommitted changes)" in report
    assert "| plain export | 2,000 |" in report and "| tagged export | 2,050 |" in report
    assert "**tagged / plain: 1.0250** (hiertag's overhead +2.50 %)" in report
    assert "the second plain export against the first: 1.0050 (+0.50 %)" in report
    assert results["command"] in report
