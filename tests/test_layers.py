"""The import graph of src/rocketstore keeps the layers of docs/layers.md: every module is parsed
with ``ast`` and every import counts (module level, inside functions, under TYPE_CHECKING), so a
lazy import cannot hide a circle or a reach upwards. A failure names each cycle, or each
offending import as file:line."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.processes import child_env

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = SRC / "rocketstore"

# Packages (and top-level modules) from bottom to top; a layer may import the layers below it,
# never one above. Names on one line are side by side and import nothing of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_inflate", "_speedups", "_extras"),  # zlib with a size limit; whether the compiled twins
    # are used; what to install for an optional part
    ("store", "remoting"),  # "rocketstore" itself (the package's exports) counts as store
    ("protocol",),  # the wire types clients, brokers, the name server and the controller exchange
    ("columns",),  # messages as Arrow columns: the Spark source's and the tiered store's rows
    ("tier",),  # sealed messages as Parquet with manifests; below the broker, which reads it
    ("acl",),
    # the servers and the client meet only in protocol: a client loads no server, a broker not
    # the controller's server nor the name server
    ("namesrv", "controller", "broker", "client"),
    ("grpc",),
    ("_logs",),  # log files and the stats line, set up by the servers' commands
    ("metrics", "console"),  # Prometheus text and health endpoints; the web console (admin
    # requests through client/ only)
    ("server",),  # the composition root
    ("spark",),  # restricted further by SPARK_MAY_IMPORT
    ("bench",),
    ("cli",),  # the cli/ package
)
SPARK_MAY_IMPORT = frozenset(
    {"_inflate", "_extras", "store", "remoting", "columns", "tier", "acl", "client"}
)

# the store's rooms (store/<room>/), from bottom to top: the foundation modules at store/'s
# top level, then each room; the facade store/_store.py (and store/__init__.py) on top
STORE_ROOMS: tuple[str, ...] = (
    "foundation",
    "log",
    "queue",
    "read",
    "ha",
    "services",
    "recovery",
    "facade",
)

# the broker's rooms (broker/<room>/), from bottom to top: "foundation" is broker/_errors.py and
# broker/_config.py, "services" broker/_services.py, "facade" broker/_controller.py and the
# package itself; the processor rooms on one line are side by side and import nothing of each
# other
BROKER_ROOMS: tuple[tuple[str, ...], ...] = (
    ("foundation",),
    ("state",),
    ("services",),
    ("clients", "messaging", "admin", "replication"),
    ("facade",),
)
BROKER_TOP_LEVEL = {
    "rocketstore.broker": "facade",
    "rocketstore.broker._controller": "facade",
    "rocketstore.broker._services": "services",
    "rocketstore.broker._errors": "foundation",
    "rocketstore.broker._config": "foundation",
}

# Circles inside one package that are known and not yet taken apart (their modules import each
# other's names lazily or under TYPE_CHECKING). New circles fail; these may only go away.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset(
    {
        frozenset(
            {
                "rocketstore.remoting._command",
                "rocketstore.remoting._connection",
                "rocketstore.remoting._limits",
            }
        ),
    }
)


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module of rocketstore
    where: str  # file:line

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def _modules() -> dict[str, tuple[Path, list[str]]]:
    """Module name → (file, the package its relative imports start from)."""
    out: dict[str, tuple[Path, list[str]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = parts
        else:
            package = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


# the compiled twins (Cython sources beside the modules they accelerate): modules too, with no
# imports of the package's own
COMPILED = {".".join(path.relative_to(SRC).with_suffix("").parts) for path in ROOT.rglob("*.pyx")}


def _imports() -> tuple[dict[str, tuple[Path, list[str]]], list[Import]]:
    modules = _modules()
    found: list[Import] = []
    for name, (path, package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(SRC.parent)
        for node in ast.walk(tree):
            candidates: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    start = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    start = node.module or ""
                # "from pkg import mod" imports the module pkg.mod when there is one, else a
                # name of pkg itself
                subs = [f"{start}.{alias.name}" for alias in node.names]
                candidates = [m for m in subs if m in modules]
                if len(candidates) + sum(m in COMPILED for m in subs) < len(subs):
                    candidates.append(start)
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            for target in candidates:
                if target in modules and target != name:
                    found.append(Import(name, target, f"{where}:{node.lineno}"))
    return modules, found


MODULES, IMPORTS = _imports()


def _graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in imports:
        graph[imp.source].add(imp.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _shortest_loop(members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """One shortest circle through the first module of a component (breadth first)."""
    start = min(members)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ()) & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    return [start]


def _describe(cycle: list[str]) -> str:
    members = set(cycle)
    loop = _shortest_loop(members, _graph(IMPORTS))
    edges = [str(i) for i in IMPORTS if i.source in members and i.target in members]
    return (
        f"cycle of {len(cycle)} modules: {', '.join(cycle)}\n"
        f"  e.g. {' -> '.join(loop)}\n    " + "\n    ".join(edges)
    )


def package_of(module: str) -> str:
    """The layer name of a module: its package under rocketstore (a top-level module is a
    layer of its own)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "store"  # rocketstore/__init__.py: the store's public names
    return parts[1]


