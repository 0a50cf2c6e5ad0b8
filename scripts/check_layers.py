#!/usr/bin/env python3
"""Check that qc's sources include each other only down the layer order.

Every file under src/ (and include/) belongs to one layer, by the table
PLACES below; the layers are ordered by ORDER, top first. A file may include
files of its own layer and of any layer below it, never one above it, nor
one beside it (the layers of one tier know nothing of each other). And no
module (a header with its sources: foo.h, foo.cpp, foo.cu are one module)
may include itself through others: an include cycle.

A file that PLACES does not place is an error too, so a new file is given
its layer when it is added. docs/architecture.md ("Layers") explains them.

usage: check_layers.py [--root DIR]
exit 0: the includes follow the layers; 1: a problem (reported); 2: usage.
"""

import argparse
import os
import re
import sys
from typing import Dict, List, Optional, Set, Tuple

# Tiers, top first. A call flows down them: api -> comm -> planner ->
# executors -> (schedules | codecs | transports) -> util.
ORDER = [
    ["api"],  # the C entry points: validate, convert errors
    ["comm"],  # the communicator, its creation and its call drivers
    ["planner"],  # (policy, call shape, placement, transport) -> plan
    ["executors"],  # run a schedule: the call context, algorithms, staging memory
    ["schedules", "codecs", "transports"],  # steps; bit layouts and kernels; bytes
    ["util"],  # status, log, params, policies as data, device memory access
]

# Paths relative to the repository root. An entry ending in "/" places every
# file under that directory; any other entry is a module (a path without its
# extension: "src/core/log" places log.h and log.cpp). The longest entry
# that matches a file places it.
PLACES = {
    # api
    "src/core/api": "api",
    "src/core/api_codecs": "api",
    "src/core/api_names": "api",
    "src/core/api_collectives": "api",
    "src/core/api_comm_state": "api",
    "src/core/api_error_buffer": "api",
    "src/core/api_checks": "api",
    "src/core/api_guard": "api",
    "src/core/api_handles": "api",
    "src/core/api_requests": "api",
    "src/core/api_sparse": "api",
    "src/core/sparse_result": "api",
    "src/core/emulate": "api",
    "src/core/adapt/adapt_policies": "api",
    # comm
    "src/core/communicator": "comm",
    "src/core/comm_create": "comm",
    "src/core/request_queue": "comm",
    "src/core/fiber_ranks": "comm",
    "src/core/emulation_keep": "comm",
    "src/core/call_stats": "comm",
    "src/core/comm_state": "comm",
    "src/core/residual_binding": "comm",
    "src/core/allreduce_host": "comm",
    "src/core/allreduce_device": "comm",
    "src/core/alltoall": "comm",
    "src/core/scheduled_host": "comm",
    "src/core/sparse_host": "comm",
    "src/core/segments": "comm",
    "src/core/host_staging": "comm",
    "src/core/device_call": "comm",
    "src/core/error_buffer": "comm",
    # planner
    "src/core/planner": "planner",
    "src/core/plan_log": "planner",
    "src/core/sparse_plan": "planner",
    "src/core/error_buffer_grid": "planner",
    "src/core/adapt/": "planner",
    # executors
    "src/core/executors/": "executors",
    "src/core/sparse_rows": "executors",
    "src/core/algorithms/": "executors",
    "src/core/collective_context": "executors",
    "src/core/device_staging": "executors",
    "src/core/device_residuals": "executors",
    "src/core/staging_memory": "executors",
    "src/core/pending_device_work": "executors",
    # schedules: pure step lists (they include util and partition.h only)
    "src/core/schedules/": "schedules",
    # codecs: formats, and the kernels on the CPU and the GPU
    "src/core/codecs/": "codecs",
    "src/cpu/": "codecs",
    "src/cuda/": "codecs",
    # transports
    "src/core/transports/": "transports",
    "src/cuda/nccl_backend": "transports",
    # util
    "include/": "util",  # qc.h: the C ABI's types, spoken by every layer
    "src/core/status": "util",
    "src/core/log": "util",
    "src/core/log_level": "util",
    "src/core/params": "util",
    "src/core/policy": "util",
    "src/core/enum_names": "util",
    "src/core/policy_table": "util",
    "src/core/dtype": "util",
    "src/core/byte_order": "util",
    "src/core/fnv1a": "util",
    "src/core/checked_math": "util",
    "src/core/struct_io": "util",
    "src/core/handle_table": "util",
    "src/core/host_device": "util",
    "src/core/device_memory": "util",
    "src/cpu/isa": "util",
    "src/cuda/device_runtime": "util",
    "src/cuda/cuda_check": "util",
}

SCANNED = ("src", "include")  # the trees whose files are checked
SEARCH = ("src", "include")  # where "..." includes are looked up
SOURCE_EXTENSIONS = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def tier_of(layer: str) -> int:
    for i, tier in enumerate(ORDER):
        if layer in tier:
            return i
    raise ValueError("layer %r is in PLACES but not in ORDER" % layer)


