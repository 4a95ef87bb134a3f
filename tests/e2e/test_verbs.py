"""End-to-end: what every verb of the `hiertag` command shares, run on real files
as a user runs them (`hiertag VERB ...`): no verb writes over one of its inputs
(the file itself, a link to it, or an external data file a model reads); a
hostile external-data location is named alike by every verb, native or Python;
and a bad command line is one line naming its real problem."""

import contextlib
import hashlib
import importlib
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import onnxruntime
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, cli, core
from hiertag.models import quiet
from hiertag.verbs import import_dynamo, verify
from tests.e2e.exportable import DYNAMO_EXPORT, skip_unless_dynamo_export, zoo_model

MODEL = "containers"  # small, same-class siblings: quick to export, profile and carry


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """The input files every verb reads, in one folder (copied into each test's own):
    m.onnx tagged; x.onnx, the same with its weights in x.data; t.onnx, ONNX Runtime's
    basic optimization of m.onnx (carry's TRANSFORMED); d.onnx, torch's dynamo export
    with its weights in d.onnx.data; v.json, `hiertag verify --json`; models.py:containers,
    a FILE.py:FUNCTION for `hiertag export`."""
    folder = tmp_path_factory.mktemp("verbs")
    os.environ.pop("HIERTAG", None)
    model, args = zoo_model(MODEL)
    with quiet(), hiertag.tagging():
        torch.onnx.export(model, args, str(folder / "m.onnx"), dynamo=False, opset_version=OPSET)
    onnx.save_model(onnx.load(folder / "m.onnx"), str(folder / "x.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="x.data", size_threshold=0)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folder / "t.onnx")
    onnxruntime.InferenceSession(str(folder / "m.onnx"), options, providers=["CPUExecutionProvider"])
    if DYNAMO_EXPORT:  # else the tests reading d.onnx skip (dynamo_input)
        positional, keywords = import_dynamo.export_arguments(args)
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, positional, str(folder / "d.onnx"), kwargs=keywords, dynamo=True)
        # torch keeps a small model's weights inline (and leaves d.onnx.data empty): put them there.
        exported = onnx.load(folder / "d.onnx")
        (folder / "d.onnx.data").unlink(missing_ok=True)
        onnx.save_model(exported, str(folder / "d.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="d.onnx.data", size_threshold=0)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert verify.main([f"zoo:{MODEL}", "--json"]) == 0
    (folder / "v.json").write_text(printed.getvalue())
    (folder / "models.py").write_text(textwrap.dedent(f"""
        from hiertag import zoo

        def containers():
            return zoo.ALL["{MODEL}"]()
    """))
    return folder


@pytest.fixture
def files(originals, tmp_path):
    for path in originals.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    return tmp_path


def dynamo_input(arguments):
    """A skip where the arguments read d.onnx and this torch has no dynamo exporter to make it."""
    if "d.onnx" in arguments:
        skip_unless_dynamo_export()


def root_tag(path):
    return next(iter(checks.module_table(onnx.load(path))))


def snapshot(folder):
    """{name: sha256} of every file in the folder (links by what they are)."""
    return {p.name: os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir())}


def hiertag_command(capfd, *arguments):
    """(exit status, stdout, stderr) of `hiertag ARGUMENTS` (the native verbs run as the command runs them)."""
    status = cli.main([str(a) for a in arguments])
    captured = capfd.readouterr()
    return status, captured.out, captured.err


def resolved(files, arguments, out=None):
    """The arguments with OUT, ROOT (m.onnx's root tag) and the files of the folder filled in."""
    def one(argument):
        if argument == "OUT":
            return out
        if argument == "ROOT":
            return root_tag(files / "m.onnx")
        name, colon, function = argument.partition(":")
        return f"{files / name}{colon}{function}" if (files / name).is_file() else argument
    return [one(argument) for argument in arguments]


# (verb, arguments with OUT for the output, the input OUT is made to be, and the
# model whose external data file that is, if it is one).
WRITERS = [
    ("extract", ["m.onnx", "--module", "ROOT", "-o", "OUT"], "m.onnx", None),
    ("extract", ["x.onnx", "--module", "ROOT", "-o", "OUT"], "x.data", "x.onnx"),
    ("carry", ["m.onnx", "t.onnx", "-o", "OUT"], "m.onnx", None),
    ("carry", ["m.onnx", "t.onnx", "-o", "OUT"], "t.onnx", None),
    ("carry", ["x.onnx", "t.onnx", "-o", "OUT"], "x.data", "x.onnx"),
    ("report", ["m.onnx", "-o", "OUT"], "m.onnx", None),
    ("report", ["m.onnx", "--verify-json", "v.json", "-o", "OUT"], "v.json", None),
    ("graphml", ["m.onnx", "-o", "OUT"], "m.onnx", None),
    ("graphml", ["x.onnx", "-o", "OUT"], "x.data", "x.onnx"),
    ("explorer", ["m.onnx", "-o", "OUT"], "m.onnx", None),
    ("profile", ["m.onnx", "--runs", "1", "--plot", "OUT"], "m.onnx", None),
    ("import-dynamo", ["d.onnx", "-o", "OUT"], "d.onnx", None),
    ("import-dynamo", ["d.onnx", "-o", "OUT"], "d.onnx.data", "d.onnx"),
    ("export", ["models.py:containers", "-o", "OUT"], "models.py", None),
]


@pytest.mark.parametrize("link", ["itself", "symlink", "hardlink"])
@pytest.mark.parametrize("verb,arguments,target,model", WRITERS,
                         ids=[f"{verb}-{target}" for verb, _, target, _ in WRITERS])
def test_no_verb_writes_over_its_input(files, capfd, link, verb, arguments, target, model):
    """Check that an output naming an input file (itself, or a symbolic or hard link to it),
    or an external data file an input model reads, is refused in one line with exit
    status 2, and nothing is written."""
    dynamo_input(arguments)
    out = files / target
    if link == "symlink":
        (files / "link").symlink_to(target)
        out = files / "link"
    elif link == "hardlink":
        os.link(files / target, files / "link")
        out = files / "link"
    before = snapshot(files)
    status, stdout, stderr = hiertag_command(capfd, verb, *resolved(files, arguments, out))
    assert (status, stdout) == (2, ""), stderr
    through = "" if link == "itself" else " (the same file through a link)"
    if model is None:
        refusal = f"output '{out}' is the input '{files / target}'{through}"
    else:
        refusal = f"output '{out}' is the external data file '{target}' of the input '{files / model}'"
    assert stderr == f"hiertag {verb}: {refusal}: refusing to overwrite it\n"
    assert snapshot(files) == before


@pytest.mark.parametrize("verb,arguments", sorted({(verb, tuple(arguments)) for verb, arguments, _, _ in WRITERS}))
def test_an_output_that_is_another_file_is_replaced(files, capfd, verb, arguments):
    """Check the pair of the refusal: an existing output that is no input is replaced, atomically."""
    dynamo_input(arguments)
    out = files / "earlier.out"
    out.write_text("an earlier result")
    inputs = {name: digest for name, digest in snapshot(files).items() if name != out.name}
    status, _, stderr = hiertag_command(capfd, verb, *resolved(files, arguments, out))
    assert status == 0, stderr
    assert out.read_bytes() != b"an earlier result"
    after = snapshot(files)
    assert {name: after[name] for name in inputs} == inputs
    assert not [name for name in after if name.endswith("partial")]


def hostile_copy(source, folder, name, location):
    """`source` (a model with external data) saved as folder/name with every location set to `location`."""
    model = onnx.load(source, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, folder / name)
    return folder / name


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "evil.bin"])
def test_a_hostile_external_data_location_is_named_alike_by_every_verb(files, capfd, location):
    """Check that every verb reading a model whose external data location leads outside its
    folder ("..", an absolute path, a symbolic link out) refuses it in one line naming the
    initializer and the location as the native tool does, and writes nothing."""
    (files / "evil.bin").symlink_to("/etc/passwd")
    tagged = hostile_copy(files / "x.onnx", files, "hostile.onnx", location)
    # The dynamo export's copy where this torch makes one (DYNAMO_EXPORT); the tagged one always.
    imported = hostile_copy(files / "d.onnx", files, "hostile_dynamo.onnx", location) if DYNAMO_EXPORT else None
    validated = hiertag_command(capfd, "validate", tagged)
    assert validated[0] == 1
    native = {line.split(": ", 1)[1] for line in validated[1].splitlines()[:-1]}
    assert native and all(f"external data location '{location}' " in line for line in native)
    reason = next(iter(native)).split(f"external data location '{location}' ", 1)[1]
    first = onnx.load(tagged, load_external_data=False).graph.initializer[0].name
    expected = {tagged: f"{tagged}: initializer '{first}': external data location '{location}' {reason}"}
    if imported is not None:
        first_dynamo = onnx.load(imported, load_external_data=False).graph.initializer[0].name
        expected[imported] = f"{imported}: initializer '{first_dynamo}': external data location '{location}' {reason}"
    assert expected[tagged].split(": ", 1)[1] in native
    out = files / "out"
    commands = [
        ("extract", [tagged, "--module", root_tag(files / "m.onnx"), "-o", out], tagged),
        ("report", [tagged], tagged),
        ("graphml", [tagged, "-o", out], tagged),
        ("explorer", [tagged, "-o", out], tagged),
        ("select", [tagged, "--module", "*"], tagged),
        ("compare", [tagged, files / "m.onnx"], tagged),
        ("compare", [files / "m.onnx", tagged], tagged),
        ("carry", [tagged, files / "t.onnx", "-o", out], tagged),
        ("carry", [files / "m.onnx", tagged, "-o", out], tagged),
        ("profile", [tagged, "--runs", "1"], tagged),
        ("import-dynamo", [imported, "-o", out], imported),
    ][:None if imported is not None else -1]
    before = snapshot(files)
    for verb, arguments, named in commands:
        status, stdout, stderr = hiertag_command(capfd, verb, *arguments)
        assert (status, stdout) == (2, ""), (verb, stderr)
        assert stderr == f"hiertag {verb}: {expected[named]}\n", verb
    assert snapshot(files) == before


