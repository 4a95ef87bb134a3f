"""What a fuzzing run found, from its logs (scripts/fuzz.sh runs this after the
targets): a line per target and a summary line; for a target that failed, its
log's error lines and each finding's path and first bytes. Each finding is kept
as a regression input (tests/fuzz/regressions/<target>/, which every later run
replays before any mutation; commit it with its fix). With --markdown FILE,
also the run as a result to commit (bench/results/fuzz.md): the command, the
commit and whether the tree was clean, the compiler, the flags and options, and
per target the executions, the seeds and past findings replayed, the corpus and
the edges covered at the end, the peak memory and the outcome.

usage: .venv/bin/python bench/fuzz_report.py --targets a,b --prepared S --fuzzing S --jobs J
           --flags F --options O [--seconds N] [--command C] [--markdown FILE]
Reads DIR/logs/<target>.log and .status, DIR/artifacts and the seeds under
DIR/seeds (--dir, default build/fuzz), and the past findings in
tests/fuzz/regressions/<target>/ (--regressions).
Exit status 1 when a target failed."""

import argparse
import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

import provenance  # bench/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]
# The log lines that say what went wrong (libFuzzer's, the sanitizers', fuzz_support.h's).
ERROR_LINE = re.compile(r"ERROR: |SUMMARY: |runtime error|fuzz: |Test unit written|what\(\)")


def seeds_of(out, target):
    """The folder of the seeds a target starts from (make_seed_corpus.py)."""
    return out / "seeds" / {"json": "json", "tag_grammar": "tag"}.get(target, "model")


def files_in(folder):
    return sum(1 for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")) \
        if folder.is_dir() else 0


def last(pattern, text, default=None):
    found = re.findall(pattern, text)
    return found[-1] if found else default


def target_result(out, regressions, target):
    """What the target's log and status file under `out` say about its run."""
    log_path = out / "logs" / f"{target}.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    status = out / "logs" / f"{target}.status"
    corpus = last(r"corp: (\d+)/(\d+\w*)", log)
    return {
        "target": target, "log": log_path, "text": log,
        "exit": int(status.read_text().strip()) if status.exists() else None,
        "executions": int(last(r"stat::number_of_executed_units: (\d+)", log, 0)),
        "rate": int(last(r"stat::average_exec_per_sec: *(\d+)", log, 0)),
        "peak_rss_mb": last(r"stat::peak_rss_mb: *(\d+)", log),
        "corpus": f"{corpus[0]} / {corpus[1]}" if corpus else "-",
        "edges": last(r"cov: (\d+)", log, "-"),
        "seeds": files_in(seeds_of(out, target)),
        "past_findings": files_in(regressions / target),
    }


# libFuzzer's artifact names: --artifact_prefix (DIR/artifacts/<target>-), the kind, the input's SHA-1.
ARTIFACT_KINDS = ("crash", "leak", "timeout", "oom", "slow-unit")


def keep_findings(out, regressions, target):
    """Copies each finding of the target's run (out/artifacts/<target>-<kind>-<sha1>)
    into regressions/<target>/<kind>-<sha1>, unless it is there already: the
    folder every run replays (scripts/fuzz.sh), so a finding runs again on every
    run from then on, fixed or not. Returns the kept paths."""
    kept = []
    for artifact in sorted((out / "artifacts").glob(f"{target}-*")):
        name = artifact.name[len(target) + 1:]
        if not name.startswith(tuple(f"{kind}-" for kind in ARTIFACT_KINDS)):
            continue
        kept_path = regressions / target / name
        if not kept_path.exists():
            kept_path.parent.mkdir(parents=True, exist_ok=True)
            kept_path.write_bytes(artifact.read_bytes())
        kept.append(kept_path)
    return kept


def first_bytes(path, count=128):
    """The first bytes of a file as `od -A x -t x1z` shows them."""
    data = path.read_bytes()[:count]
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset:offset + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:06x} {' '.join(f'{b:02x}' for b in chunk):<47}  >{text}<")
    return lines


