"""Scores of one model's exported files, one per method: the harness's scorer.

usage: .venv/bin/python bench/score.py MODEL PLAIN.onnx HIERTAG.onnx LEGACY.onnx

Prints one JSON object {method: scores} on stdout. Per file: nodes (main
graph), and for the tagged methods:
  tagged             nodes carrying a hierarchy_tag (coverage = tagged / nodes)
  tags, modules      distinct tags on nodes; modules in the file's table
  contaminated       cross-layer contamination (bench/metrics.py): nodes whose
                     ONNX name lies in block N of a container, tagged block M
  boundary_checked, boundary_passed, boundary_failures
                     the module-boundary check (hiertag.checks) over
                     the reference modules: every module that owns a node in the
                     hiertag file (a correct tagging has nodes there) and is
                     called through __call__. A module passes when the nodes
                     tagged with it consume exactly tensors it received in eager
                     PyTorch and produce exactly tensors it returned; a module
                     the method tagged no node with fails.
The model is rebuilt from the same seed as the exports, so PyTorch's values
are the ones the files were exported from. Runs in a process the legacy
baseline never patched."""

import json
import sys
import warnings

import onnx
import onnxruntime

import metrics
import suite
from hiertag import checks


def owning_paths(model):
    """Module paths of the table that at least one node of the main graph lies within."""
    table = checks.module_table(model)
    used = {tag for node in model.graph.node for tag, _ in checks.node_refs(node)}
    return {entry["path"] for tag, entry in table.items() if any(checks.is_within(u, tag) for u in used)}


def score_tagged(path, model, reference_paths, torch_model, args):
    # Feeds per file: the baseline's file may name its graph inputs differently
    # (its torch function mode is active while the tracer names them).
    feeds = checks.feeds_for(str(path), torch_model, args)
    tagged, nodes = metrics.coverage(model)
    table = checks.module_table(model)
    results, skipped = checks.module_boundary_results(model, torch_model, args, feeds)
    by_path = {}
    for key, found in results.items():
        by_path.setdefault(table[checks.key_tag(table, key)]["path"], []).extend(found)
    checked = sorted(reference_paths - {table[checks.key_tag(table, key)]["path"] for key in skipped})
    failures = {}
    for path in checked:
        if path not in by_path:
            failures[path] = ["no node tagged with this module"]
        elif by_path[path]:
            failures[path] = by_path[path]
    return {"nodes": nodes, "tagged": tagged, "tags": len(set(metrics.node_tags(model)) - {None}),
            "modules": len(table), "contaminated": len(metrics.cross_layer_contamination(model)),
            "boundary_checked": len(checked), "boundary_passed": len(checked) - len(failures),
            "boundary_failures": {path: found[:1] for path, found in sorted(failures.items())}}


def score(model_name, plain_path, hiertag_path, legacy_path):
    warnings.simplefilter("ignore")
    onnxruntime.set_default_logger_severity(3)
    torch_model, args = suite.build(model_name)
    reference = checks.eager_reference(torch_model)
    hiertag = onnx.load(hiertag_path)
    reference_paths = owning_paths(hiertag)
    scores = {"plain": {"nodes": len(onnx.load(plain_path).graph.node)},
              "hiertag": score_tagged(hiertag_path, hiertag, reference_paths, reference, args)}
    del hiertag
    scores["legacy"] = score_tagged(legacy_path, onnx.load(legacy_path), reference_paths, reference, args)
    return scores


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: score.py MODEL PLAIN.onnx HIERTAG.onnx LEGACY.onnx")
    print(json.dumps(score(*sys.argv[1:])))


if __name__ == "__main__":
    main()