PYTHON_VERBS = [verb for verb, (module, _) in cli.verbs().items() if module is not None]


# Runs `hiertag ARGUMENTS`, then prints on stderr which of onnx and hiertag.verbs it loaded.
LOADED_AFTER = ("import sys; from hiertag import cli; status = cli.main(sys.argv[1:]); "
                "print(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('hiertag.verbs')), "
                "file=sys.stderr); sys.exit(status)")


def test_the_native_commands_and_the_table_import_neither_onnx_nor_the_python_verbs(tmp_path):
    """Check that `hiertag --help`, `hiertag validate` and `hiertag tree` load neither the
    onnx package nor hiertag.verbs (which imports it: 0.7 s of a command that takes 0.05 s),
    as the native commands need neither."""
    model = tmp_path / "m.onnx"
    with quiet(), hiertag.tagging():
        torch.onnx.export(*zoo_model(MODEL), str(model), dynamo=False, opset_version=OPSET)
    for arguments in (["--help"], ["validate", str(model)], ["tree", str(model), "--depth", "1"]):
        done = subprocess.run([sys.executable, "-c", LOADED_AFTER, *arguments], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == "[]", (arguments, done.stderr)


def test_each_verb_is_declared_once_and_every_listing_reads_that_declaration(capfd):
    """Check that `hiertag --help` lists every verb with the summary its own
    declaration holds (a Python verb's VERB, read from its module's docstring; a
    native command's from the tool, whose own --help lists the same), and that
    each verb's --help starts with its usage and says that summary."""
    status, listing, _ = hiertag_command(capfd, "--help")
    assert status == 0
    native = core.tool_commands()
    assert [name for name, _ in native] == ["validate", "tree", "extract"]
    _, tool_listing, _ = core.run_tool(["--help"])
    for name, summary in native:
        assert f"  {summary}\n" in tool_listing.decode() and f"  {name} MODEL.onnx" in tool_listing.decode()
        assert f"  {name}".ljust(len("import-dynamo") + 2) + f"  {summary}\n" in listing, name
    for name in PYTHON_VERBS:
        verb = importlib.import_module(cli.verbs()[name][0]).VERB
        assert verb.name == name and verb.prog == f"hiertag {name}"
        assert f"  {name}".ljust(len("import-dynamo") + 2) + f"  {verb.summary}\n" in listing, name
        status, help_text, _ = hiertag_command(capfd, name, "--help")
        assert status == 0 and help_text.startswith(f"usage: hiertag {name} ")
        assert f"\n{verb.summary}.\n" in help_text
        assert help_text.count("usage: hiertag") == 1, name  # argparse's usage line only


@pytest.mark.parametrize("verb", PYTHON_VERBS)
def test_an_unknown_option_is_named_not_the_missing_arguments(verb, capfd):
    """Check that an unknown option is reported as such (argparse checks required
    arguments first, and said they were missing), in one line with exit status 2."""
    assert hiertag_command(capfd, verb, "--no-such-option") == \
        (2, "", f"hiertag {verb}: unrecognized arguments: --no-such-option (hiertag {verb} --help)\n")


@pytest.mark.parametrize("verb,arguments,problem", [
    ("graphml", ["m.onnx", "--ouput", "out.graphml"], "unrecognized arguments: --ouput out.graphml"),
    ("carry", ["m.onnx", "t.onnx", "--out-file", "out.onnx"], "unrecognized arguments: --out-file out.onnx"),
    ("carry", ["m.onnx", "-o", "out.onnx"], "the following arguments are required: TRANSFORMED.onnx"),
    ("profile", ["m.onnx", "--runs", "many"], "argument --runs: invalid int value: 'many'"),
    ("profile", ["m.onnx", "--level", "most"], "argument --level: invalid choice: 'most'"),
    ("profile", ["m.onnx", "--json", "--csv"], "argument --csv: not allowed with argument --json"),
    ("select", ["m.onnx", "--module"], "argument --module: expected one argument"),
    ("report", ["m.onnx", "--bad\nflag"], "unrecognized arguments: --bad\\nflag"),
    ("verify", [], "the following arguments are required: model"),
    ("export", ["BertModel", "--bogus"], "unrecognized arguments: --bogus"),
    ("import-dynamo", ["d.onnx", "--torch-classes", "1", "-o", "out.onnx"],
     "unrecognized arguments: --torch-classes 1"),
])
def test_every_usage_error_names_its_problem_in_one_line(files, capfd, monkeypatch, verb, arguments, problem):
    """Check that each kind of bad command line says what is wrong, one line prefixed
    `hiertag VERB:`, exit status 2, and writes nothing."""
    monkeypatch.chdir(files)
    before = snapshot(files)
    status, stdout, stderr = hiertag_command(capfd, verb, *resolved(files, arguments))
    assert (status, stdout) == (2, "")
    assert stderr.count("\n") == 1 and stderr.startswith(f"hiertag {verb}: {problem}"), stderr
    assert snapshot(files) == before


@pytest.mark.parametrize("contents", [b"", b"not an ONNX model\n", b"\x08\x07\x12\xff\xff",
                                      b"\x08\x07\x3a\x04\x5a\x02\xff\xff"],
                         ids=["empty", "text", "truncated", "garbled graph input"])
@pytest.mark.parametrize("verb,arguments", [("validate", []), ("tree", []), ("extract", ["--module", "/M"])])
def test_a_file_that_is_no_onnx_model_is_one_line_from_the_native_verbs(tmp_path, capfd, contents, verb, arguments):
    """Check that validate, tree and extract, as the `hiertag` command runs them
    (extract first asks the onnx package for the file's value types), refuse a
    file that is no ONNX model in one line, exit status 2, with nothing written."""
    model = tmp_path / "bad.onnx"
    model.write_bytes(contents)
    out = ["-o", tmp_path / "out.onnx"] if verb == "extract" else []
    status, stdout, stderr = hiertag_command(capfd, verb, model, *arguments, *out)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.count("\n") == 1 and stderr.startswith(f"hiertag {verb}: {model}: "), stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.onnx"]


# The verbs that only read files, each as a user runs it; compare without
# --values counts modules, and runs no model.
FILE_ONLY = [
    ("select", ["m.onnx", "--module", "ROOT"]),
    ("report", ["m.onnx", "--verify-json", "v.json", "-o", "OUT"]),
    ("graphml", ["x.onnx", "-o", "OUT"]),
    ("explorer", ["m.onnx", "-o", "OUT"]),
    ("compare", ["m.onnx", "t.onnx"]),
    ("tree", ["m.onnx"]),
]


@pytest.mark.parametrize("verb,arguments", FILE_ONLY, ids=[verb for verb, _ in FILE_ONLY])
def test_a_verb_that_only_reads_files_imports_neither_torch_nor_onnxruntime(files, verb, arguments):
    """Check that `python -m hiertag VERB` on a file succeeds without importing torch or
    onnxruntime (seconds of start-up, and a verb a machine without them can run)."""
    command = [sys.executable, "-X", "importtime", "-m", "hiertag", verb, *resolved(files, arguments, files / "out")]
    # The hiertag this test imported (a checkout's or an installed one), and its native tool.
    env = {**os.environ, "PYTHONPATH": str(Path(hiertag.__file__).parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, cwd=files, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "hiertag.cli" in imported  # the measurement sees the imports
    assert not imported & {"torch", "onnxruntime"}, sorted(imported & {"torch", "onnxruntime"})


def _tied_model(folder):
    """A model whose initializers a and b are one 4 KiB range of src.data (tied
    weights saved once) and whose c (4 KiB) is inline: y = x + a + b + c."""
    import numpy as np
    values = np.arange(1024, dtype=np.float32)
    (folder / "src.data").write_bytes(b"\xee" * 64 + values.tobytes())
    initializers = []
    for name in ("a", "b"):
        tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=[1024])
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", "src.data"), ("offset", "64"), ("length", str(values.nbytes))):
            tensor.external_data.add(key=key, value=value)
        initializers.append(tensor)
    initializers.append(onnx.numpy_helper.from_array(2 * values, "c"))
    nodes = [onnx.helper.make_node("Add", ["x", "a"], ["s"]), onnx.helper.make_node("Add", ["s", "b"], ["t"]),
             onnx.helper.make_node("Add", ["t", "c"], ["y"])]
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(nodes, "tied", [value("x", onnx.TensorProto.FLOAT, [1024])],
                                   [value("y", onnx.TensorProto.FLOAT, [1024])], initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, folder / "src.onnx")
    return folder / "src.onnx", 4 * values


@pytest.mark.parametrize("limit", [None, 1000])
def test_save_model_copies_each_range_once_or_reads_the_weights_in(tmp_path, monkeypatch, limit):
    """Check that verbs.save_model, given a model read without its external data,
    writes OUT self-contained when it fits (the weights read in), and past the
    limit (lowered here) writes OUT.data by copying each range of the source's
    data file once (a and b share theirs) and the large inline tensor after it,
    the model computing what the source computes either way."""
    import numpy as np

    from hiertag import verbs
    if limit is not None:
        monkeypatch.setattr(verbs, "INLINE_LIMIT", limit)
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    source, expected = _tied_model(tmp_path / "in")
    model = verbs.load_model(source, read_data=False)
    out = tmp_path / "out" / "m.onnx"
    verbs.save_model(model, out, sources=[source], data_from=source)
    written = onnx.load(str(out), load_external_data=False)
    if limit is None:
        assert sorted(p.name for p in out.parent.iterdir()) == ["m.onnx"]
        assert not list(verbs.external_tensors(written))
    else:
        assert sorted(p.name for p in out.parent.iterdir()) == ["m.onnx", "m.onnx.data"]
        places = {t.name: {e.key: e.value for e in t.external_data} for t in written.graph.initializer}
        assert places["a"] == places["b"] == {"location": "m.onnx.data", "offset": "0", "length": "4096"}
        assert places["c"] == {"location": "m.onnx.data", "offset": "4096", "length": "4096"}
        assert Path(f"{out}.data").stat().st_size == 8192
    x = np.ones(1024, dtype=np.float32)
    (y,) = onnxruntime.InferenceSession(str(out)).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + expected)
