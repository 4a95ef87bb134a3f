"""README's citations of the committed results: a figure the README takes from
bench/results/NAME.md is cited at the commit that result names, and "clean
tree" only where the result ran on one."""

import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def citations(text):
    """(result file, commit, says "clean tree") for each README mention of
    bench/results/NAME.md followed by a commit in the same clause (before the next
    mention, a closing parenthesis or the sentence's end)."""
    text = " ".join(text.split())
    found = []
    for mention in re.finditer(r"bench/results/([\w.-]+\.md)", text):
        following = re.split(r"bench/results/|\)|\. ", text[mention.end():mention.end() + 200])[0]
        commit = re.search(r"commit ([0-9a-f]{7,40})", following)
        if commit:
            after = following[commit.end():commit.end() + 20]
            found.append((mention.group(1), commit.group(1), "clean tree" in after))
    return found


def recorded(name):
    """(commit, uncommitted_changes) a result records: its JSON's, else its report's head."""
    data = RESULTS / name.replace(".md", ".json")
    if data.exists():
        def walk(value):
            if isinstance(value, dict):
                if "commit" in value:
                    yield value["commit"], value.get("uncommitted_changes")
                for inner in value.values():
                    yield from walk(inner)
        return next(walk(json.loads(data.read_text())))
    head = (RESULTS / name).read_text()
    commit = re.search(r"commit ([0-9a-f]{7,40})(, clean tree)?", head)
    return commit.group(1), False if commit.group(2) else None


def test_citations_are_read_from_the_text():
    text = ("`bench/results/a.md` (commit abc1234, a clean tree): 1 %; (`bench/results/b.md`,\n"
            "  commit def5678) and `bench/results/c.md`. Later, commit 9999999 (`bench/results/d.md`) commit 1")
    assert citations(text) == [("a.md", "abc1234", True), ("b.md", "def5678", False)]


def test_every_result_the_readme_cites_is_cited_at_the_commit_it_names():
    found = citations((ROOT / "README.md").read_text())
    assert len(found) >= 6, found
    for name, commit, clean in found:
        assert (RESULTS / name).exists(), name
        ran_at, changes = recorded(name)
        assert commit == ran_at, f"README cites {name} at commit {commit}; the result names {ran_at}"
        assert not clean or changes is False, f"README says {name} ran on a clean tree; the result does not"


def section(text, title):
    """README's section under the heading `## title`, up to the next one of its level."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_overhead_figures_are_the_committed_results():
    """Check that the Benchmark section's overhead figures are those of the results it
    cites: the timer's own-work shares (results.json) and the instruction counts with
    their noise floor (instruction-count.json), and that it calls the goal met only by
    the measure whose result shows it."""
    import instruction_count
    benchmark = " ".join(section((ROOT / "README.md").read_text(), "Benchmark").split())
    models = json.loads((RESULTS / "results.json").read_text())["models"]
    shares = [model["summary"]["hiertag_work_share"] for model in models.values()]
    assert f"own work by its timer {100 * min(shares):.2f}-{100 * max(shares):.2f} % of a plain export" in benchmark
    assert f": {100 * min(shares):.2f}-{100 * max(shares):.2f} % of the plain export" in benchmark
    plain, tagged, again = instruction_count.exports(
        json.loads((RESULTS / "instruction-count.json").read_text())["counts"])
    overhead, noise = 100 * (tagged / plain - 1), 100 * abs(again / plain - 1)
    assert f"+{overhead:.2f} %, while two identical plain exports lay {noise:.2f} % apart" in benchmark
    missed = {name: model["summary"]["hiertag_work_share"] for name, model in models.items()
              if model["summary"]["hiertag_work_share"] > 0.005}
    floor = max((max(works) - min(works)) / 1000 / statistics.median(r["seconds"] for r in model["runs"]["plain"])
                for model in models.values()
                for works in [[r["hiertag_work_ms"] for r in model["runs"]["hiertag"]]])
    assert f"spread by at most {100 * floor:.2f} % of its" in " ".join(benchmark.split())
    if missed:
        assert all(share - 0.005 > floor for share in missed.values())
        said = " and ".join(f"{name} ({100 * share:.2f} %)" for name, share in missed.items())
        assert f"By this measure the goal of 0.5 % (issue 17) is missed, by more than that floor, on {said}" in \
            " ".join(benchmark.split())
        assert "holds on every model" not in benchmark
    else:
        assert "By this measure the goal of 0.5 % (issue 17) holds on every model" in benchmark
    assert overhead - noise > 0.5 and "no committed result shows the goal met" in benchmark
    assert "**met**" not in benchmark