def _rank() -> dict[str, int]:
    return {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _cycles_within(prefixes: tuple[str, ...]) -> list[list[str]]:
    def inside(m: str) -> bool:
        return any(m == p or m.startswith(p + ".") for p in prefixes)

    return _cycles(_graph(i for i in IMPORTS if inside(i.source) and inside(i.target)))


def test_the_walk_sees_the_imports_it_must() -> None:
    """The walk finds lazy and TYPE_CHECKING imports and resolves relative ones."""
    assert "rocketstore.broker._controller" in MODULES
    pairs = {(i.source, i.target) for i in IMPORTS}
    # a function-level import in _controller.py
    assert ("rocketstore.broker._controller", "rocketstore.broker.replication._outer_api") in pairs
    # a TYPE_CHECKING import
    assert ("rocketstore.server._run", "rocketstore.namesrv") in pairs
    # "from .. import X" of the package itself
    assert ("rocketstore.spark._store_put", "rocketstore") in pairs
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": {"b", "a"}}
    assert _shortest_loop({"a", "b", "c"}, graph) == ["a", "c", "a"]


def test_no_import_cycle_in_broker_and_grpc() -> None:
    cycles = _cycles_within(("rocketstore.broker", "rocketstore.grpc", "rocketstore.server"))
    assert not cycles, "\n".join(_describe(c) for c in cycles)


def test_no_import_cycle_across_packages() -> None:
    """No circle of modules spans two packages, and no circle of packages: a package's modules
    import another package's only when none of that package's import it back."""
    crossing = [c for c in _cycles(_graph(IMPORTS)) if len({package_of(m) for m in c}) > 1]
    assert not crossing, "\n".join(_describe(c) for c in crossing)
    packages: dict[str, set[str]] = {}
    for imp in IMPORTS:
        src, dst = package_of(imp.source), package_of(imp.target)
        if src != dst:
            packages.setdefault(src, set()).add(dst)
            packages.setdefault(dst, set())
    circles = _cycles(packages)
    report = []
    for circle in circles:
        members = set(circle)
        report.append(
            f"packages {', '.join(circle)} import each other:\n    "
            + "\n    ".join(
                str(i)
                for i in IMPORTS
                if package_of(i.source) in members
                and package_of(i.target) in members
                and package_of(i.source) != package_of(i.target)
            )
        )
    assert not circles, "\n".join(report)


def test_no_import_cycle_in_spark_and_cli() -> None:
    cycles = _cycles_within(("rocketstore.spark", "rocketstore.cli"))
    assert not cycles, "\n".join(_describe(c) for c in cycles)


def test_spark_options_import_nothing_else_of_spark() -> None:
    """Options are parsed in one place, below every reader and writer."""
    inside = {
        i.target
        for i in IMPORTS
        if i.source == "rocketstore.spark._options" and i.target.startswith("rocketstore.spark")
    }
    assert not inside, inside


def test_no_new_import_cycle_anywhere() -> None:
    """Every circle in the tree is one of KNOWN_CYCLES (those may go away, none may come);
    spark's are the test above's."""
    cycles = [
        c
        for c in _cycles(_graph(IMPORTS))
        if frozenset(c) not in KNOWN_CYCLES and package_of(c[0]) not in ("spark", "cli")
    ]
    assert not cycles, "\n".join(_describe(c) for c in cycles)


def test_every_module_has_a_layer() -> None:
    rank = _rank()
    unknown = sorted({package_of(m) for m in MODULES} - set(rank))
    assert not unknown, f"packages in no layer of tests/test_layers.py: {unknown}"


def test_no_package_imports_a_layer_above_it() -> None:
    rank = _rank()
    wrong: list[str] = []
    for imp in IMPORTS:
        src, dst = package_of(imp.source), package_of(imp.target)
        if src == dst or src not in rank or dst not in rank:
            continue
        if src == "spark":
            if dst not in SPARK_MAY_IMPORT:
                wrong.append(f"{imp} (spark may import {sorted(SPARK_MAY_IMPORT)} only)")
        elif src == "bench":
            continue  # the benchmarks may drive any layer
        elif rank[dst] >= rank[src]:
            wrong.append(f"{imp} ({src} may not import {dst})")
    assert not wrong, "\n".join(wrong)


def test_broker_imports_no_front_end() -> None:
    """The broker knows the gRPC front end, the composition root and the CLI by no import."""
    wrong = [
        str(i)
        for i in IMPORTS
        if package_of(i.source) == "broker" and package_of(i.target) in {"grpc", "server", "cli"}
    ]
    assert not wrong, "\n".join(wrong)


def test_processors_do_not_import_the_controller() -> None:
    """A request processor (remoting or gRPC) depends on the protocols of broker/_services.py,
    not on BrokerController: only the composition root imports the controller."""
    controller = "rocketstore.broker._controller"
    importers = sorted(
        {i.source for i in IMPORTS if i.target == controller}
        - {"rocketstore.server._broker", "rocketstore.broker"}
    )
    assert importers == [], importers


BUILT_BY_THE_ROOT = frozenset({"MessageStore", "RemotingServer"})


def _constructions(module: str) -> list[str]:
    """The calls of ``MessageStore(...)`` / ``RemotingServer(...)`` in a module (by name or
    attribute), as file:line."""
    path, _package = MODULES[module]
    where = path.relative_to(SRC.parent)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in BUILT_BY_THE_ROOT:
                out.append(f"{where}:{node.lineno}: {name}(...)")
    return out


def test_only_the_composition_root_builds_the_store_and_the_remoting_server() -> None:
    """The broker uses the store and the remoting server it is given: rocketstore.server builds
    them (the walk sees the root's own constructions, so it would see the broker's)."""
    wrong = [c for m in MODULES if package_of(m) == "broker" for c in _constructions(m)]
    assert not wrong, "\n".join(wrong)
    built = " ".join(_constructions("rocketstore.server._broker"))
    assert "MessageStore(...)" in built and "RemotingServer(...)" in built, built


PROTOCOL_MAY_IMPORT = frozenset(
    {"_inflate", "_speedups", "_extras", "store", "remoting", "protocol"}
)


def test_protocol_room_imports_nothing_above_it() -> None:
    """The wire types import the store's and remoting's modules only: no server, no client."""
    wrong = [
        str(i)
        for i in IMPORTS
        if package_of(i.source) == "protocol" and package_of(i.target) not in PROTOCOL_MAY_IMPORT
    ]
    assert not wrong, "\n".join(wrong)
    assert "rocketstore.protocol._controller_headers" in MODULES


def _loaded_by(statement: str) -> list[str]:
    """The rocketstore modules a fresh interpreter has loaded after ``statement``."""
    code = (
        f"{statement}\n"
        "import sys\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'rocketstore')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(),
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert loaded, done.stdout
    return loaded


@pytest.mark.parametrize(
    "statement",
    [
        "import rocketstore.protocol._controller_headers",
        "import rocketstore.protocol._controller_client",
        "from rocketstore.protocol import "
        + ", ".join(
            sorted(m.rsplit(".", 1)[1] for m in MODULES if m.startswith("rocketstore.protocol."))
        ),
    ],
)
def test_the_protocol_room_loads_no_server(statement: str) -> None:
    """Importing the controller's header codecs (or its client, or every wire type) loads the
    protocol room and what it stands on, nothing of a server or a client."""
    loaded = _loaded_by(statement)
    assert "rocketstore.protocol" in loaded
    above = [m for m in loaded if package_of(m) not in PROTOCOL_MAY_IMPORT]
    assert not above, above


def test_a_client_loads_no_server() -> None:
    """The client decodes what the servers answer with the protocol room's types: importing it
    (every module of it: producer, consumer, the admin clients of brokers and controllers)
    loads no broker, name server or controller module."""
    modules = sorted(m for m in MODULES if package_of(m) == "client")
    loaded = _loaded_by("import " + ", ".join(modules))
    assert "rocketstore.client._controller" in loaded
    assert "rocketstore.protocol._admin_bodies" in loaded  # what the admin client decodes with
    servers = [m for m in loaded if package_of(m) in {"broker", "namesrv", "controller", "grpc"}]
    assert not servers, servers


def test_a_broker_loads_no_controller_server() -> None:
    """A broker in controller mode speaks to the controllers with the protocol room's client:
    importing the broker (its replication room included) loads no controller or name server
    module."""
    loaded = _loaded_by("import rocketstore.broker, rocketstore.broker.replication._replicas")
    assert "rocketstore.protocol._controller_client" in loaded
    wrong = [m for m in loaded if package_of(m) in {"controller", "namesrv", "client"}]
    assert not wrong, wrong


def test_services_import_no_processor() -> None:
    services = "rocketstore.broker._services"
    allowed = {
        "rocketstore.broker._config",
        "rocketstore.broker.state._consumer_manager",
        "rocketstore.broker.state._consumer_offset",
        "rocketstore.broker.state._long_poll",
        "rocketstore.broker.state._pop",
        "rocketstore.broker.state._stats",
        "rocketstore.broker.state._subscription_group",
        "rocketstore.broker.state._topic_config",
    }
    wrong = [
        str(i)
        for i in IMPORTS
        if i.source == services and package_of(i.target) == "broker" and i.target not in allowed
    ]
    assert not wrong, "\n".join(wrong)


def _store_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["rocketstore", "store"]:
        return None
    if len(parts) == 2 or parts[2] == "_store":
        return "facade"
    if parts[2].startswith("_"):
        return "foundation"
    return parts[2]


def test_store_rooms_import_only_rooms_below() -> None:
    rank = {room: i for i, room in enumerate(STORE_ROOMS)}
    rooms = {r for m in MODULES if (r := _store_room(m)) is not None}
    assert rooms <= set(rank), f"store rooms in no layer: {sorted(rooms - set(rank))}"
    wrong = []
    for imp in IMPORTS:
        src, dst = _store_room(imp.source), _store_room(imp.target)
        if src is None or dst is None or src == dst:
            continue
        if rank[dst] > rank[src]:
            wrong.append(f"{imp} ({src} may not import {dst})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("module", "package"),
    [
        ("rocketstore", "store"),
        ("rocketstore.cli", "cli"),
        ("rocketstore.cli._net", "cli"),
        ("rocketstore.store.log._record", "store"),
    ],
)
def test_package_of(module: str, package: str) -> None:
    assert package_of(module) == package


def broker_room_of(module: str) -> str:
    """The room of a broker module (a KeyError for a top-level module no room names)."""
    parts = module.split(".")
    if module in BROKER_TOP_LEVEL:
        return BROKER_TOP_LEVEL[module]
    if len(parts) >= 3 and not parts[2].startswith("_"):
        return parts[2]  # a room's package or one of its modules
    raise KeyError(module)


def test_every_broker_module_has_a_room() -> None:
    rooms = {room for line in BROKER_ROOMS for room in line}
    unplaced = []
    for module in MODULES:
        if package_of(module) != "broker":
            continue
        try:
            room = broker_room_of(module)
        except KeyError:
            unplaced.append(module)
            continue
        if room not in rooms:
            unplaced.append(module)
    assert not unplaced, f"broker modules in no room of BROKER_ROOMS: {unplaced}"


def test_broker_rooms_import_downwards_only() -> None:
    """A broker room imports the rooms below it, never one above or one beside it."""
    rank = {room: i for i, line in enumerate(BROKER_ROOMS) for room in line}
    wrong = []
    for imp in IMPORTS:
        if package_of(imp.source) != "broker" or package_of(imp.target) != "broker":
            continue
        src, dst = broker_room_of(imp.source), broker_room_of(imp.target)
        if src != dst and rank[dst] >= rank[src]:
            wrong.append(f"{imp} ({src} may not import {dst})")
    assert not wrong, "\n".join(wrong)
