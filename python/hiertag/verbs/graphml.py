"""hiertag graphml: the tagged graph as hierarchical GraphML (one nested graph per module).

Every module of the table that holds a node (its own or a descendant's)
becomes a group node with a nested <graph> (yEd: yfiles.foldertype="group",
with a y:ProxyAutoBoundsNode so yEd draws it as an open group that folds);
modules are nested as their tags are. Every ONNX node, nodes of If/Loop
bodies included, is a leaf inside the group of its tag; the graph's inputs
and outputs are leaves at the top level. An edge runs from the node making a
value to each node reading it (graph inputs and outputs included), one per
value and reader, and lies in the innermost group holding both ends, as yEd
writes them. Initializers are weights, not nodes: they make no edges.

Data keys, for any GraphML reader (networkx.read_graphml reads the nested
graphs flattened into one graph): nodes have kind (module, node, input,
output), name (the tag's last segment, the ONNX node's or value's name) and
tag; modules also class and path; ONNX nodes also op_type, and shared_with
when a node is kept for several module calls; edges have value.

Written beside OUT and renamed; prints `OUT: G groups, N nodes, E edges`
(--json: one object)."""

import json
import sys
import xml.etree.ElementTree as ElementTree

from hiertag import checks, core
from hiertag.verbs import Verb, load_tagged, refuse_overwriting, write_atomically

GRAPHML_NS = "http://graphml.graphdrawing.org/xmlns"
YFILES_NS = "http://www.yworks.com/xml/graphml"
SCHEMA = "http://graphml.graphdrawing.org/xmlns http://www.yworks.com/xml/schema/graphml/1.1/ygraphml.xsd"

# (id, for, attr.name): the plain data keys.
DATA_KEYS = [("kind", "node"), ("name", "node"), ("tag", "node"), ("class", "node"), ("path", "node"),
             ("op_type", "node"), ("shared_with", "node"), ("value", "edge")]


def g(name):
    return f"{{{GRAPHML_NS}}}{name}"


def y(name):
    return f"{{{YFILES_NS}}}{name}"


