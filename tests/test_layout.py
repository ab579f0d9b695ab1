"""The package's plan, checked from its own imports: a folder per part, each part importing only the parts
below it, no import circles (also not hidden inside functions), and no module or function too long to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "haggler"
# Lowest first: a module may import its own part and the parts before it in this list.
PARTS = ["core", "scenarios", "engine", "agents", "evaluation", "training", "study", "cli", "testing"]
# Declarative tables may run long: the argument parser is one.
LONG_FUNCTIONS_ALLOWED = {("cli.py", "build_parser")}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str | None:
    pieces = module.split(".")
    if len(pieces) < 2:
        return None  # the root package (its version) belongs to every part
    return pieces[1].removesuffix(".py")


def imports_of(path: Path) -> set[str]:
    """Every haggler module this file imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("haggler"):
            for alias in node.names:  # "from haggler.x import y" may name a module y
                candidate = f"{node.module}.{alias.name}"
                out.add(candidate if candidate in MODULES else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("haggler")}
    return out


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}
GRAPH = {m: {i for i in imports_of(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def test_every_module_sits_in_a_known_part():
    stray = [m for m in MODULES if m != "haggler" and part_of(m) not in PARTS]
    assert not stray, f"modules outside the planned parts {PARTS}: {stray}"


def test_parts_import_only_parts_below_them():
    wrong = []
    for module, targets in GRAPH.items():
        here = part_of(module)
        for target in targets:
            there = part_of(target)
            if here is None or there is None:
                continue
            if PARTS.index(there) > PARTS.index(here):
                wrong.append(f"{module} ({here}) imports {target} ({there})")
    assert not wrong, "imports that go up the layers:\n" + "\n".join(sorted(wrong))


def test_no_import_circles():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for n in sorted(GRAPH[m]):
            if seen.get(n) == 1:
                circles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in seen:
                visit(n, path + [n])
        seen[m] = 2

    for m in sorted(MODULES):
        if m not in seen:
            visit(m, [m])
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_layout_check_sees_a_planted_upward_import(tmp_path):
    """The check itself: an engine module importing the evaluation part is caught."""
    fake = tmp_path / "haggler" / "engine" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from haggler.evaluation.runner import run\n")
    assert "haggler.evaluation.runner" in imports_of(fake)
    assert PARTS.index(part_of("haggler.evaluation.runner")) > PARTS.index(part_of("haggler.engine.bad"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_readable(path):
    lines = path.read_text().count("\n")
    assert lines <= 420, f"{path.relative_to(ROOT)}: {lines} lines (split it)"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if (path.name, node.name) not in LONG_FUNCTIONS_ALLOWED:
                assert length <= 65, f"{path.relative_to(ROOT)}: {node.name} is {length} lines"
