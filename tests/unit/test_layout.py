"""The tree as written down: docs/design.md's Layout names every module and package, each package
described as its own docstring says, and its map names only modules, classes and functions the
code has; comments cite only files the repository has; and the package installs as `ddptui.*`
alone."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tokenize
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = ("remote", "tui")
# A path a comment or docstring names: remote/agents/fleet.py, tests/data/kernel-log
CITED = re.compile(r"(?<![\w./%-])((?:remote|tui|tests|scripts|docs|examples)/[\w./-]*[\w/])")
CODE = [p for d in (*PACKAGES, "tests", "scripts") for p in (ROOT / d).rglob("*.py")]


def layout() -> list[tuple[int, str, str]]:
    """(indent, name, description) per entry of the Layout block: `name/` or `name.py`."""
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("```", 2)[1]
    entries: list[tuple[int, str, str]] = []
    for line in block.splitlines():
        m = re.match(r"^( *)(\S+?(?:/|\.py))(?: +(.*))?$", line)
        if m:
            entries.append((len(m[1]), m[2], m[3] or ""))
        elif entries and line.strip():
            indent, name, desc = entries[-1]
            entries[-1] = (indent, name, f"{desc} {line.strip()}")
    return entries


def tree() -> dict[str, str]:
    """Every entry the layout must hold, by path (`remote/agents/`, `remote/agents/fleet.py`):
    a package maps to its docstring's first paragraph."""
    found: dict[str, str] = {}
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            pkg = init.parent
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            found[f"{pkg.relative_to(ROOT)}/"] = " ".join(doc.split("\n\n")[0].split())
            for mod in sorted(pkg.glob("*.py")):
                if mod.name != "__init__.py":
                    found[str(mod.relative_to(ROOT))] = ""
    return found


def layout_paths() -> dict[str, str]:
    """The layout's entries as full paths (an entry is inside the last package above it)."""
    paths: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for indent, name, desc in layout():
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + name
        paths[path] = " ".join(desc.split())
        if name.endswith("/"):
            stack.append((indent, path))
    return paths


def test_the_layout_names_every_module_and_no_other() -> None:
    written = {p for p in layout_paths() if p.startswith(tuple(f"{t}/" for t in PACKAGES))}
    missing = sorted(set(tree()) - written)
    gone = sorted(written - set(tree()))
    assert not missing, f"docs/design.md's Layout lacks {missing}"
    assert not gone, f"docs/design.md's Layout names what is not there: {gone}"


def test_each_package_is_described_as_its_docstring_says() -> None:
    written = layout_paths()
    for path, doc in tree().items():
        if path.endswith("/"):
            assert doc, f"{path}__init__.py has no docstring"
            assert written[path] == doc, (
                f"{path}: the Layout says {written[path]!r}, the docstring {doc!r}"
            )


# A name of the code in docs/design.md's map: `remote/host/daemon.py:Daemon.stop`, or a module
NAMED = re.compile(r"(?<![\w/])((?:remote|tui)/[\w/]+\.py)(?::([A-Za-z_]\w*(?:\.\w+)?))?")
FUNCTION = ast.FunctionDef | ast.AsyncFunctionDef