class GraphmlWriter:
    """Builds the GraphML tree of one tagged model."""

    def __init__(self, model, table):
        self.model = model
        self.table = table
        self.root = ElementTree.Element(g("graphml"))
        self.root.set("{http://www.w3.org/2001/XMLSchema-instance}schemaLocation", SCHEMA)
        for key, domain in DATA_KEYS:
            ElementTree.SubElement(self.root, g("key"), {"id": key, "for": domain, "attr.name": key,
                                                         "attr.type": "string"})
        ElementTree.SubElement(self.root, g("key"), {"id": "graphics", "for": "node", "yfiles.type": "nodegraphics"})
        ElementTree.SubElement(self.root, g("key"), {"id": "edgegraphics", "for": "edge",
                                                     "yfiles.type": "edgegraphics"})
        self.top = ElementTree.SubElement(self.root, g("graph"), {"id": "G", "edgedefault": "directed"})
        self.groups = {}      # tag -> (group id, its nested <graph>)
        self.container = {}   # element id -> tag of the group holding it ("" at the top level)
        self.counts = {"groups": 0, "nodes": 0, "edges": 0}

    def build(self):
        nodes = list(checks.walk_nodes(self.model.graph))
        used = set()
        for node in nodes:
            for tag, _ in checks.node_refs(node)[:1]:
                used.update(ancestor for ancestor in _ancestors(tag) if ancestor in self.table)
        # Parents first (the table's order need not put them first), then as the table lists them.
        position = {tag: index for index, tag in enumerate(self.table)}
        for tag in sorted(used, key=lambda t: (t.count("/"), position[t])):
            self._group(tag)
        producers = {}
        initializers = {i.name for i in self.model.graph.initializer}
        for index, graph_input in enumerate(i for i in self.model.graph.input if i.name not in initializers):
            producers[graph_input.name] = self._leaf(f"i{index}", "", "input", graph_input.name, "Input")
        node_ids = []
        for index, node in enumerate(nodes):
            refs = checks.node_refs(node)
            tag = refs[0][0] if refs and refs[0][0] in self.groups else ""
            props = checks.node_props(node)
            extra = {"op_type": node.op_type}
            if core.SHARED_KEY in props:
                extra["shared_with"] = props[core.SHARED_KEY]
            node_id = self._leaf(f"n{index}", tag, "node", node.name, node.op_type, extra, tag)
            node_ids.append(node_id)
            for output in node.output:
                if output:
                    producers.setdefault(output, node_id)
        # Direct inputs only: a body's nodes are leaves too and draw their own edges.
        for node, node_id in zip(nodes, node_ids, strict=True):
            for name in dict.fromkeys(name for name in node.input if name):
                if name in producers:
                    self._edge(producers[name], node_id, name)
        for index, graph_output in enumerate(self.model.graph.output):
            output_id = self._leaf(f"o{index}", "", "output", graph_output.name, "Output")
            if graph_output.name in producers:
                self._edge(producers[graph_output.name], output_id, graph_output.name)
        return self.root

    def _group(self, tag):
        entry = self.table[tag]
        parent = checks.parent_tag(tag)
        holder = self.groups[parent][1] if parent in self.groups else self.top
        group_id = f"m{len(self.groups)}"
        element = ElementTree.SubElement(holder, g("node"), {"id": group_id, "yfiles.foldertype": "group"})
        segment = tag.rsplit("/", 1)[-1]
        self._data(element, {"kind": "module", "name": segment, "tag": tag, "class": entry.get("class", ""),
                             "path": entry.get("path", "")})
        graphics = ElementTree.SubElement(ElementTree.SubElement(element, g("data"), {"key": "graphics"}),
                                          y("ProxyAutoBoundsNode"))
        realizers = ElementTree.SubElement(graphics, y("Realizers"), {"active": "0"})
        for closed in ("false", "true"):
            group = ElementTree.SubElement(realizers, y("GroupNode"))
            label = ElementTree.SubElement(group, y("NodeLabel"), {"modelName": "internal", "modelPosition": "t"})
            label.text = segment
            ElementTree.SubElement(group, y("State"), {"closed": closed})
        nested = ElementTree.SubElement(element, g("graph"), {"id": f"{group_id}:", "edgedefault": "directed"})
        self.groups[tag] = (group_id, nested)
        self.container[group_id] = parent if parent in self.groups else ""
        self.counts["groups"] += 1

    def _leaf(self, leaf_id, tag, kind, name, label, extra=None, node_tag=None):
        holder = self.groups[tag][1] if tag else self.top
        element = ElementTree.SubElement(holder, g("node"), {"id": leaf_id})
        self._data(element, {"kind": kind, "name": name, **({"tag": node_tag} if node_tag else {}), **(extra or {})})
        shape = ElementTree.SubElement(ElementTree.SubElement(element, g("data"), {"key": "graphics"}),
                                       y("ShapeNode"))
        ElementTree.SubElement(shape, y("NodeLabel")).text = label
        self.container[leaf_id] = tag
        if kind == "node":
            self.counts["nodes"] += 1
        return leaf_id

    def _edge(self, source, target, value):
        holder_tag = _common_ancestor(self.container[source], self.container[target])
        holder = self.groups[holder_tag][1] if holder_tag else self.top
        element = ElementTree.SubElement(holder, g("edge"), {"id": f"e{self.counts['edges']}", "source": source,
                                                             "target": target})
        self._data(element, {"value": value})
        line = ElementTree.SubElement(ElementTree.SubElement(element, g("data"), {"key": "edgegraphics"}),
                                      y("PolyLineEdge"))
        ElementTree.SubElement(line, y("Arrows"), {"source": "none", "target": "standard"})
        self.counts["edges"] += 1

    @staticmethod
    def _data(element, values):
        for key, value in values.items():
            ElementTree.SubElement(element, g("data"), {"key": key}).text = value


def _ancestors(tag):
    while tag:
        yield tag
        tag = checks.parent_tag(tag)


def _common_ancestor(a, b):
    """The innermost group holding both (tags of groups; "" is the top level)."""
    while a and not checks.is_within(b, a):
        a = checks.parent_tag(a)
    return a


def to_graphml(model, table):
    """(GraphML text, {"groups", "nodes", "edges"})."""
    ElementTree.register_namespace("", GRAPHML_NS)
    ElementTree.register_namespace("y", YFILES_NS)
    ElementTree.register_namespace("xsi", "http://www.w3.org/2001/XMLSchema-instance")
    writer = GraphmlWriter(model, table)
    root = writer.build()
    ElementTree.indent(root)
    text = ElementTree.tostring(root, encoding="unicode", xml_declaration=False)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + text + "\n", writer.counts


def run(options):
    refuse_overwriting([options.output], models=[options.model])
    model, table = load_tagged(options.model)
    text, counts = to_graphml(model, table)

    def write(staged):
        with open(staged, "w", encoding="utf-8") as stream:
            stream.write(text)

    write_atomically(options.output, write)
    if options.json:
        print(json.dumps({"output": options.output, **counts}))
    else:
        print(f"{options.output}: {counts['groups']} groups, {counts['nodes']} nodes, {counts['edges']} edges")
    return 0


def arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="a file tagged by hiertag")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.graphml", help="the GraphML file to write")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


VERB = Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
