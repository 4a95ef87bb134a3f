"""End-to-end: `hiertag explorer` writes namespaces that Model Explorer's real
ONNX adapter (model-explorer-onnx) turns into layers equal to the module tree."""

import json
import subprocess

import onnx
import pytest
import torch
from model_explorer_onnx.main import ONNXAdapter

import hiertag
from hiertag import OPSET, checks, core
from hiertag.verbs import explorer
from tests.e2e.exportable import zoo_model


def export_tagged(name, path):
    model, args = zoo_model(name)
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    return path


def with_namespaces(name, directory):
    """(tagged model, path of its copy with namespaces)."""
    source = export_tagged(name, directory / f"{name}.onnx")
    out = directory / f"{name}.explorer.onnx"
    assert explorer.main([str(source), "-o", str(out)]) == 0
    return onnx.load(source), out


def adapter_nodes(path):
    """{node id: namespace below the graph's name} of the main graph as the adapter converts it."""
    graphs = ONNXAdapter().convert(str(path), {})["graphs"]
    main = graphs[0]
    return {node.id: node.namespace.removeprefix(main.id).strip("/") for node in main.nodes
            if node.label not in ("Input", "Output", "Initializer")}, graphs


def layers(namespaces):
    """Every namespace and all its prefixes: the layers a viewer draws."""
    found = set()
    for namespace in namespaces:
        segments = [s for s in namespace.split("/") if s]
        found.update("/".join(segments[:depth]) for depth in range(1, len(segments) + 1))
    return found


@pytest.mark.parametrize("name", ["bert", "gpt2", "tracer_alias"])
def test_adapter_layers_equal_the_module_tree(name, tmp_path):
    model, out = with_namespaces(name, tmp_path)
    namespaces, _ = adapter_nodes(out)
    tags = {node.name: checks.node_props(node)[core.TAG_KEY] for node in model.graph.node}
    modules_with_nodes = {tag.strip("/") for tag in tags.values()}
    assert layers(namespaces.values()) == layers(modules_with_nodes)
    # Every node outside the adapter's own constant placement sits in its tag's layer.
    for node in model.graph.node:
        if node.op_type != "Constant":
            assert namespaces[node.name] == tags[node.name].strip("/"), node.name
    # Without the namespaces the adapter groups by torch's node names: other layers.
    plain_namespaces, _ = adapter_nodes(export_tagged(name, tmp_path / "plain.onnx"))
    assert layers(plain_namespaces.values()) != layers(modules_with_nodes)


def test_body_nodes_lie_under_the_node_holding_their_body(tmp_path):
    model, out = with_namespaces("alias_chains", tmp_path)
    holder = next(node for node in model.graph.node if node.op_type == "If")
    holder_tag = checks.node_props(holder)[core.TAG_KEY].strip("/")
    written = onnx.load(out)
    branches = {a.name: a.g for a in next(n for n in written.graph.node if n.op_type == "If").attribute}
    body_nodes = [(branch, node) for branch, body in branches.items() for node in body.node]
    assert body_nodes
    for _, node in body_nodes:
        assert checks.node_props(node)[explorer.NAMESPACE_KEY] == ""  # tagged as the If itself
    namespaces, _ = adapter_nodes(out)
    for branch, node in body_nodes:
        if node.op_type != "Constant":
            assert namespaces[f"{holder.name}/{branch}/{node.name}"] == f"{holder_tag}/If <{holder.name}>/{branch}"


def test_loop_bodies_become_graphs_without_repeated_layers(tmp_path):
    _, out = with_namespaces("scripted_loop", tmp_path)
    _, graphs = adapter_nodes(out)
    bodies = [graph for graph in graphs[1:] if graph.id.endswith("/body")]
    assert len(bodies) == 2
    for body in bodies:
        computed = [node for node in body.nodes if node.label not in ("Input", "Output", "Constant")]
        assert computed and all(node.namespace == body.id for node in computed)


def test_only_the_namespace_entries_are_added(tmp_path):
    model, out = with_namespaces("bert", tmp_path)
    written = onnx.load(out)
    assert all(checks.node_props(node)[explorer.NAMESPACE_KEY] == checks.node_props(node)[core.TAG_KEY]
               for node in written.graph.node)
    for node in written.graph.node:
        kept = [p for p in node.metadata_props if p.key != explorer.NAMESPACE_KEY]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    assert written.SerializeToString() == model.SerializeToString()
    validated = subprocess.run([hiertag.tool_path(), "validate", str(out), "--json"], capture_output=True, text=True)
    assert validated.returncode == 0 and json.loads(validated.stdout)["valid"]


def test_replacing_a_namespace_and_never_the_input(tmp_path, capsys):
    source = export_tagged("containers", tmp_path / "model.onnx")
    model = onnx.load(source)
    model.graph.node[0].metadata_props.add(key=explorer.NAMESPACE_KEY, value="stale/namespace")
    onnx.save(model, source)
    before = source.read_bytes()
    assert explorer.main([str(source), "-o", str(source), "--json"]) == 2
    assert capsys.readouterr().err == (f"hiertag explorer: output '{source}' is the input '{source}': "
                                       "refusing to overwrite it\n")
    assert source.read_bytes() == before
    out = tmp_path / "out.onnx"
    assert explorer.main([str(source), "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["replaced"] == 1 and summary["nodes"] == len(model.graph.node)
    first = onnx.load(out).graph.node[0]
    assert [p.value for p in first.metadata_props if p.key == explorer.NAMESPACE_KEY] == \
        [checks.node_props(first)[core.TAG_KEY]]


@pytest.mark.parametrize("case", ["untagged", "missing", "empty"])
def test_bad_input_is_one_line_exit_two_and_writes_nothing(tmp_path, capsys, case):
    source = tmp_path / "model.onnx"
    if case == "untagged":
        onnx.save(checks.strip_tags(onnx.load(export_tagged("containers", source))), source)
    elif case == "empty":
        source.write_bytes(b"")
    out = tmp_path / "out.onnx"
    status = explorer.main([str(source), "-o", str(out)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"hiertag explorer: {source}: ")
    assert not out.exists() and not list(tmp_path.glob(".*partial"))
