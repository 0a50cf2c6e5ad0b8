#!/usr/bin/env python3
"""Generate the cmocka test of bad inputs from the tables in docs/errors.md.

docs/errors.md is the one description of what every bad call gets. Each row
of its tables whose header is

    | id | function | ranks | bad call | status | message | note |

becomes one cmocka test in the generated C file: a function that evaluates
the row's C expression (the `bad call` cell, in backticks) with the fixture
names of tests/abi/bad_input_names.h in scope, and a test that runs it with
qct_run_row() (tests/abi/bad_input_fixture.h) and asserts that every rank
gets `status` and, for a failure, a qc_last_error() that contains `message`
and names `function`.

Cells:
  id        a C identifier, unique over the document (the test is test_<id>)
  function  the qc function whose failure the row is about (its name must
            appear in the message); "qc_a / qc_b" when ranks call different
            ones (the message names one of them)
  ranks     1..16 ranks of a local group, one thread each; `rank` tells them
            apart in the expression. A trailing "mpi", "no-mpi" or "no-cuda"
            marks a row that holds only in a build with MPI, without MPI or
            without CUDA; it is skipped in the other builds.
  bad call  `C expression` of type qc_status_t (comma expressions allowed)
  status    a qc_status_t name, with or without the QC_ / QC_ERROR_ prefix
  message   `substring` of qc_last_error(), or "-" for SUCCESS
  note      free text, ignored here
A "|" inside a cell is written "\\|" (as GitHub's tables require, also
inside code spans); the parser turns it back into "|".

usage: gen_bad_input_tests.py DOC OUTPUT.c
       gen_bad_input_tests.py --self-test   (the parser's own checks)
Exit status 1, with file:line messages, for a malformed table or row.
Standard library only.
"""

import os
import re
import sys

HEADER = ["id", "function", "ranks", "bad call", "status", "message", "note"]
STATUSES = [
    "QC_SUCCESS",
    "QC_ERROR_INVALID_ARGUMENT",
    "QC_ERROR_OUT_OF_MEMORY",
    "QC_ERROR_UNSUPPORTED",
    "QC_ERROR_TRANSPORT",
    "QC_ERROR_MISMATCH",
    "QC_ERROR_TIMEOUT",
    "QC_ERROR_CORRUPT_DATA",
    "QC_ERROR_VERSION",
    "QC_ERROR_INTERNAL",
]
FLAGS = ["mpi", "no-mpi", "no-cuda"]  # the row holds only in a build with MPI / without ...
MAX_RANKS = 16  # QCT_MAX_RANKS in tests/abi/qc_abi_test.h


class TableError(Exception):
    def __init__(self, line, text):
        super().__init__(text)
        self.line = line


def split_cells(line, lineno):
    """Cells of a Markdown table row; "\\|" is a literal "|"."""
    s = line.strip()
    if not s.startswith("|"):
        raise TableError(lineno, "a table row must start with '|'")
    cells, cur, i = [], [], 1
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] == "|":
            cur.append("|")
            i += 2
            continue
        if c == "|":
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    rest = "".join(cur).strip()
    if rest:
        cells.append(rest)  # a row without the closing '|'
    return cells


def code_span(cell, lineno, what):
    m = re.fullmatch(r"`([^`]+)`", cell)
    if not m:
        raise TableError(lineno, f"{what} must be one `code span`, got {cell!r}")
    return m.group(1).strip()


def parse_status(cell, lineno):
    name = cell.strip().strip("`").upper()
    for candidate in (name, "QC_" + name, "QC_ERROR_" + name):
        if candidate in STATUSES:
            return candidate
    raise TableError(lineno, f"unknown status {cell!r}; expected one of {', '.join(STATUSES)}")


