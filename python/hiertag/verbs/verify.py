"""hiertag verify: check every module of a model's export against PyTorch.

Exports the model with the plugin (HIERTAG=1; torch's TorchScript-based
exporter, or with --dynamo its dynamo exporter), then for every call of every
module of the module table (a module called several times is checked call by
call, `extract --call K`):
  boundary  each value its nodes read from outside is a specific tensor the
            call received in PyTorch, and each value they make for outside a
            specific tensor it returned, one to one, every element within
            1e-4 of its own magnitude (checks.disagreement; every forward
            wrapped under the exporter's tracer, so calls straight to
            .forward() count too);
  extract   `hiertag extract` cuts it out; fed with those received tensors,
            the extracted model returns those returned tensors (every element
            within 1e-4 of its own magnitude).
Prints a table, one call a line, and a summary; exits 0 only when every call
passes both checks. The one exception is a module whose boundary the file
itself records as removed by an export pass (a fused node's hiertag.spans, or
hiertag.rewrites): extract must refuse it naming that pass, and it passes as
"refused" with that reason. A module that ran but left no node (folded into
a constant, or computing nothing) has nothing to extract: "no nodes", with
what the table says it became.

MODEL is zoo:NAME (a bundled model of hiertag.zoo: bert, gpt2, t5, ...), or
anything `hiertag export` takes (hiertag export --help): a transformers class
built from --config with random weights (BertModel, transformers:BertModel), a
save_pretrained directory, a cached hub id, or path/to/file.py:FUNCTION
returning (model, args). Example inputs come from the config; --input
NAME=SPEC replaces or adds one (SPEC: DTYPE[D0,D1,...], int64[1,16]:0..1000,
ones[1,16])."""

import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

import hiertag
from hiertag import OPSET, checks, core, verbs
from hiertag.verbs import fail


def build(options):
    """(model, args) of MODEL: a bundled model, or anything `hiertag export`
    builds (hiertag.models.build: transformers classes from a config, local
    directories, cached hub ids, FILE.py:FUNCTION)."""
    kind, _, target = options.model.partition(":")
    torch.manual_seed(0)
    if kind == "zoo":
        from hiertag import zoo
        if target not in zoo.ALL:
            fail(f"unknown zoo model '{target}' (one of {', '.join(zoo.ALL)})")
        return zoo.ALL[target]()
    from hiertag import models
    try:
        model, args = models.build(options.model, config=options.config, inputs=options.input)
    except models.ModelError as error:
        fail(str(error))
    return model.eval() if isinstance(model, torch.nn.Module) else model, args


def extract_all(source, table, out_dir):
    """{boundary key: (path, extract's JSON) or (None, its error line)}, one per call."""
    extracted = {}
    opened, types = core.TaggedFile(str(source)), core.value_types()
    for index, tag in enumerate(table):
        for call in range(checks.call_count(table, tag)):
            key = checks.boundary_key(table, tag, call)
            out = Path(out_dir) / f"module{index}_{call}.onnx"
            try:
                extracted[key] = (out, opened.extract(tag, call if key != tag else None, str(out), value_types=types))
            except core.TaggedFileError as error:
                extracted[key] = (None, f"hiertag extract: {error}")
    return extracted


def verify_file(source, torch_model, args, out_dir):
    """Checks every call of every module of the tagged file `source` exported
    from `torch_model` on `args`. Returns (rows, failure lines): a row
    (key, nodes, extract result, boundary result, passed) per call."""
    model = onnx.load(source)
    table = checks.module_table(model)
    reference = checks.eager_reference(torch_model)
    feeds = checks.feeds_for(source, torch_model, args)
    extracted = extract_all(source, table, out_dir)
    eager = {}
    results, boundary_skipped = checks.module_boundary_results(model, reference, args, feeds, assignments=eager)
    boundary_failures = [failure for found in results.values() for failure in found]
    rows = []
    rewritten_keys = checks.rewritten_boundaries(model)
    for key, (path, info) in extracted.items():
        rewritten = rewritten_keys.get(key)
        not_checked = boundary_skipped.get(key)
        never_ran = table[checks.key_tag(table, key)].get("ran", True) is False
        if rewritten is not None:
            refused_right = path is None and rewritten.split(":")[0] in info
            extract_result = "refused (rewrite)" if refused_right else f"FAIL (not refused: {rewritten})"
        elif path is None and never_ran and "never ran" in info:
            # A container its caller reached past: no boundary was claimed, and
            # its children's nodes are interleaved with its caller's.
            extract_result = "refused (never ran)"
        elif path is None and "has no nodes" in info:
            # It ran and left no node: nothing to cut out; the table says
            # what its computation became, if anything.
            folded = table[checks.key_tag(table, key)].get("folded_into")
            extract_result = "no nodes" + (f" (folded into {', '.join(folded)})" if folded else "")
        elif path is None:
            extract_result = f"FAIL ({info})"
        elif never_ran:
            # Its children's nodes, cut out together: no call of it received or
            # returned anything to check them against.
            extract_result = "written (never ran)"
        else:
            extract_result = None  # run below, on the call's eager values
        problems = [f for f in boundary_failures if f.startswith(key + ":")]
        if extract_result is None and problems:
            # The cut reads or writes a value the call did not receive or
            # return: there is no eager tensor to feed or compare it with.
            extract_result = "not checked (the boundary check failed)"
        elif extract_result is None:
            extract_result = run_extracted(path, info, eager.get(key))
        boundary_result = (f"no boundary ({not_checked})" if not_checked is not None
                           else "ok" if not problems else f"FAIL ({len(problems)} values)")
        good = extract_result.startswith(("ok", "refused", "no nodes", "written")) and not problems
        rows.append((key, info["nodes"] if path else "-", extract_result, boundary_result, good))
    return rows, boundary_failures


