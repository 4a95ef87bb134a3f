"""End-to-end: `hiertag graphml` on real exports, read back with networkx and
as XML: one nested graph per module, every ONNX node inside its module's."""

import json
import xml.etree.ElementTree as ElementTree

import networkx
import onnx
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core
from hiertag.verbs import graphml
from tests.e2e.exportable import zoo_model

NS = {"g": graphml.GRAPHML_NS, "y": graphml.YFILES_NS}


def export_tagged(name, path):
    model, args = zoo_model(name)
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    return path


@pytest.fixture(scope="module", params=["bert", "scripted_loop"])
def written(request, tmp_path_factory):
    """(model, GraphML path) of a tagged export; scripted_loop has Loop bodies."""
    directory = tmp_path_factory.mktemp("graphml")
    source = export_tagged(request.param, directory / "model.onnx")
    out = directory / "model.graphml"
    assert graphml.main([str(source), "-o", str(out)]) == 0
    return onnx.load(source), out


def expected_edges(model):
    """(producer, reader, value) triples: node outputs and graph inputs to the nodes reading them
    (nested graphs included), and to the graph outputs."""
    nodes = list(checks.walk_nodes(model.graph))
    initializers = {i.name for i in model.graph.initializer}
    makers = {i.name: ("input", i.name) for i in model.graph.input if i.name not in initializers}
    for node in nodes:
        makers.update({name: ("node", node.name) for name in node.output if name and name not in makers})
    edges = {(makers[name], ("node", node.name), name) for node in nodes for name in node.input if name in makers}
    edges |= {(makers[o.name], ("output", o.name), o.name) for o in model.graph.output if o.name in makers}
    return edges


def test_networkx_reads_every_node_and_value_edge(written):
    model, out = written
    graph = networkx.read_graphml(out)
    nodes = list(checks.walk_nodes(model.graph))
    modules = {tag for node in nodes for tag in [checks.node_props(node)[core.TAG_KEY]]}
    groups = {ancestor for tag in modules for ancestor in _ancestors(tag)}
    kinds = [data["kind"] for _, data in graph.nodes(data=True)]
    assert kinds.count("node") == len(nodes)
    assert kinds.count("module") == len(groups)
    initializers = {i.name for i in model.graph.initializer}
    assert kinds.count("input") == len([i for i in model.graph.input if i.name not in initializers])
    assert kinds.count("output") == len(model.graph.output)
    names = {key: (data["kind"], data["name"]) for key, data in graph.nodes(data=True)}
    found = {(names[source], names[target], data["value"]) for source, target, data in graph.edges(data=True)}
    assert len(list(graph.edges())) == len(expected_edges(model)) == len(found)
    assert found == expected_edges(model)
    ops = {data["name"]: data["op_type"] for _, data in graph.nodes(data=True) if data["kind"] == "node"}
    assert ops == {node.name: node.op_type for node in nodes}


def _ancestors(tag):
    while tag:
        yield tag
        tag = checks.parent_tag(tag)


def test_each_node_lies_in_its_modules_nested_graph(written):
    model, out = written
    tags = {node.name: checks.node_props(node)[core.TAG_KEY] for node in checks.walk_nodes(model.graph)}
    root = ElementTree.parse(out).getroot()
    placed = 0

    def visit(element, group_tag):
        nonlocal placed
        for child in element.findall("g:node", NS):
            data = {d.get("key"): d.text or "" for d in child.findall("g:data", NS)}
            if child.get("yfiles.foldertype") == "group":
                assert data["kind"] == "module"
                assert checks.parent_tag(data["tag"]) == group_tag
                nested = child.find("g:graph", NS)
                assert nested is not None and child.find("g:data/y:ProxyAutoBoundsNode", NS) is not None
                visit(nested, data["tag"])
            elif data["kind"] == "node":
                assert tags[data["name"]] == group_tag == data["tag"]
                placed += 1
            else:
                assert group_tag == ""  # graph inputs and outputs at the top

    visit(root.find("g:graph", NS), "")
    assert placed == len(tags)


def test_edges_lie_in_the_innermost_group_holding_both_ends(written):
    _, out = written
    root = ElementTree.parse(out).getroot()
    holder = {}  # element id -> tag of the group it lies in
    edges = []   # (tag of the group an edge lies in, (its source's group, its target's group))

    def visit(element, group_tag):
        for child in element.findall("g:node", NS):
            holder[child.get("id")] = group_tag
            nested = child.find("g:graph", NS)
            if nested is not None:
                tag = next(d.text for d in child.findall("g:data", NS) if d.get("key") == "tag")
                visit(nested, tag)
        for edge in element.findall("g:edge", NS):
            ends = [holder.get(edge.get("source")), holder.get(edge.get("target"))]
            edges.append((group_tag, ends))

    visit(root.find("g:graph", NS), "")
    assert edges
    for group_tag, (source, target) in edges:
        assert graphml._common_ancestor(source, target) == group_tag


def test_json_summary_and_counts(tmp_path, capsys):
    source = export_tagged("bert", tmp_path / "bert.onnx")
    assert graphml.main([str(source), "-o", str(tmp_path / "bert.graphml"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    model = onnx.load(source)
    assert summary["nodes"] == len(model.graph.node) and summary["edges"] == len(expected_edges(model))
    assert summary["groups"] == len(checks.module_table(model))  # every BERT module holds a node


@pytest.mark.parametrize("case", ["untagged", "truncated", "output directory missing", "output is a directory"])
def test_bad_input_is_one_line_exit_two_and_leaves_nothing(tmp_path, capsys, case):
    source = export_tagged("containers", tmp_path / "model.onnx")
    out = tmp_path / "out.graphml"
    if case == "untagged":
        onnx.save(checks.strip_tags(onnx.load(source)), source)
    elif case == "truncated":
        source.write_bytes(source.read_bytes()[:200])
    elif case == "output directory missing":
        out = tmp_path / "no" / "out.graphml"
    else:
        out.mkdir()
    status = graphml.main([str(source), "-o", str(out)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("hiertag graphml: ")
    assert not out.is_file() and not list(tmp_path.glob(".*partial"))