def parse_row(cells, lineno):
    if len(cells) != len(HEADER):
        raise TableError(lineno, f"expected {len(HEADER)} cells, got {len(cells)}: {cells!r}")
    row_id, function, ranks, call, status, message, _note = cells
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", row_id):
        raise TableError(lineno, f"id {row_id!r} is not a C identifier")
    function = function.replace("`", "")
    if not re.fullmatch(r"qc_[a-z0-9_]+( / qc_[a-z0-9_]+)*", function):
        raise TableError(lineno, f"function {function!r} is not a qc_ function name "
                                 "(or several, separated by ' / ')")
    words = ranks.split()
    if not words or not words[0].isdigit() or any(w not in FLAGS for w in words[1:]):
        raise TableError(lineno, f"ranks {ranks!r}: expected a number, optionally followed by "
                                 f"{' / '.join(FLAGS)}")
    nranks = int(words[0])
    if not 1 <= nranks <= MAX_RANKS:
        raise TableError(lineno, f"ranks {nranks} is outside 1..{MAX_RANKS}")
    expr = code_span(call, lineno, "the bad call")
    status = parse_status(status, lineno)
    if status == "QC_SUCCESS":
        if message not in ("-", "—", ""):
            raise TableError(lineno, "a SUCCESS row has no message (write '-')")
        substring = None
    else:
        substring = code_span(message, lineno, "the message")
    return {
        "id": row_id,
        "function": function,
        "ranks": nranks,
        "mpi": "mpi" in words[1:],
        "no_mpi": "no-mpi" in words[1:],
        "no_cuda": "no-cuda" in words[1:],
        "expr": expr,
        "status": status,
        "message": substring,
        "line": lineno,
    }


def parse_document(text):
    rows, seen = [], {}
    lines = text.splitlines()
    i, tables = 0, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("|"):
            cells = [c.lower() for c in split_cells(line, i + 1)]
            if cells == HEADER:
                tables += 1
                if i + 1 >= len(lines) or not re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*",
                                                             lines[i + 1].strip()):
                    raise TableError(i + 2, "the header row must be followed by a |---| row")
                i += 2
                while i < len(lines) and lines[i].lstrip().startswith("|"):
                    row = parse_row(split_cells(lines[i], i + 1), i + 1)
                    if row["id"] in seen:
                        raise TableError(i + 1, f"id {row['id']} is also used on line {seen[row['id']]}")
                    seen[row["id"]] = i + 1
                    rows.append(row)
                    i += 1
                continue
        i += 1
    if tables == 0:
        raise TableError(1, "no table with the header | " + " | ".join(HEADER) + " |")
    return rows


def c_string(s):
    out = []
    for ch in s:
        if ch in "\\\"":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append("\\%03o" % ord(ch) if ord(ch) < 0x80 else ch)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def generate(rows, doc_path, out_path):
    doc_ref = doc_path.replace("\\", "/")
    lines = [
        "/*",
        f" * GENERATED by tools/gen_bad_input_tests.py from {os.path.basename(doc_path)}:",
        " * do not edit; edit the table in docs/errors.md instead.",
        f" * {len(rows)} rows, one cmocka test each.",
        " */",
        '#include "bad_input_fixture.h"',
        "",
        "#include \"bad_input_names.h\"",
        "",
    ]
    out_ref = out_path.replace("\\", "/")
    for row in rows:
        lines.append(f"/* {os.path.basename(doc_path)}:{row['line']}: {row['id']} ({row['function']}) */")
        lines.append(f"static qc_status_t qct_row_{row['id']}(qct_fx* fx) {{")
        # Compiler messages about the expression point at the table row.
        lines.append(f'#line {row["line"]} {c_string(doc_ref)}')
        lines.append(f"  return ({row['expr']});")
        lines.append(f"#line {len(lines) + 2} {c_string(out_ref)}")
        lines.append("}")
        lines.append("")
    lines.append("#define QCT_NAMES_OFF")
    lines.append('#include "bad_input_names.h"')
    lines.append("")
    for row in rows:
        message = c_string(row["message"]) if row["message"] is not None else "NULL"
        lines.append(f"static void test_{row['id']}(void** state) {{")
        lines.append("  static const qct_row row = {")
        lines.append(f"      {c_string(row['id'])}, {c_string(row['function'])}, {row['ranks']}, "
                     f"{1 if row['mpi'] else 0}, {1 if row['no_mpi'] else 0}, "
                     f"{1 if row['no_cuda'] else 0}, {row['status']},")
        lines.append(f"      {message},")
        lines.append(f"      {c_string(row['expr'])},")
        lines.append(f"      {c_string(doc_ref)}, {row['line']}}};")
        lines.append("  (void)state;")
        lines.append(f"  qct_run_row(&row, qct_row_{row['id']});")
        lines.append("}")
        lines.append("")
    lines.append("int main(void) {")
    lines.append("  const struct CMUnitTest tests[] = {")
    for row in rows:
        lines.append(f"      cmocka_unit_test(test_{row['id']}),")
    lines.append("  };")
    lines.append('  return cmocka_run_group_tests_name("abi_bad_input", tests, NULL, NULL);')
    lines.append("}")
    return "\n".join(lines) + "\n"


