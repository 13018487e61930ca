"""The component map of docs/architecture.md ("Components and which may import which"),
enforced.

Every ``stackbench.*`` import in the source tree, at module level or inside a function, is
checked against ALLOWED; a new edge fails here until the map (and docs/architecture.md) says
it may. The checker reads the sources with ``ast`` so it needs no import-time side effects,
and the last test shows it failing on a deliberately wrong import.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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
CORE = {
    "errors",
    "config",
    "proc",
    "supervision",
    "schema",
    "httpclient",
    "gitcmd",
    "__version__",
    "__init__",
}

ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "resultsdb": {"core"},
    "patches": {"core", "resultsdb"},
    "kernels": {"core", "resultsdb"},
    "services": {"core", "resultsdb"},
    "mail": {"core", "resultsdb", "patches"},
    "jobs": {"core", "resultsdb", "patches", "kernels", "mail", "services", "client"},
    "web": {"core", "resultsdb", "patches", "kernels", "mail", "jobs", "services"},
    # the HTTP client of the CLI and the workers speaks the wire format, never imports web
    "client": {"core", "resultsdb"},
    "cli": {"core", "resultsdb", "patches", "kernels", "mail", "jobs", "web", "services", "client"},
}


# jobs/ in rooms (docs/architecture.md, "Rooms of jobs/ and which may import which"): a room
# may import itself and the rooms named here, lower ones; no module lives outside a room
ROOMS: dict[str, set[str]] = {
    "benchmarks": set(),
    "executors": {"benchmarks"},
    "driver": {"benchmarks", "executors"},
    "tracking": {"benchmarks", "executors", "driver"},
    "lists": {"benchmarks", "executors", "driver"},
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


def hidden_imports(root: Path) -> list[str]:
    """Every call of importlib.import_module or __import__ under the component folders: an
    import the map cannot see."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    name = ast.unparse(node.func)
                    if name.endswith("import_module") or name == "__import__":
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


def test_no_component_is_loaded_by_name():
    assert hidden_imports(ROOT) == []


def test_a_load_by_name_is_found(tmp_path):
    (tmp_path / "stackbench" / "cli").mkdir(parents=True)
    (tmp_path / "stackbench" / "cli" / "__init__.py").write_text(
        "import importlib\nmod = importlib.import_module('stackbench.cli.demo')\n"
    )
    assert hidden_imports(tmp_path) == ["stackbench/cli/__init__.py:2: importlib.import_module"]


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


