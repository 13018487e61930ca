"""The component map of docs/architecture.md ("Components and which may import which"),
enforced.

Every ``stackbench.*`` import in the source tree, at module level or inside a function, is
checked against ALLOWED; a new edge fails here until the map (and docs/architecture.md) says
it may. The checker reads the sources with ``ast`` so it needs no import-time side effects,
and the last test shows it failing on a deliberately wrong import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# folder -> component name; stackbench/ holds several components of its own (see _component)
FOLDERS = {
    "results-db": "resultsdb",
    "patches": "patches",
    "kernels": "kernels",
    "mail": "mail",
    "jobs": "jobs",
    "web": "web",
    "stackbench": "stackbench",
}
# the shared modules of stackbench/ that every component may use; they import no component
CORE = {"errors", "config", "proc", "schema", "httpclient", "gitcmd", "__version__", "__init__"}

ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "resultsdb": {"core"},
    "patches": {"core", "resultsdb"},
    "kernels": {"core", "resultsdb"},
    "services": {"core", "resultsdb"},
    "mail": {"core", "resultsdb", "patches"},
    "jobs": {"core", "resultsdb", "patches", "kernels", "mail", "services"},
    "web": {"core", "resultsdb", "patches", "kernels", "mail", "jobs", "services"},
    # the HTTP client of the CLI and the workers speaks the wire format, never imports web
    "client": {"core", "resultsdb"},
    "cli": {"core", "resultsdb", "patches", "kernels", "mail", "jobs", "web", "services", "client"},
}


def _component(module: str) -> str | None:
    """The component of dotted MODULE (``stackbench.x.y``), None for non-stackbench ones."""
    parts = module.split(".")
    if parts[0] != "stackbench":
        return None
    if len(parts) == 1:
        return "core"
    head = parts[1]
    if head in FOLDERS.values() and head != "stackbench":
        return head
    if head in CORE:
        return "core"
    if head == "services":
        return "services"
    if head == "apiclient":
        return "client"
    # stackbench.cli, stackbench.__main__
    return "cli"


def _source_component(root: Path, path: Path) -> str:
    folder = path.relative_to(root).parts[0]
    name = FOLDERS[folder]
    if name != "stackbench":
        return name
    rel = path.relative_to(root / "stackbench").with_suffix("")
    return _component("stackbench." + ".".join(rel.parts)) or "cli"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # "from stackbench import web" imports the component named by the alias
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def violations(root: Path) -> list[str]:
    """Every import under ROOT's component folders that the map does not allow."""
    bad = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            src = _source_component(root, path)
            for line, mod in _imports(ast.parse(path.read_text(), str(path))):
                dst = _component(mod)
                if dst is None or dst == src or dst in ALLOWED[src]:
                    continue
                bad.append(f"{path.relative_to(root)}:{line}: {src} may not import {mod}")
    return bad


def test_the_tree_follows_the_component_map():
    assert violations(ROOT) == []


def test_every_component_folder_is_mapped():
    """A component added to setup.py must be placed on the map too."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    (node,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "COMPONENTS"
    ]
    assert set(ast.literal_eval(node.value).values()) == set(FOLDERS)


def test_a_wrong_import_fails_the_map(tmp_path):
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "results-db" / "ok.py").write_text("from stackbench import errors\n")
    (tmp_path / "kernels" / "build.py").write_text(
        "def f():\n    from stackbench.jobs.highalloc import build_module\n"
    )
    (tmp_path / "jobs" / "nightly.py").write_text("from stackbench.web import mailer\n")
    (tmp_path / "stackbench" / "apiclient.py").write_text("import stackbench.web.uploads\n")
    (tmp_path / "web" / "ok.py").write_text("from stackbench.jobs import lifecycle\n")
    assert violations(tmp_path) == [
        "kernels/build.py:2: kernels may not import stackbench.jobs.highalloc.build_module",
        "jobs/nightly.py:1: jobs may not import stackbench.web.mailer",
        "stackbench/apiclient.py:1: client may not import stackbench.web.uploads",
    ]


def _documented_map() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Components and which may import which", 1)[1]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("component", "---"):
            if out and not line.startswith("|"):
                break
            continue
        name = cells[0].split(":", 1)[0] if ":" in cells[0] else cells[0]
        name = name.strip("` ").removeprefix("stackbench.")
        may = cells[1].split("(", 1)[0].strip()
        if may == "nothing of stackbench":
            out[name] = set()
        elif may == "everything":
            out[name] = set(ALLOWED) - {name}
        else:
            out[name] = {m.strip() for m in may.split(",")}
    return out


def test_the_docs_state_the_same_map():
    assert _documented_map() == ALLOWED
