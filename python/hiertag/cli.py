"""The `hiertag` command: one entry point for every verb.

validate, tree and extract are the native tool's, run in process over the
C++ file layer (hiertag._core; no torch needed; the same commands as the
`hiertag` binary, build/hiertag in a checkout); the others are Python modules of this package,
each with a `main(argv) -> exit status`. Every verb takes --help and --json;
bad input gives one line on stderr and exit status 2."""

import importlib
import os
import sys

# verb -> (module with main(argv), one-line summary); None: the native tool.
VERBS = {
    "validate": (None, "check every node's tag against the grammar and the module table"),
    "tree": (None, "print the module tree with node, op and parameter counts"),
    "extract": (None, "write one module (or one of its calls) as a standalone ONNX model"),
    "export": ("hiertag.verbs.export", "export a HuggingFace model (id, directory or class + config) with tags"),
    "verify": ("hiertag.verbs.verify", "check every module of a model's export against PyTorch"),
    "import-dynamo": ("hiertag.verbs.import_dynamo",
                      "turn a dynamo export's module metadata into hiertag's tags and table"),
    "carry": ("hiertag.verbs.carry",
              "tag a transformed copy (optimized, simplified, quantized) from the tagged original"),
    "profile": ("hiertag.verbs.profile", "time every module in ONNX Runtime's profiler"),
    "compare": ("hiertag.verbs.compare", "compare two tagged files module by module (--values: boundary values)"),
    "select": ("hiertag.verbs.select",
               "the node names of the matching modules (for quantize_dynamic's nodes_to_exclude)"),
    "report": ("hiertag.verbs.report", "a Markdown report of a tagged file"),
    "graphml": ("hiertag.verbs.graphml", "the tagged graph as hierarchical GraphML (one nested graph per module)"),
    "explorer": ("hiertag.verbs.explorer", "write Model Explorer's layer namespaces from the tags"),
}


def usage():
    width = max(len(verb) for verb in VERBS)
    lines = ["usage: hiertag VERB [arguments]  (hiertag VERB --help for a verb's own)", "", "verbs:"]
    lines += [f"  {verb:<{width}}  {summary}" for verb, (_, summary) in VERBS.items()]
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
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(usage())
        return 0 if argv else 2
    verb = argv[0]
    if verb not in VERBS:
        print(f"hiertag: unknown verb '{verb}' (one of {', '.join(VERBS)})", file=sys.stderr)
        return 2
    module = VERBS[verb][0]
    try:
        return run_native(argv) if module is None else importlib.import_module(module).main(argv[1:])
    except BrokenPipeError:
        # The reader stopped reading (| head): nothing more to say, and
        # Python's final flush must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
