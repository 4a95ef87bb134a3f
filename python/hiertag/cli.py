"""The `hiertag` command: one entry point for every verb.

validate, tree and extract are the native tool's, run in process over the
C++ file layer (hiertag._core; no torch needed; the same commands as the
`hiertag` binary, build/hiertag in a checkout); the others are Python modules
of this package, each declaring its verb once (hiertag.verb.Verb). Every verb
takes --help and --json; bad input gives one line on stderr and exit status 2."""

import importlib
import os
import pydoc
import sys
from pathlib import Path

from hiertag.verb import synopsis

# The Python verbs' modules (hiertag.verbs.MODULE), in the table's order after
# the native tool's commands.
PYTHON_VERBS = ("export", "verify", "import_dynamo", "carry", "profile", "compare", "select", "report", "graphml",
                "explorer")


def verbs():
    """{verb: (its module, or None for the native tool's, summary)}: the native
    commands' declarations (hiertag._core.tool_commands) and the first line of
    each Python verb module's (or package's) docstring, read from its file without importing
    it or its package (hiertag.verbs imports onnx: the native commands need
    neither)."""
    from hiertag import core
    table = {name: (None, summary) for name, summary in core.tool_commands()}
    for module in PYTHON_VERBS:
        path = Path(__file__).parent / "verbs" / f"{module}.py"
        if not path.exists():  # a verb that is a package (hiertag.verbs.carry)
            path = path.with_suffix("") / "__init__.py"
        with open(path, encoding="utf-8") as source:
            name, summary = synopsis(pydoc.source_synopsis(source))
        table[name] = (f"hiertag.verbs.{module}", summary)
    return table


def usage(table):
    width = max(len(verb) for verb in table)
    lines = ["usage: hiertag VERB [arguments]  (hiertag VERB --help for a verb's own)", "", "verbs:"]
    lines += [f"  {verb:<{width}}  {summary}" for verb, (_, summary) in table.items()]
    lines += ["", "Exit status: 0 success, 1 checks found problems, 2 bad input or usage."]
    return "\n".join(lines) + "\n"


def run_native(argv):
    from hiertag import core
    status, out, err = core.run_tool(argv)
    sys.stdout.flush()
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(err)
    sys.stderr.buffer.flush()
    return status


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    table = verbs()
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(usage(table))
        return 0 if argv else 2
    verb = argv[0]
    if verb not in table:
        print(f"hiertag: unknown verb '{verb}' (one of {', '.join(table)})", file=sys.stderr)
        return 2
    module = table[verb][0]
    try:
        return run_native(argv) if module is None else importlib.import_module(module).main(argv[1:])
    except BrokenPipeError:
        # The reader stopped reading (| head): nothing more to say, and
        # Python's final flush must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
