"""hiertag export: export a HuggingFace model (id, directory or class + config) with tags.

MODEL is one of
  BertModel, transformers:CLASS   a transformers model class (or a config class, with --task)
                                  built from --config (JSON of the config's arguments) with
                                  random weights, seeded: nothing is downloaded
  DIRECTORY                       a local directory with config.json (save_pretrained):
                                  its weights are loaded when present, else random ones
  HUB_ID (bert-base-uncased)      a model already in the local HuggingFace cache (never
                                  downloaded: a model not cached is an error)
  path/to/file.py:FUNCTION        FUNCTION() returns (model, args) as torch.onnx.export takes them

Example inputs are built from the config, by the forward's parameters: input_ids
(batch 1, 16 tokens) with an all-ones attention_mask, decoder_input_ids (and an
all-ones decoder_attention_mask) for encoder-decoders, pixel_values from the
(vision) config's num_channels and image_size, input_values (a waveform, or a
spectrogram when the config has num_mel_bins and max_length) and input_features
(whisper-style: num_mel_bins x 2*max_source_positions; speech2text-style: frames x
input_feat_per_channel). --input NAME=SPEC replaces or adds one: SPEC is
DTYPE[D0,D1,...] with an optional range for integers (int64[1,32]:0..1000),
float32[1,3,224,224], or ones[1,32] (int64 ones). The graph's inputs are exactly
those tensors, under their parameter names.

The file is written beside OUT, checked with `hiertag validate` and renamed to
OUT only then; on any error nothing is left. Prints `OUT: N nodes tagged, M
modules (MODEL)` and the module tree to depth 2 (--json: one JSON object).
Exit status 0, or 2 with one line on stderr."""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import hiertag
from hiertag import core, models, verbs


class ExportError(verbs.UsageError):
    """Bad input, or a model that cannot be exported: one line, exit status 2."""


def fail(message):
    raise ExportError(message)


def _input_files(model_spec):
    """The files building `model_spec` reads that an output could name: a
    FILE.py, or a save_pretrained directory's files (its ONNX files aside)."""
    if models.is_file_spec(model_spec):
        return [str(model_spec).rpartition(":")[0]]
    if Path(str(model_spec)).is_dir():
        return [path for path in Path(str(model_spec)).iterdir() if path.is_file() and path.suffix != ".onnx"]
    return []


def _as_written(said, staged, output):
    """What the core `said` about the staged file, naming the output it becomes."""
    return str(said).replace(str(staged), str(output))


def _open_written(staged, output):
    """The file the export wrote at `staged`, opened once (core.TaggedFile) for
    every question the verb asks of it; the reader's one line, naming `output`,
    when it cannot be read as a tagged file."""
    try:
        return core.TaggedFile(str(staged))
    except core.TaggedFileError as error:
        fail(f"the tagged file is not valid: {_as_written(error, staged, output)}")


def _export_once(model, args, path, opset, torch_modules, input_names, output_names, dynamo=False):
    """Exports with tags, torch's output (and the plugin's own note on `torch_modules`,
    which the verb words itself) silenced. `dynamo`: torch's dynamo exporter (its
    default opset when `opset` is None)."""
    import torch
    with models.quiet(), hiertag.tagging(torch_modules=torch_modules):
        if dynamo:
            positional, keywords = (args[:-1], args[-1]) if args and isinstance(args[-1], dict) else (args, None)
            torch.onnx.export(model, tuple(positional), str(path), kwargs=keywords, dynamo=True,
                              **({"opset_version": opset} if opset is not None else {}),
                              input_names=input_names, output_names=output_names)
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset,
                              input_names=input_names, output_names=output_names)


