"""The library's import graph has no cycle, and the storage formats are declared in one module.

The oracle is the source itself: every module under jaxref/, costmodel/, device/ and experiments/ is
parsed (``ast``, nothing imported), each ``import`` / ``from ... import`` (at any depth, except under
``if TYPE_CHECKING:``) is an edge to the module it names (``from pkg import sub`` to ``pkg.sub`` when
that is a module), and a depth-first search looks for a back edge.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("jaxref", "costmodel", "device", "experiments")


def module_files() -> dict[str, pathlib.Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def import_graph(files: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_checking_nodes(tree)
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    edges.add(sub if sub in files else base)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative DFS, colours white / grey / black)."""
    colour = dict.fromkeys(graph, 0)
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[child] == 1:
                return path[path.index(child):] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_find_cycle_finds_a_planted_cycle():
    # the checker itself: a 3-cycle behind an acyclic prefix is found, a DAG is not
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}}) == ["b", "c", "d", "b"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_sees_known_edges():
    g = import_graph(module_files())
    assert "jaxref.vocabulary" in g["jaxref.validation"] or "jaxref.vocabulary" in g["costmodel.hardware"]
    assert "costmodel.blackhole.program_config" in g["costmodel.blackhole.port"]
    assert "costmodel.tuning" in g["costmodel.blackhole.knob_search"] or any("costmodel.tuning" in v for v in g.values())


def test_no_import_cycle():
    cycle = find_cycle(import_graph(module_files()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_vocabulary_is_the_bottom_of_the_tree():
    g = import_graph(module_files())
    assert g["jaxref.vocabulary"] == set()
    for name, deps in g.items():  # the golden never imports the cost model or the device graph
        if name.startswith("jaxref"):
            assert not {d for d in deps if d.split(".")[0] in ("costmodel", "device", "experiments")}, name


FORMAT = r"""["'](?:fp32|bf16|bfp8|bfp4)["']"""
# a tuple / list / set of two or more format strings: a second declaration of a format set
FORMAT_SET = re.compile(rf"[(\[{{]\s*{FORMAT}\s*,\s*{FORMAT}")


@pytest.mark.parametrize("pkg", ["costmodel", "device"])
def test_storage_formats_declared_once(pkg):
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in sorted((ROOT / pkg).rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if FORMAT_SET.search(line)]
    assert not hits, "format sets outside jaxref/vocabulary.py:\n" + "\n".join(hits)


def test_format_set_pattern_matches_a_declaration():
    assert FORMAT_SET.search('KV_DTYPES = ("bf16", "bfp8", "bfp4")')
    assert FORMAT_SET.search("choices=['bfp8', 'bf16']")
    assert not FORMAT_SET.search('weights: str = "bfp8"')