def _room(module: str) -> str | None:
    """The room of dotted MODULE (``stackbench.jobs.<room>...``), None outside jobs' rooms."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["stackbench", "jobs"] and len(parts) > 2 else None


def room_violations(root: Path) -> list[str]:
    """Every module of jobs/ outside a room, and every import across rooms ROOMS forbids."""
    bad = []
    jobs = root / "jobs"
    for path in sorted(jobs.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root)
        parts = path.relative_to(jobs).parts
        if len(parts) == 1:
            if parts[0] != "__init__.py":
                bad.append(f"{rel}: a module outside the rooms")
            continue
        src = parts[0]
        if src not in ROOMS:
            bad.append(f"{rel}: {src} is no room of the map")
            continue
        for line, mod in _imports(ast.parse(path.read_text(), str(path))):
            dst = _room(mod)
            if dst is None or dst == src:
                continue
            if dst not in ROOMS:
                bad.append(f"{rel}:{line}: {mod} is in no room")
            elif dst not in ROOMS[src]:
                bad.append(f"{rel}:{line}: room {src} may not import {mod}")
    return bad


def test_jobs_follows_the_rooms_map():
    assert room_violations(ROOT) == []


def test_every_room_folder_is_mapped():
    folders = {
        d.name
        for d in (ROOT / "jobs").iterdir()
        if d.is_dir() and d.name.isidentifier() and d.name != "__pycache__"
    }
    assert folders == set(ROOMS)


def test_a_wrong_room_import_fails_the_map(tmp_path):
    for room in ("benchmarks", "executors", "driver"):
        (tmp_path / "jobs" / room).mkdir(parents=True)
    (tmp_path / "jobs" / "__init__.py").write_text('"""jobs"""\n')
    (tmp_path / "jobs" / "benchmarks" / "collect.py").write_text(
        "def f():\n    from stackbench.jobs.driver import pipeline\n"
    )
    (tmp_path / "jobs" / "executors" / "boot.py").write_text(
        "from stackbench.jobs.benchmarks import knobs\nfrom stackbench.jobs import driver\n"
    )
    (tmp_path / "jobs" / "driver" / "ok.py").write_text(
        "from stackbench.jobs.executors import plan\nimport stackbench.jobs.driver.ok\n"
    )
    (tmp_path / "jobs" / "driver" / "old.py").write_text("from stackbench.jobs.rounds import x\n")
    (tmp_path / "jobs" / "stray.py").write_text("")
    assert room_violations(tmp_path) == [
        "jobs/benchmarks/collect.py:2: room benchmarks may not import stackbench.jobs.driver.pipeline",
        "jobs/driver/old.py:1: stackbench.jobs.rounds.x is in no room",
        "jobs/executors/boot.py:2: room executors may not import stackbench.jobs.driver",
        "jobs/stray.py: a module outside the rooms",
    ]


# the imports that still close a circle inside a room, as (file, module imported): each
# entry goes when its circle is cut (a test below fails while an entry closes no circle)
KNOWN_CIRCLES: set[tuple[str, str]] = set()


def _module(jobs: Path, path: Path) -> str:
    parts = ["stackbench", "jobs", *path.relative_to(jobs).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_circles(root: Path, known: Collection[tuple[str, str]] = ()) -> list[str]:
    """An import circle inside each room of jobs/ that has one, as the modules it goes
    through (each imports the next). Imports count at module level or inside a function, as the map counts them: a
    function-local import hides a circle from Python, not from the reader. The imports in
    KNOWN, (file, module), are left out."""
    jobs = root / "jobs"
    modules = {
        _module(jobs, path): path
        for path in sorted(jobs.rglob("*.py"))
        if "__pycache__" not in path.parts and len(path.relative_to(jobs).parts) > 1
    }
    graphs: dict[str, dict[str, set[str]]] = {}
    for name, path in modules.items():
        room = _room(name)
        rel = str(path.relative_to(root))
        deps = graphs.setdefault(room, {}).setdefault(name, set())
        for _, mod in _imports(ast.parse(path.read_text(), str(path))):
            # "from stackbench.jobs.x.y import f" imports the module stackbench.jobs.x.y
            while mod and mod not in modules:
                mod = mod.rpartition(".")[0]
            if mod and mod != name and _room(mod) == room and (rel, mod) not in known:
                deps.add(mod)
    bad = []
    for room, graph in sorted(graphs.items()):
        try:
            graphlib.TopologicalSorter(graph).prepare()
        except graphlib.CycleError as err:
            prefix = f"stackbench.jobs.{room}."
            # graphlib lists each module before the ones that import it
            circle = " -> ".join(m.removeprefix(prefix) for m in reversed(err.args[1]))
            bad.append(f"room {room}: {circle}")
    return bad


def test_no_import_circle_inside_a_room():
    assert room_circles(ROOT, KNOWN_CIRCLES) == []


def test_every_known_circle_is_still_a_circle():
    for entry in KNOWN_CIRCLES:
        assert room_circles(ROOT, KNOWN_CIRCLES - {entry}), f"{entry} closes no circle now"


def test_a_circle_inside_a_room_fails_the_map(tmp_path):
    for room in ("executors", "driver"):
        (tmp_path / "jobs" / room).mkdir(parents=True)
        (tmp_path / "jobs" / room / "__init__.py").write_text("")
    driver = tmp_path / "jobs" / "driver"
    (driver / "journey.py").write_text("from stackbench.jobs.driver.rounds import plan\n")
    (driver / "rounds.py").write_text(
        "def plan():\n    from stackbench.jobs.driver import lifecycle\n"
    )
    (driver / "lifecycle.py").write_text("import stackbench.jobs.driver.journey\n")
    # across rooms is the rooms map's business, and a circle only through KNOWN is left out
    (tmp_path / "jobs" / "executors" / "boot.py").write_text(
        "from stackbench.jobs.driver import journey\n"
    )
    assert room_circles(tmp_path) == ["room driver: journey -> rounds -> lifecycle -> journey"]
    assert (
        room_circles(tmp_path, {("jobs/driver/rounds.py", "stackbench.jobs.driver.lifecycle")})
        == []
    )


def _documented_rooms() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Rooms of jobs/ and which may import which", 1)[1]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("room", "---"):
            if out and not line.startswith("|"):
                break
            continue
        may = cells[2]
        room = cells[0].strip("`/ ")
        out[room] = set() if may == "nothing of jobs" else {m.strip() for m in may.split(",")}
    return out


def test_the_docs_state_the_same_rooms():
    assert _documented_rooms() == ROOMS


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