def export_model(model_spec, output, *, config=None, task=None, inputs=(), opset=hiertag.OPSET,
                 torch_modules=None, dynamo=False):
    """Builds the model (build), exports it with the plugin to `output` and
    returns the summary {"model", "output", "nodes", "modules", "inputs",
    "opset", "tree"} (tree: `hiertag tree --json --depth 2`). The file is
    written in a temporary directory beside `output` and renamed to it only
    once the export succeeded, the graph's inputs are the chosen ones and
    `hiertag validate` passed; on any error nothing is left and ExportError
    says why in one line."""
    output = Path(output)
    if output.is_dir():
        fail(f"output '{output}' is a directory")
    if not output.parent.is_dir():
        fail(f"output directory '{output.parent}' does not exist")
    verbs.refuse_overwriting([output], inputs=_input_files(model_spec))
    modules, modules_source, _ = verbs.torch_modules_option(hiertag.torch_modules_text(torch_modules))
    import torch
    from torch.onnx import _constants
    low, high = _constants.ONNX_BASE_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
    if dynamo:
        high = getattr(_constants, "ONNX_MAX_OPSET", high)
    if opset is not None and (not isinstance(opset, int) or not low <= opset <= high):
        exporter = "dynamo" if dynamo else "TorchScript"
        fail(f"bad --opset {opset}: the {exporter} exporter takes {low} to {high}")
    try:
        with models.quiet():
            torch.ops.load_library(hiertag.library_path())
    except FileNotFoundError as error:
        fail(str(error).removeprefix("hiertag: "))
    except OSError as error:
        failure = hiertag.install_failure()
        fail(f"plugin not installed: {failure}" if failure else
             f"cannot load the plugin: {models.describe_error(error)}")
    # Names no torch class has: the plugin finds them as the export will; said once the file is written.
    note = core.unknown_torch_modules_note(hiertag.unknown_torch_modules(modules), modules_source)

    try:
        model, args = models.build(model_spec, config=config, task=task, inputs=inputs)
    except models.ModelError as error:
        fail(str(error))
    # The graph's inputs are named after the parameters when the arguments
    # are all tensors bound by name (always so for transformers models).
    values = [*args[:-1], *args[-1].values()] if args and isinstance(args[-1], dict) else list(args)
    input_names = getattr(model.forward, "hiertag_inputs", None)
    if not all(isinstance(v, torch.Tensor) for v in values):
        input_names = None
    # Filled by the narrowed forward while the exporter traces it, and read by
    # the exporter after the trace (it names the traced graph's outputs); a
    # list still empty then leaves torch's own names.
    output_names = getattr(model.forward, "hiertag_outputs", None)

    # Everything is written into a fresh directory beside OUT (torch writes a
    # model over 2 GiB as the .onnx plus one file per tensor), and moved to
    # OUT's directory only when the export succeeded, its graph's inputs are
    # the chosen ones and `hiertag validate` passed.
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    staged = staging / output.name
    try:
        try:
            _export_once(model, args, staged, opset, modules, input_names, output_names, dynamo)
            written = _open_written(staged, output)
            if output_names and len(written.graph_outputs) != len(output_names):
                # The outputs did not flatten as their names: torch's names then.
                _export_once(model, args, staged, opset, modules, input_names, None, dynamo)
                written = _open_written(staged, output)
        except ExportError:
            raise
        except Exception as error:
            if getattr(error, "hiertag_raised_by_model", False):
                shapes = ", ".join(f"{n}{list(v.shape)}" for n, v in zip(input_names or [], values, strict=False))
                fail(f"{type(model).__name__} fails on the example inputs{f' ({shapes})' if shapes else ''}: "
                     f"{models.describe_error(error)}")
            if str(error).lstrip().startswith("hiertag"):
                fail(f"export failed: {models.describe_error(error)}")
            fail(f"torch cannot export this model: {models.describe_error(error)}")
        graph_inputs = written.graph_inputs
        if input_names is not None and graph_inputs != input_names:
            fail(f"the exported graph's inputs are {graph_inputs}, not the chosen {input_names}")
        validation = written.validate()
        if not validation["valid"]:
            problems = validation["problems"]
            fail(f"the tagged file is not valid: {_as_written(problems[0], staged, output)}")
        try:
            tree = written.tree(2)
        except core.TaggedFileError as error:
            fail(f"hiertag tree failed on {output}: {_as_written(error, staged, output)}")
        tree["file"] = str(output)
        opset_written = written.opset
        del written  # the file as read, released before the summary is returned
        for extra in staging.iterdir():  # external data first, the model last
            if extra != staged:
                os.replace(extra, output.parent / extra.name)
        os.replace(staged, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if note:
        print(f"hiertag export: {note}", file=sys.stderr)
    return {"model": str(model_spec), "output": str(output), "nodes": validation["nodes"],
            "modules": validation["modules"], "inputs": graph_inputs, "opset": opset_written, "tree": tree}


# ---------------------------------------------------------------------------
# The command


def _tasks():
    """--help's list of the TASK names, by the transformers class each builds."""
    by_class = {}
    for task, auto in models.TASKS.items():
        by_class.setdefault(auto, []).append(task)
    tasks = "\n".join(f"  {' | '.join(names):<46}  transformers.{auto}" for auto, names in by_class.items())
    return "TASK (default: a directory's or hub id's config.architectures[0], else AutoModel):\n" + tasks


def arguments(parser):
    parser.add_argument("model", metavar="MODEL",
                        help="a transformers class (BertModel, transformers:GPT2LMHeadModel), a save_pretrained "
                             "directory, a cached hub id, or FILE.py:FUNCTION")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the tagged ONNX file to write")
    parser.add_argument("--config", metavar="JSON",
                        help="config arguments as a JSON object (a class: the whole config; a directory or hub "
                             "id: overrides)")
    parser.add_argument("--task", metavar="TASK",
                        help="the head, for a config class, directory or hub id (TASK names below)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SPEC",
                        help="an example input replacing or adding one: int64[1,32]:0..1000, float32[1,3,224,224], "
                             "ones[1,32] (repeatable)")
    parser.add_argument("--opset", type=int, default=None, metavar="N",
                        help=f"ONNX opset (default {hiertag.OPSET}; with --dynamo, torch's default)")
    parser.add_argument("--dynamo", action="store_true",
                        help="export with torch's dynamo (torch.export-based) exporter, torch's default since 2.9, "
                             "instead of the TorchScript-based one")
    parser.add_argument("--torch-modules", default=None, metavar="0|1|A,B",
                        help="torch.nn modules in the tags: 0 none, 1 all, or a comma list of class names "
                             "(default: HIERTAG_TORCH_MODULES, else 0)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(options):
    # Nothing is ever downloaded: the hub is offline for this process.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    opset = options.opset if options.opset is not None or options.dynamo else hiertag.OPSET
    summary = export_model(options.model, options.output, config=options.config, task=options.task,
                           inputs=options.input, opset=opset, torch_modules=options.torch_modules,
                           dynamo=options.dynamo)
    if options.json:
        print(json.dumps(summary))
        return 0
    print(f"{summary['output']}: {summary['nodes']} nodes tagged, {summary['modules']} modules ({summary['model']})")
    _, tree, _ = core.run_tool(["tree", summary["output"], "--depth", "2"])
    sys.stdout.flush()
    sys.stdout.buffer.write(tree)
    return 0


VERB = verbs.Verb(__doc__, arguments, run, epilog=_tasks())
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