def self_test():
    """The parser's own checks (CTest abi_bad_input_generator)."""
    head = "| id | function | ranks | bad call | status | message | note |\n|---|---|---|---|---|---|---|\n"
    good = head + (
        "| a1 | qc_allreduce | 3 | `x ? 1 : (a \\|\\| b)` | MISMATCH | `it's \"q\"` | n |\n"
        "| a2 | qc_codec_decode | 1 no-mpi | `f()` | SUCCESS | - | |\n")
    rows = parse_document(good)
    assert [r["id"] for r in rows] == ["a1", "a2"], rows
    assert rows[0]["expr"] == "x ? 1 : (a || b)", rows[0]["expr"]
    assert rows[0]["status"] == "QC_ERROR_MISMATCH" and rows[0]["ranks"] == 3
    assert rows[0]["message"] == "it's \"q\"" and rows[1]["message"] is None
    assert rows[1]["no_mpi"] and not rows[1]["mpi"]
    assert c_string(rows[0]["message"]) == '"it\'s \\"q\\""'
    bad = {
        "duplicate id": good + "| a1 | qc_codec_decode | 1 | `f()` | SUCCESS | - | |\n",
        "unknown status": head + "| b | qc_codec_decode | 1 | `f()` | BROKEN | `x` | |\n",
        "no code span": head + "| b | qc_codec_decode | 1 | f() | CORRUPT_DATA | `x` | |\n",
        "unescaped pipe": head + "| b | qc_codec_decode | 1 | `a || b` | CORRUPT_DATA | `x` | |\n",
        "too many ranks": head + "| b | qc_codec_decode | 17 | `f()` | CORRUPT_DATA | `x` | |\n",
        "unknown flag": head + "| b | qc_codec_decode | 1 gpu | `f()` | CORRUPT_DATA | `x` | |\n",
        "failure without message": head + "| b | qc_codec_decode | 1 | `f()` | CORRUPT_DATA | - | |\n",
        "success with message": head + "| b | qc_codec_decode | 1 | `f()` | SUCCESS | `x` | |\n",
        "bad id": head + "| 1b | qc_codec_decode | 1 | `f()` | SUCCESS | - | |\n",
        "not a qc function": head + "| b | decode | 1 | `f()` | SUCCESS | - | |\n",
        "no table": "# nothing\n",
    }
    for what, text in bad.items():
        try:
            parse_document(text)
        except TableError:
            continue
        raise AssertionError(f"the parser accepted a table with {what}")
    # The generated C names every row and reports expressions at their line.
    source = generate(rows, "/d/errors.md", "/b/out.c")
    assert "cmocka_unit_test(test_a1)" in source and "cmocka_unit_test(test_a2)" in source
    assert '#line 3 "/d/errors.md"' in source and "return (x ? 1 : (a || b));" in source
    print(f"gen_bad_input_tests.py self-test: {len(bad)} malformed tables rejected, OK")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: gen_bad_input_tests.py DOC OUTPUT.c", file=sys.stderr)
        return 2
    doc_path, out_path = argv[1], argv[2]
    try:
        with open(doc_path, encoding="utf-8") as f:
            text = f.read()
        rows = parse_document(text)
    except TableError as e:
        print(f"{doc_path}:{e.line}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gen_bad_input_tests.py: {e}", file=sys.stderr)
        return 1
    source = generate(rows, os.path.abspath(doc_path), os.path.abspath(out_path))
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(source)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