def module_of(path: str) -> str:
    return os.path.splitext(path)[0]


def layer_of(path: str) -> Optional[str]:
    """The layer PLACES gives `path` (relative to the root), or None."""
    best, best_len = None, -1
    module = module_of(path)
    for entry, layer in PLACES.items():
        if entry.endswith("/"):
            hit = path.startswith(entry)
        else:
            hit = module == entry
        if hit and len(entry) > best_len:
            best, best_len = layer, len(entry)
    return best


def source_files(root: str) -> List[str]:
    out = []
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTENSIONS):
                    out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return [p.replace(os.sep, "/") for p in out]


def includes_of(root: str, path: str) -> List[Tuple[int, str]]:
    """(line number, included name) of every #include "..." in the file."""
    out = []
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                out.append((number, m.group(1)))
    return out


def resolve(root: str, path: str, name: str) -> Optional[str]:
    """The file `name` names when `path` includes it: next to `path` first,
    then in the search directories, as the compiler looks."""
    candidates = [os.path.join(os.path.dirname(path), name)]
    candidates += [os.path.join(top, name) for top in SEARCH]
    for c in candidates:
        c = os.path.normpath(c).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


Edge = Tuple[str, int, str, str]  # (file, line, included name, included file)


def find_cycle(graph: Dict[str, Dict[str, Edge]]) -> List[List[Edge]]:
    """One cycle (as its edges) per strongly connected group of modules."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    groups: List[List[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        # Tarjan's algorithm; the module graph is small, so recursion is fine.
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(1000, 4 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            connect(v)

    cycles = []
    for group in groups:
        members = set(group)
        start = group[0]
        # Breadth-first from start back to start, inside the group: the
        # shortest cycle through it.
        previous: Dict[str, Tuple[str, Edge]] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            following = []
            for v in frontier:
                for w, edge in sorted(graph.get(v, {}).items()):
                    if w not in members:
                        continue
                    if w == start:
                        found = (v, edge)
                        break
                    if w not in previous:
                        previous[w] = (v, edge)
                        following.append(w)
                if found is not None:
                    break
            frontier = following
        edges = [found[1]]
        v = found[0]
        while v != start:
            v, edge = previous[v]
            edges.append(edge)
        cycles.append(list(reversed(edges)))
    return cycles


def check(root: str) -> Tuple[List[str], int, int]:
    """(problems, files checked, includes checked)."""
    problems = []
    files = source_files(root)
    graph: Dict[str, Dict[str, Edge]] = {}
    include_count = 0
    for layer in set(PLACES.values()):
        tier_of(layer)
    for path in files:
        if layer_of(path) is None:
            problems.append(
                "%s: not placed in a layer: add it to PLACES in scripts/check_layers.py "
                "(docs/architecture.md, \"Layers\", says what goes where)" % path)
    for path in files:
        layer = layer_of(path)
        for number, name in includes_of(root, path):
            include_count += 1
            target = resolve(root, path, name)
            where = '%s:%d: #include "%s"' % (path, number, name)
            if target is None:
                problems.append("%s names no file under %s" % (where, " or ".join(SEARCH)))
                continue
            source_module, target_module = module_of(path), module_of(target)
            if source_module != target_module:
                graph.setdefault(source_module, {}).setdefault(
                    target_module, (path, number, name, target))
            target_layer = layer_of(target)
            if layer is None or target_layer is None or target_layer == layer:
                continue
            here, there = tier_of(layer), tier_of(target_layer)
            if there < here:
                problems.append(
                    "%s goes up the layers: %s is in layer '%s', %s in layer '%s' above it"
                    % (where, path, layer, target, target_layer))
            elif there == here:
                problems.append(
                    "%s goes sideways: %s is in layer '%s', %s in layer '%s' beside it"
                    % (where, path, layer, target, target_layer))
    for cycle in find_cycle(graph):
        steps = "; ".join('%s:%d includes "%s"' % (f, n, name) for f, n, name, _ in cycle)
        modules = " -> ".join([module_of(cycle[0][0])] + [module_of(e[3]) for e in cycle])
        problems.append("include cycle %s: %s" % (modules, steps))
    return problems, len(files), include_count


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Check that includes under src/ go only down qc's layers, without cycles.")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the repository root (default: this script's parent directory's)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    if not os.path.isdir(os.path.join(root, "src")):
        print("check_layers.py: %s has no src/ directory" % root, file=sys.stderr)
        return 2
    problems, files, includes = check(root)
    for p in problems:
        print(p)
    if problems:
        print("check_layers.py: %d problem(s) in %d files (%d includes)"
              % (len(problems), files, includes))
        return 1
    print("check_layers.py: %d files, %d includes, all down the layers and acyclic"
          % (files, includes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
