"""No module of the project imports itself back, directly or through others.

The import graph is grimp's (the graph import-linter checks its contracts on), built from
the source text: imports inside functions count as much as those at the top of a module,
since a lazy import only postpones the failure of a cycle to the call that runs it."""

from __future__ import annotations

import grimp

# The project's top-level folders of Python code (a folder without __init__.py is read
# as a namespace package, from the repository root pytest puts on sys.path).
ROOTS = ("sync", "backfill", "benchmarks", "migrations", "examples", "scripts", "tests")


def import_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle through each import that has a way back, as a module chain from
    the importer round to itself, each cycle once (from its smallest module name)."""
    cycles = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                ring = (importer, *back[:-1])
                start = ring.index(min(ring))
                cycles.add(ring[start:] + ring[:start])
    return sorted(cycle + cycle[:1] for cycle in cycles)


def test_no_module_of_the_project_is_part_of_an_import_cycle():
    graph = grimp.build_graph(*ROOTS, cache_dir=None)
    assert {"sync.cli.app", "backfill.job", "benchmarks.__main__", "migrations.env", "tests.helpers"} <= graph.modules
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (move what both sides need into a module of its own):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_a_cycle_closed_by_an_import_inside_a_function_is_found(tmp_path, monkeypatch):
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text("def run():\n    from cyclic.demo import show\n\n    show()\n")
    (package / "demo.py").write_text("from cyclic.report import table\n\n\ndef show():\n    table()\n")
    (package / "report.py").write_text("def table():\n    from cyclic.cli import run\n")
    (package / "apart.py").write_text("import cyclic.report\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert import_cycles(grimp.build_graph("cyclic", cache_dir=None)) == [
        ("cyclic.cli", "cyclic.demo", "cyclic.report", "cyclic.cli")
    ]
