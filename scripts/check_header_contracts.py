#!/usr/bin/env python3
"""Check that include/qc.h reads as a reference (DESIGN.md, "C ABI rules").

Every public declaration (a QC_API function, a typedef of an enum, struct or
handle) must carry a contract comment in the one doc style, `/** ... */`,
directly above it or above the paragraph it belongs to: declarations that
follow each other without a blank line (a function and its init macro, the
name/from_name pairs) share the comment that opens the paragraph. A plain
`/* */` comment there, `//` comments, or a doc comment of a few words fail.

The header must also have its experimental section: `#ifdef
QC_EXPERIMENTAL_API` ... `#endif /* QC_EXPERIMENTAL_API */`, after every
stable declaration.

usage: check_header_contracts.py [--header include/qc.h]
Exit status 0 when the header passes; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import List

DECLARATION = re.compile(r"^(QC_API\b|typedef\b)")
NAME = re.compile(r"\}\s*(qc_\w+)\s*;|\b(qc_\w+)\s*\(|\b(qc_\w+_t)\s*;")
MIN_WORDS = 4  # "Set every residual to zero." is about the shortest contract


def declaration_end(lines: List[str], start: int) -> int:
    """Index past the declaration starting at `start`: its closing ';' at
    brace depth 0 (a struct's field lines are part of it)."""
    depth, i = 0, start
    while i < len(lines):
        depth += lines[i].count("{") - lines[i].count("}")
        i += 1
        if depth == 0 and lines[i - 1].rstrip().endswith(";"):
            break
    return i


def declared_name(lines: List[str], start: int) -> str:
    """The name a declaration starting at line `start` introduces."""
    text = " ".join(l.strip() for l in lines[start:declaration_end(lines, start)])
    text = re.sub(r"/\*.*?\*/", " ", text)
    match = NAME.search(text)
    return next(g for g in match.groups() if g) if match else text.strip()[:40]


def comment_above(lines: List[str], start: int):
    """The comment opening the paragraph of line `start`: (first, last) line
    indices, or None when the paragraph has no comment above `start`."""
    i = start - 1
    while i >= 0 and lines[i].strip():
        if lines[i].rstrip().endswith("*/"):
            last = i
            while i >= 0 and "/*" not in lines[i]:
                i -= 1
            return (i, last) if i >= 0 else None
        i -= 1
    return None


def check(text: str) -> List[str]:
    problems: List[str] = []
    lines = text.split("\n")

    for number, line in enumerate(lines, 1):
        if re.match(r"\s*//", line) or re.search(r";\s*//", line):
            problems.append(f"line {number}: '//' comment (the header uses /* */ and /** */)")

    i = 0
    while i < len(lines):
        if not DECLARATION.match(lines[i]):
            i += 1
            continue
        name = declared_name(lines, i)
        found = comment_above(lines, i)
        if found is None:
            problems.append(f"line {i + 1}: {name} has no contract comment above it")
        else:
            first, last = found
            opening = lines[first][lines[first].index("/*"):]
            body = " ".join(lines[first:last + 1])
            body = re.sub(r"/\*\*?|\*/|^\s*\*", " ", body)
            if not opening.startswith("/**"):
                problems.append(f"line {i + 1}: {name}'s comment (line {first + 1}) "
                                "is not a doc comment: write /** ... */")
            elif len(re.findall(r"[A-Za-z_]\w*", body)) < MIN_WORDS:
                problems.append(f"line {i + 1}: {name}'s comment is too short "
                                "to state a contract")
        i = declaration_end(lines, i)

    begin = [i for i, l in enumerate(lines) if l.strip() == "#ifdef QC_EXPERIMENTAL_API"]
    end = [i for i, l in enumerate(lines) if l.strip() == "#endif /* QC_EXPERIMENTAL_API */"]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        problems.append("no experimental section (#ifdef QC_EXPERIMENTAL_API ... "
                        "#endif /* QC_EXPERIMENTAL_API */)")
    else:
        for i in range(end[0] + 1, len(lines)):
            if DECLARATION.match(lines[i]):
                problems.append(f"line {i + 1}: {declared_name(lines, i)} comes after the "
                                "experimental section (stable declarations go before it)")
    return problems


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--header", default="include/qc.h")
    args = parser.parse_args(argv)
    with open(args.header, encoding="utf-8") as f:
        problems = check(f.read())
    for p in problems:
        print(f"{args.header}: {p}")
    if not problems:
        print(f"{args.header}: every public declaration has a contract comment")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