def shown(path):
    """A path as the report prints it: from the checkout when inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def print_results(out, results, summary):
    failed = []
    for r in results:
        if r["exit"] == 0:
            print(f"fuzz: {r['target']:<13} {r['executions']:>9} executions ({r['rate']}/s), {r['seeds']:>3} seeds, "
                  f"corpus {r['corpus'].replace(' / ', '/')}, 0 crashes")
            continue
        failed.append(r["target"])
        print(f"fuzz: {r['target']:<13} FAILED (exit {r['exit']}) after {r['executions']} executions; "
              f"log {shown(r['log'])}")
        for line in [line for line in r["text"].splitlines() if ERROR_LINE.search(line)][:12]:
            print(f"    {line}")
        for artifact in sorted((out / "artifacts").glob(f"{r['target']}-*")):
            print(f"    finding: {shown(artifact)} ({artifact.stat().st_size} bytes), first bytes:")
            for line in first_bytes(artifact):
                print(f"      {line}")
        for kept in r.get("kept", []):
            print(f"    kept as {shown(kept)}: every run replays it from now on (commit it with the fix)")
    if failed:
        print(f"fuzz: FAILED ({' '.join(failed)}): {summary}; replay: {shown(out)}/<target>_fuzzer "
              f"{shown(out)}/artifacts/<file>")
    else:
        print(f"fuzz: {summary}")
    return failed


def clang_version():
    try:
        return subprocess.run(["clang++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "clang (version unknown)"


def markdown(results, options, state):
    how = (f"{options.seconds} s per target from a random seed" if options.seconds else
           "CI's deterministic run: each target's seeds and past findings, then a fixed number of mutations "
           "from a fixed seed")
    total = sum(r["executions"] for r in results)
    failing = [r["target"] for r in results if r["exit"] != 0]
    lines = [
        "# Fuzzing the tool", "",
        f"Command: `{options.command}` ({datetime.date.today().isoformat()}, {provenance.describe(state)}; "
        f"{clang_version()}; {platform.platform()}, {options.jobs} targets at a time). {how}. Every target "
        f"built with `{options.flags}`, run with `{options.options}`, on "
        f"{'the corpus of the run before and ' if options.kept_corpus else 'a fresh corpus from '}"
        "the seeds of `tests/fuzz/make_seed_corpus.py` (tagged exports of the bundled models, "
        "their external-data variants with hostile locations and ranges, graphs nested 1, 64 and 65 deep, "
        "malformed module tables; the exports' tables, rewrite records and tags for `json` and `tag_grammar`) "
        "and the past findings of `tests/fuzz/regressions/`. Build and seeds "
        f"{options.prepared} s, fuzzing {options.fuzzing} s.", "",
        "| target | executions | exec/s | seeds | past findings | corpus at the end (inputs / bytes) | "
        "edges covered | peak RSS MiB | outcome |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in results:
        outcome = "0 crashes, leaks, timeouts, OOMs" if r["exit"] == 0 else f"**failed** (exit {r['exit']})"
        lines.append(f"| `{r['target']}` | {r['executions']:,} | {r['rate']:,} | {r['seeds']} | "
                     f"{r['past_findings']} | {r['corpus']} | {r['edges']} | {r['peak_rss_mb'] or '-'} | "
                     f"{outcome} |")
    lines += [f"| **all** | **{total:,}** | | | | | | | **{len(failing)} failing** |", "",
              "What the first runs found, and each fix with its regression test: "
              "`tests/fuzz/regressions/README.md`."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(prog="fuzz_report.py", description=__doc__.split("\n")[0])
    parser.add_argument("--targets", required=True, help="comma-separated targets")
    parser.add_argument("--prepared", type=int, required=True, help="seconds the build and the seeds took")
    parser.add_argument("--fuzzing", type=int, required=True, help="seconds the fuzzing took")
    parser.add_argument("--jobs", type=int, required=True, help="targets run at a time")
    parser.add_argument("--seconds", type=int, default=None, help="seconds per target (open-ended run)")
    parser.add_argument("--flags", required=True, help="the compiler flags the targets were built with")
    parser.add_argument("--options", required=True, help="libFuzzer's options")
    parser.add_argument("--command", default="scripts/fuzz.sh", help="the command that ran, for the report")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the run as Markdown here")
    parser.add_argument("--dir", type=Path, default=ROOT / "build" / "fuzz",
                        help="the run's folder (logs/, artifacts/, seeds/; default build/fuzz)")
    parser.add_argument("--regressions", type=Path, default=ROOT / "tests" / "fuzz" / "regressions",
                        help="the past findings, a folder per target (default tests/fuzz/regressions)")
    parser.add_argument("--kept-corpus", action="store_true", help="the run went on from the corpora before")
    options = parser.parse_args()
    # the targets scripts/fuzz.sh built from the checkout just before
    state = provenance.state([f"{target}_fuzzer" for target in options.targets.split(",")], options.dir)
    results = [target_result(options.dir, options.regressions, target) for target in options.targets.split(",")]
    for result in results:
        result["kept"] = keep_findings(options.dir, options.regressions, result["target"])
    how = f"{options.seconds}s each" if options.seconds else "seeds, past findings and fixed mutations"
    summary = (f"{len(results)} targets ({how}): {sum(r['executions'] for r in results)} executions, "
               f"{sum(r['exit'] != 0 for r in results)} failing; build+seeds {options.prepared}s, "
               f"fuzzing {options.fuzzing}s")
    if options.markdown:  # said first: the summary stays the last line
        options.markdown.parent.mkdir(parents=True, exist_ok=True)
        options.markdown.write_text(markdown(results, options, state))
        print(f"fuzz: report written to {options.markdown}")
    failed = print_results(options.dir, results, summary)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
