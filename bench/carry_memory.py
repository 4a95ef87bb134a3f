"""Where `hiertag carry` holds its memory: the command run in this process,
a thread sampling the resident set and the main thread's stack every 10 ms.
Prints, for each step of carry in the order it first ran (the innermost
function of hiertag.verbs.carry running, with the one it called in hiertag
below it), the largest resident set seen in it and its seconds, then the
peak and its whole stack within hiertag.

    .venv/bin/python bench/carry_memory.py TAGGED TRANSFORMED -o OUT [carry's options]

GNU time's peak (bench/tool_costs.py) is the figure to hold a target to: the
sampler misses what lives for less than 10 ms, cannot see inside a call to
the core, and its own samples add a few MiB. What this adds is where: which
step to make smaller. README "Scale" (under Reliability) has the figures at 825 layers."""

import os
import sys
import threading
import time
import traceback
from pathlib import Path

PACKAGE = str(Path(__file__).resolve().parents[1] / "python")
CARRY = os.path.join("hiertag", "verbs", "carry")


def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def where(frame):
    """(step, stack): the innermost frame in carry's package and the hiertag
    frame it called, and every hiertag frame, outermost first."""
    # A comprehension runs in a frame of its own: it is the step of the function holding it.
    stack = [f for f in traceback.extract_stack(frame) if "hiertag" in f.filename and not f.name.startswith("<")]
    named = [f"{Path(f.filename).stem}.{f.name}" for f in stack]
    inner = max((i for i, f in enumerate(stack) if CARRY in f.filename), default=None)
    if inner is None:
        return "(outside carry)", named
    return " > ".join(named[inner:inner + 2]), named


def main():
    sys.path.insert(0, PACKAGE)
    from hiertag import cli
    main_thread = threading.get_ident()
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            frame = sys._current_frames().get(main_thread)
            samples.append((time.perf_counter(), resident(), *where(frame)))
            done.wait(0.01)
    sampler = threading.Thread(target=sample, daemon=True)
    sys.argv = ["hiertag", "carry", *sys.argv[1:]]
    start = time.perf_counter()
    sampler.start()
    try:
        cli.main()
    except SystemExit as exit_:
        if exit_.code:
            raise
    finally:
        done.set()
        sampler.join()
    steps = {}
    for at, rss, step, _ in samples:
        first, last, peak = steps.get(step, (at, at, 0))
        steps[step] = (first, at, max(peak, rss))
    print(f"{'step':<72} {'from s':>7} {'to s':>7} {'peak MiB':>9}")
    for step, (first, last, peak) in sorted(steps.items(), key=lambda item: item[1][0]):
        print(f"{step:<72} {first - start:7.2f} {last - start:7.2f} {peak / 2**20:9.0f}")
    at, rss, _, stack = max(samples, key=lambda s: s[1])
    print(f"peak {rss / 2**20:.0f} MiB at {at - start:.2f} s in {' > '.join(stack)}")


if __name__ == "__main__":
    main()
