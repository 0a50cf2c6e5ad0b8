#!/usr/bin/env python3
"""Tests of tools/gen_bindings.py (run by CTest as bindings.gen_tool).

The test `bindings.generated` shows the committed files match qc.h; these show
that the check would notice when they do not, and that the parser reads all
of qc.h rather than a convenient part of it.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gen_bindings  # noqa: E402

HEADER = os.path.join(ROOT, "include", "qc.h")


def read_header():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


def run_check(header_text):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "qc.h")
        with open(path, "w", encoding="utf-8") as f:
            f.write(header_text)
        p = subprocess.run([sys.executable, os.path.join(HERE, "gen_bindings.py"), "--check",
                            "--root", ROOT, "--header", path],
                           capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class ParserReadsEverything(unittest.TestCase):
    def setUp(self):
        self.text = read_header()
        self.h = gen_bindings.parse_header(self.text)

    def test_every_function(self):
        declared = set(re.findall(r"\bQC_API\s+[^;(]*?\b(qc_\w+)\s*\(", self.text))
        self.assertGreater(len(declared), 30)
        self.assertEqual(declared, {f.name for f in self.h.functions})

    def test_every_enumerator_with_its_value(self):
        pairs = set(re.findall(r"^\s*(QC_[A-Z0-9_]+) = (\d+)", self.text, re.M))
        pairs |= {("QC_" + n, v) for n, v in re.findall(r"X\((\w+), (\d+),", self.text)}
        got = {(i.name, str(i.value)) for e in self.h.enums for i in e.items}
        self.assertEqual(pairs, got)

    def test_struct_fields_in_order(self):
        p = self.h.struct("qc_policy_t")
        names = [f.name for f in p.fields]
        self.assertEqual(names[:3], ["struct_size", "codec", "bits"])
        self.assertEqual(names[-2:], ["seed", "min_compress_bytes"])
        self.assertEqual(p.defaults["bucket_size"], "128")
        a = self.h.struct("qc_adapt_config_t")
        self.assertEqual(a.fields[-1].array, 8)

    def test_outputs_carry_every_name(self):
        files = gen_bindings.outputs(self.h)
        for e in self.h.enums:
            for it in e.items:
                for rel in ("bindings/fortran/qc_c_api.f90", "bindings/julia/QC.jl/src/libqc.jl",
                            "bindings/java/qc_enums.i"):
                    self.assertRegex(files[rel], rf"\b{it.name} = \S*{it.value}\b", rel)
        for fn in self.h.functions:
            self.assertIn(f'bind(c, name="{fn.name}")',
                          files["bindings/fortran/qc_c_api.f90"].replace("&\n        ", ""))
            self.assertIn(f"@ccall libqc.{fn.name}(", files["bindings/julia/QC.jl/src/libqc.jl"])


class LayoutTestCoversEveryField(unittest.TestCase):
    """tests/abi_guard/test_struct_layout.c records the v0 layout; a field
    appended to qc.h must be recorded there too, or the guard is silent."""

    def test_every_struct_and_field_is_recorded(self):
        with open(os.path.join(ROOT, "tests", "abi_guard", "test_struct_layout.c"), encoding="utf-8") as f:
            layout = f.read()
        h = gen_bindings.parse_header(read_header())
        for s in h.structs:
            self.assertIn(f"SIZE({s.typedef}, ", layout)
            for fld in s.fields:
                self.assertIn(f"FIELD({s.typedef}, {fld.name}, ", layout,
                              f"{s.typedef}.{fld.name} has no recorded offset")


class CheckFailsOnDrift(unittest.TestCase):
    def test_unchanged_header_passes(self):
        rc, out = run_check(read_header())
        self.assertEqual(rc, 0, out)

    def test_new_enumerator(self):
        text = read_header().replace("QC_CODEC_TOPK = 8 ", "QC_CODEC_TOPK = 8,\n  QC_CODEC_NEW = 9 ")
        self.assertIn("QC_CODEC_NEW", text)
        rc, out = run_check(text)
        self.assertEqual(rc, 1, out)
        self.assertIn("QC_CODEC_NEW", out)
        self.assertIn("qc_c_api.f90", out)

    def test_changed_default(self):
        text = read_header().replace("QC_ALGO_AUTO, 0, 8, 0.01f, 1, 0, 16384", "QC_ALGO_AUTO, 0, 8, 0.01f, 1, 0, 4096")
        rc, out = run_check(text)
        self.assertEqual(rc, 1, out)
        self.assertIn("4096", out)

    def test_changed_parameter_type(self):
        text = read_header().replace("QC_API qc_status_t qc_comm_rank(qc_comm_t comm, int* rank);",
                                     "QC_API qc_status_t qc_comm_rank(qc_comm_t comm, int64_t* rank);")
        rc, out = run_check(text)
        self.assertEqual(rc, 1, out)
        self.assertIn("rank", out)

    def test_unknown_type_is_an_error_not_a_guess(self):
        text = read_header().replace("QC_API int qc_version_number(void);",
                                     "QC_API int qc_version_number(void);\nQC_API int qc_new_call(struct foo* x);")
        rc, out = run_check(text)
        self.assertEqual(rc, 2, out)
        self.assertIn("struct foo*", out)

    def test_renamed_override_parameter_is_an_error(self):
        text = read_header().replace("const char* name,\n                                    const qc_policy_t* base",
                                     "const char* name,\n                                    const qc_policy_t* base_policy")
        self.assertIn("base_policy", text)
        rc, out = run_check(text)
        self.assertEqual(rc, 2, out)
        self.assertIn("qc_comm_apply_preset(base)", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