def run_extracted(path, info, eager):
    """The extracted model run on the tensors the call received in eager
    PyTorch (the boundary check's assignment of each input to one of them),
    its outputs against the tensors the call returned."""
    if eager is None:
        return "FAIL (the boundary check matched none of its values to eager tensors)"
    received, returned = eager
    missing = [name for name in info["inputs"] + info["outputs"] if name not in {**received, **returned}]
    if missing:
        return f"FAIL ('{missing[0]}' is not on the call's boundary)"
    # Without graph optimizations: the check is of the file's values, not of ONNX Runtime's optimizer.
    session = onnxruntime.InferenceSession(str(path), checks.unoptimized_session_options())
    types = {i.name: i.type for i in session.get_inputs()}
    feeds = {name: received[name].numpy().astype(_numpy_type(types[name])) for name in info["inputs"]}
    produced = session.run(info["outputs"], feeds)
    worst = max((checks.disagreement(value, returned[name].numpy())
                 for value, name in zip(produced, info["outputs"], strict=True)), default=0.0)
    return f"{'ok' if worst <= checks.FLOAT32_TOLERANCE else 'FAIL'} (max rel {worst:.1e})"


def _numpy_type(ort_type):
    """numpy's dtype for an ONNX Runtime input type ('tensor(float)')."""
    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return {"float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_}.get(name, name)


def arguments(parser):
    parser.add_argument("model", help="zoo:NAME, transformers:CLASS or FILE.py:FUNCTION")
    parser.add_argument("--config", help="JSON of the transformers config's arguments")
    parser.add_argument("--input", action="append", default=[], help="NAME=SPEC (repeatable)")
    parser.add_argument("--dynamo", action="store_true",
                        help="export with torch's dynamo (torch.export-based) exporter, torch's default since 2.9")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(options):
    torch.ops.load_library(hiertag.library_path())
    warnings.simplefilter("ignore")
    onnxruntime.set_default_logger_severity(3)
    torch_model, args = build(options)

    with tempfile.TemporaryDirectory() as out_dir:
        source = Path(out_dir) / "model.onnx"
        with hiertag.tagging():
            if options.dynamo:
                positional, keywords = ((args[:-1], args[-1]) if args and isinstance(args[-1], dict)
                                        else (args, None))
                from hiertag import models
                with models.quiet():  # the dynamo exporter prints its progress
                    torch.onnx.export(torch_model, tuple(positional), str(source), kwargs=keywords, dynamo=True)
            else:
                torch.onnx.export(torch_model, args, str(source), dynamo=False, opset_version=OPSET)
        # The check runs the model again: a fresh one, as models cache state
        # across calls (Levit keeps its attention biases after the first).
        fresh_model, fresh_args = build(options)
        rows, boundary_failures = verify_file(source, fresh_model, fresh_args, out_dir)
        nodes = len(list(checks.walk_nodes(onnx.load(source).graph)))
    passed = sum(row[-1] for row in rows)
    if options.json:
        print(json.dumps({"model": options.model, "nodes": nodes, "calls": len(rows), "passed": passed,
                          "rows": [{"call": key, "nodes": count, "extract": extract_result,
                                    "boundary": boundary_result, "passed": good}
                                   for key, count, extract_result, boundary_result, good in rows],
                          "boundary_failures": boundary_failures}))
        return 0 if passed == len(rows) else 1
    width = max(len(r[0]) for r in rows)
    print(f"{'module (#call)':<{width}}  {'nodes':>5}  {'extract':<24}  boundary")
    for key, count, extract_result, boundary_result, _ in rows:
        print(f"{key:<{width}}  {count:>5}  {extract_result:<24}  {boundary_result}")
    for failure in boundary_failures:
        print(f"  boundary: {failure}")
    print(f"{passed}/{len(rows)} module calls pass ({options.model}, {nodes} nodes)")
    return 0 if passed == len(rows) else 1


VERB = verbs.Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
