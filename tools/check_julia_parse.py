#!/usr/bin/env python3
"""Syntax check for Julia sources without Julia: parse with tree-sitter-julia.

Julia cannot be installed on the machines qc is developed on, so the QC.jl
package (bindings/julia/) is checked by parsing every .jl file with the
tree-sitter grammar for Julia and failing on any ERROR or MISSING node. This
catches syntax errors (an `end` too few, an unbalanced bracket, a stray
token); it cannot catch wrong types, names or ccall signatures.

Usage:
    check_julia_parse.py PATH [PATH ...]   parse every .jl file under the paths
    check_julia_parse.py --self-test       prove the check fails on broken code

Exit status: 0 all files parse (prints "N files parsed, no errors"); 1 a file
has a syntax error (each is listed as FILE:LINE:COLUMN), a path is missing,
or no .jl file was found; 77 the Python packages tree_sitter and
tree_sitter_julia are not installed (CTest treats 77 as "skipped"), except
when the environment variable CI is "true": then 1, so that CI really checks.

Install the packages with, e.g.:
    python3 -m venv /opt/qc-tools-venv
    /opt/qc-tools-venv/bin/pip install tree-sitter==0.26.1 tree-sitter-julia==0.23.1
"""

import argparse
import os
import sys
import tempfile

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_SKIP = 77

INSTALL_HINT = (
    "install them with: python3 -m venv /opt/qc-tools-venv && "
    "/opt/qc-tools-venv/bin/pip install tree-sitter==0.26.1 tree-sitter-julia==0.23.1 "
    "(then run this script with /opt/qc-tools-venv/bin/python)"
)


def load_parser():
    """Return a tree-sitter Parser for Julia, or exit 77 (1 under CI=true)."""
    try:
        from tree_sitter import Language, Parser
        import tree_sitter_julia
    except ImportError as e:
        in_ci = os.environ.get("CI", "").lower() == "true"
        print(
            f"check_julia_parse: cannot import tree_sitter / tree_sitter_julia ({e}); {INSTALL_HINT}",
            file=sys.stderr,
        )
        if in_ci:
            print("check_julia_parse: CI=true, so a missing parser is a failure, not a skip", file=sys.stderr)
            sys.exit(EXIT_FAIL)
        sys.exit(EXIT_SKIP)
    language = Language(tree_sitter_julia.language())
    try:
        return Parser(language)
    except TypeError:  # tree-sitter < 0.22: Parser() then set_language
        parser = Parser()
        parser.set_language(language)
        return parser


def _excerpt(source: bytes, node) -> str:
    text = source[node.start_byte : node.end_byte].decode("utf-8", "replace")
    first = text.splitlines()[0] if text else ""
    if len(first) > 70:
        first = first[:67] + "..."
    if "\n" in text and first:
        first += " ..."
    return first


def syntax_errors(parser, source: bytes):
    """List (line, column, description) of the ERROR and MISSING nodes.

    An ERROR node that contains other ERROR or MISSING nodes is reported
    through them (the innermost node is the most precise location); lines
    and columns are 1-based, columns in bytes.
    """
    tree = parser.parse(source)
    found = []

    def visit(node) -> bool:
        """Report problems under node; return True if any was reported."""
        if node.is_missing:
            row, col = node.start_point
            found.append((row + 1, col + 1, f"missing '{node.type}'"))
            return True
        if not node.has_error and not node.is_error:
            return False
        inner = False
        for child in node.children:
            inner = visit(child) or inner
        if node.is_error and not inner:
            row, col = node.start_point
            erow, ecol = node.end_point
            found.append(
                (row + 1, col + 1, f"syntax error up to {erow + 1}:{ecol + 1}: {_excerpt(source, node)!r}")
            )
            return True
        return inner

    visit(tree.root_node)
    found.sort()
    return found


def collect_files(paths):
    files, missing = [], []
    for path in paths:
        if os.path.isfile(path):
            files.append(path)
        elif os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".jl"))
        else:
            missing.append(path)
    return files, missing


def check_paths(parser, paths, out=sys.stdout) -> int:
    files, missing = collect_files(paths)
    for path in missing:
        print(f"check_julia_parse: {path}: no such file or directory", file=out)
    if not files:
        print("check_julia_parse: no .jl files found under " + ", ".join(paths), file=out)
        return EXIT_FAIL
    bad = 0
    for path in files:
        with open(path, "rb") as f:
            source = f.read()
        errors = syntax_errors(parser, source)
        if errors:
            bad += 1
            for line, col, what in errors:
                print(f"{path}:{line}:{col}: {what}", file=out)
    if bad or missing:
        print(f"check_julia_parse: {bad} of {len(files)} files have syntax errors", file=out)
        return EXIT_FAIL
    print(f"{len(files)} files parsed, no errors", file=out)
    return EXIT_OK


# Snippets for --self-test: (name, source, expected first error line or None).
_SELF_TEST_CASES = [
    (
        "valid.jl",
        "module M\n"
        "const lib = get(ENV, \"QC_LIBRARY\", \"libqc\")\n"
        "mutable struct H\n    p::Ptr{Cvoid}\nend\n"
        "f(x) = @ccall lib.qc_version_number()::Cint\n"
        "function g(a::Vector{Float32})\n    GC.@preserve a begin\n        pointer(a)\n    end\nend\n"
        "end # module\n",
        None,
    ),
    # `end` of the function missing: the module's `end` closes the function.
    ("missing_end.jl", "module M\nfunction f(x)\n    x + 1\nend\n", 1),
    # unbalanced bracket on line 2
    ("unbalanced.jl", "x = 1\ny = f(x, (2, 3)\nz = 4\n", 2),
    # a stray token on line 3
    ("stray.jl", "a = 1\nb = 2\nc = = 3\n", 3),
]


def self_test(parser) -> int:
    """Check that the checker accepts valid code and rejects broken code."""
    failures = 0
    with tempfile.TemporaryDirectory(prefix="qc-julia-parse-") as tmp:
        for name, source, expect_line in _SELF_TEST_CASES:
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(source)

            class _Sink:
                def __init__(self):
                    self.lines = []

                def write(self, s):
                    self.lines.append(s)

            sink = _Sink()
            rc = check_paths(parser, [path], out=sink)
            text = "".join(sink.lines)
            if expect_line is None:
                ok = rc == EXIT_OK
                want = "exit 0"
            else:
                ok = rc == EXIT_FAIL and f"{name}:{expect_line}:" in text
                want = f"exit 1 and an error reported at line {expect_line}"
            print(f"self-test {name}: {'ok' if ok else 'FAILED'} (rc {rc}; expected {want})")
            if not ok:
                print("  output: " + text.strip().replace("\n", "\n  output: "))
                failures += 1
    if failures:
        print(f"check_julia_parse self-test: {failures} case(s) failed")
        return EXIT_FAIL
    print("check_julia_parse self-test: the checker accepts valid code and rejects broken code")
    return EXIT_OK


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help=".jl files or directories searched for them")
    ap.add_argument("--self-test", action="store_true", help="check that broken snippets are rejected")
    args = ap.parse_args(argv)
    if not args.self_test and not args.paths:
        ap.error("give at least one path, or --self-test")
    parser = load_parser()
    if args.self_test:
        rc = self_test(parser)
        if rc != EXIT_OK or not args.paths:
            return rc
    return check_paths(parser, args.paths)


if __name__ == "__main__":
    sys.exit(main())
