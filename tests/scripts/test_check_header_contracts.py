#!/usr/bin/env python3
"""scripts/check_header_contracts.py finds what it promises to find.

Runs the checker on include/qc.h (must pass) and on copies of it broken in
one way each (must fail, naming the declaration)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_header_contracts as checker  # noqa: E402

with open(os.path.join(ROOT, "include", "qc.h"), encoding="utf-8") as f:
    HEADER = f.read()

failures = []


def expect(label, text, needle):
    problems = checker.check(text)
    if needle is None:
        if problems:
            failures.append(f"{label}: expected no problem, got {problems}")
    elif not any(needle in p for p in problems):
        failures.append(f"{label}: expected a problem mentioning {needle!r}, got {problems}")


def without_comment_above(text, declaration):
    """Drop the comment directly above `declaration`."""
    at = text.index(declaration)
    end = text.rindex("*/", 0, at)
    begin = text.rindex("/*", 0, end)
    assert text[end + 2:at].strip() == "", declaration
    return text[:begin] + text[end + 3:]


expect("the header itself", HEADER, None)
expect("a function without its comment",
       without_comment_above(HEADER, "QC_API qc_status_t qc_request_wait("),
       "qc_request_wait has no contract comment")
expect("a struct without its comment",
       without_comment_above(HEADER, "typedef struct qc_comm_config {"),
       "qc_comm_config_t has no contract comment")
expect("a handle typedef without its comment",
       without_comment_above(HEADER, "typedef struct qc_request_s* qc_request_t;"),
       "qc_request_t has no contract comment")
at = HEADER.index("QC_API qc_status_t qc_error_buffer_reset(")
doc = HEADER.rindex("/**", 0, at)
expect("a plain comment instead of a doc comment",
       HEADER[:doc] + "/* " + HEADER[doc + 3:], "qc_error_buffer_reset's comment")
expect("a one-word comment",
       HEADER.replace("/** Set every residual to zero. */", "/** Zero. */"),
       "qc_error_buffer_reset's comment is too short")
expect("a // comment", HEADER.replace("QC_API int qc_version_number(void);",
                                      "QC_API int qc_version_number(void); // M*10000+m*100+p"),
       "'//' comment")
expect("no experimental section",
       HEADER.replace("#ifdef QC_EXPERIMENTAL_API", "#if 1"), "no experimental section")
tail = HEADER.index("#endif /* QC_EXPERIMENTAL_API */") + len("#endif /* QC_EXPERIMENTAL_API */")
expect("a stable declaration after the experimental section",
       HEADER[:tail] + "\n\n/** Something stable added at the very end. */\n"
       "QC_API qc_status_t qc_comm_late(qc_comm_t comm);\n" + HEADER[tail:],
       "qc_comm_late comes after the experimental section")
expect("a declaration sharing its paragraph's comment",
       HEADER.replace("QC_API qc_status_t qc_comm_size(qc_comm_t comm, int* size);",
                      "QC_API qc_status_t qc_comm_size(qc_comm_t comm, int* size);\n"
                      "QC_API qc_status_t qc_comm_extra(qc_comm_t comm, int* extra);"), None)

for f in failures:
    print("FAIL", f)
print(f"check_header_contracts self-test: {'FAILED' if failures else 'ok'}")
sys.exit(1 if failures else 0)
