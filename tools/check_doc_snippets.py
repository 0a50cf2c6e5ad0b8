#!/usr/bin/env python3
"""Check that code snippets in Markdown are excerpts of tested files.

A fenced code block right after a marker line

    <!-- snippet: examples/python_allreduce.py -->

must appear, line for line and contiguously, in that file (paths relative to
the repository root; leading and trailing blanks of each line are ignored, so
an excerpt may be dedented). The file is one that CTest builds or runs, so a
snippet that passes this check is code that works; when the file changes and
the snippet no longer matches, this check fails instead of the README
quietly going stale. Blocks without a marker are not checked.

usage: check_doc_snippets.py [--root DIR] FILE.md...
exit 0: every marked snippet matches; 1: a mismatch (reported); 2: usage.
"""

import argparse
import os
import re
import sys
from typing import List, Tuple

MARKER = re.compile(r"^<!--\s*snippet:\s*(\S+)\s*-->\s*$")


def snippets(md_lines: List[str]) -> List[Tuple[int, str, List[str]]]:
    """(line number of the marker, source path, the block's lines)."""
    out = []
    i = 0
    while i < len(md_lines):
        m = MARKER.match(md_lines[i])
        if not m:
            i += 1
            continue
        start = i + 1
        while start < len(md_lines) and not md_lines[start].strip():
            start += 1
        if start >= len(md_lines) or not md_lines[start].lstrip().startswith("```"):
            out.append((i + 1, m.group(1), None))
            i += 1
            continue
        end = start + 1
        while end < len(md_lines) and not md_lines[end].lstrip().startswith("```"):
            end += 1
        out.append((i + 1, m.group(1), md_lines[start + 1:end]))
        i = end + 1
    return out


def find_block(block: List[str], source: List[str]) -> Tuple[bool, int]:
    """Whether block occurs in source; else how many leading lines matched best."""
    b = [l.strip() for l in block]
    s = [l.strip() for l in source]
    best = 0
    for k in range(len(s)):
        n = 0
        while n < len(b) and k + n < len(s) and s[k + n] == b[n]:
            n += 1
        if n == len(b):
            return True, n
        best = max(best, n)
    return False, best


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    failures = 0
    checked = 0
    for md in args.files:
        with open(md, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for line_no, rel, block in snippets(lines):
            where = f"{md}:{line_no}"
            if block is None:
                print(f"{where}: marker for {rel} is not followed by a code block")
                failures += 1
                continue
            path = os.path.join(args.root, rel)
            if not os.path.isfile(path):
                print(f"{where}: {rel} does not exist")
                failures += 1
                continue
            with open(path, encoding="utf-8") as f:
                source = f.read().splitlines()
            ok, matched = find_block(block, source)
            checked += 1
            if not ok:
                failures += 1
                print(f"{where}: the snippet is not an excerpt of {rel}; "
                      f"at best its first {matched} of {len(block)} lines match, "
                      f"then: {block[matched].strip()!r}")
    if failures:
        print(f"check_doc_snippets.py: {failures} problem(s) in {checked} snippet(s)")
        return 1
    print(f"check_doc_snippets.py: {checked} snippets match their sources")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