def test_the_map_names_only_what_the_code_has() -> None:
    """docs/design.md's map (processes, a line's path, a stop's, who owns what) names modules
    and their classes, functions and methods: each must be there, or the map has gone stale."""
    text = (ROOT / "docs" / "design.md").read_text().split("\n# The map\n", 1)[1]
    named = NAMED.findall(text)
    assert len(named) > 40, "the map names the code it describes"
    stale: list[str] = []
    modules: dict[str, dict[str, ast.stmt]] = {}  # path → its classes and functions, by name
    for path, name in named:
        if not (ROOT / path).is_file():
            stale.append(path)
            continue
        if not name:
            continue
        if path not in modules:
            body = ast.parse((ROOT / path).read_text()).body
            modules[path] = {n.name: n for n in body if isinstance(n, ast.ClassDef | FUNCTION)}
        defs = modules[path]
        head, _, attr = name.partition(".")
        found = defs.get(head)
        if attr:  # a method of that class
            members = found.body if isinstance(found, ast.ClassDef) else []
            found = next((m for m in members if isinstance(m, FUNCTION) and m.name == attr), None)
        if found is None:
            stale.append(f"{path}:{name}")
    assert not stale, f"docs/design.md's map names what is not there: {stale}"


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every comment and docstring-like (triple-quoted) string."""
    found = []
    with path.open() as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type == tokenize.COMMENT or (
                tok.type == tokenize.STRING
                and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
            ):
                found += [(tok.start[0] + i, t) for i, t in enumerate(tok.string.splitlines())]
    return found


def test_comments_cite_only_files_the_repository_has() -> None:
    broken = []
    for p in CODE:
        for n, line in prose(p):
            for m in CITED.finditer(line):
                cited = m[1].rstrip(".")
                if not (ROOT / cited).exists():
                    broken.append(f"{p.relative_to(ROOT)}:{n}: {cited}")
            if re.search(r"design(\.md)? ?§|\.\./shared", line):
                broken.append(f"{p.relative_to(ROOT)}:{n}: cites a document not in the repository")
    assert not broken, "\n".join(broken)


@pytest.mark.timeout(600)
def test_it_installs_as_ddptui_alone(tmp_path: Path) -> None:
    """`pip install .` puts `ddptui/` in site-packages, no generic `remote` or `tui`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    [wheel] = tmp_path.glob("ddptui-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {
        "ddptui",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    names = zipfile.ZipFile(wheel).namelist()
    for must in ("ddptui/remote/host/daemon.py", "ddptui/remote/inventory.schema.json",
                 "ddptui/tui/dashboard/app.tcss", "ddptui/remote/run/runner.py"):  # fmt: skip
        assert must in names


def imported(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ours `name` imports anywhere: at the top, in a function, under
    TYPE_CHECKING (each an edge of a cycle a reader must follow all the same)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)]
            mod = ".".join([*base, node.module] if node.module else base)
            mod = mod if node.level else node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    ours = set()
    for mod in found:
        while mod and mod not in modules:
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            ours.add(mod)
    return ours


def test_no_import_cycle_of_any_kind() -> None:
    paths = {}
    for top in PACKAGES:
        for p in (ROOT / top).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            paths[".".join(("ddptui", *parts[: -1 if parts[-1] == "__init__" else None]))] = p
    graph = {name: imported(p, name, set(paths)) for name, p in paths.items()}
    cycles = []
    for start in graph:  # a path from a module's imports back to itself
        seen, todo = {start: [start]}, [start]
        while todo:
            here = todo.pop()
            for nxt in sorted(graph[here]):
                if nxt == start:
                    cycles.append(" -> ".join([*seen[here], start]))
                    todo = []
                    break
                if nxt not in seen:
                    seen[nxt] = [*seen[here], nxt]
                    todo.append(nxt)
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


# The host side runs on the hosts' own python3: the standard library alone, and torch only in
# the modules the job's interpreter runs for the checks (an allowlist: a new dependency fails).
TORCH_ON_THE_JOBS_PYTHON = {"fabric.py", "probe.py"}


def test_the_host_side_imports_only_the_standard_library() -> None:
    outside = []
    for p in sorted((ROOT / "remote" / "host").glob("*.py")):
        allowed = set(sys.stdlib_module_names) | (
            {"torch"} if p.name in TORCH_ON_THE_JOBS_PYTHON else set()
        )
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            outside += [f"{p.name}: {n}" for n in names if n.split(".")[0] not in allowed]
    assert not outside, f"the host side imports beyond the standard library: {outside}"


MAX_LINES, MAX_METHODS, MAX_FIELDS = 700, 45, 20


def test_no_room_too_big() -> None:
    """No module over 700 lines, no class over 45 methods, no mutable dataclass over 20 fields."""
    big = []
    for p in sorted(p for top in PACKAGES for p in (ROOT / top).rglob("*.py")):
        text, where = p.read_text(), str(p.relative_to(ROOT))
        if len(text.splitlines()) > MAX_LINES:
            big.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if methods > MAX_METHODS:
                big.append(f"{where}:{node.name}: {methods} methods")
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any("dataclass" in d and "frozen=True" not in d for d in decorators):
                fields = sum(
                    isinstance(b, ast.AnnAssign) and "ClassVar" not in ast.unparse(b.annotation)
                    for b in node.body
                )
                if fields > MAX_FIELDS:
                    big.append(f"{where}:{node.name}: {fields} fields")
    assert not big, f"over the bar: {big}"
