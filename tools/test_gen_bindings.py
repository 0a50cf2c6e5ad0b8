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
from qc_header import HeaderError, MissingLibclang, load_cindex  # noqa: E402

try:
    load_cindex()
except MissingLibclang as e:  # as gen_bindings.py: skipped (77), except under CI=true
    print(f"test_gen_bindings.py: {e}", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI", "").lower() == "true" else 77)

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
        self.assertEqual(names[-3:], ["seed", "min_compress_bytes", "scale"])
        self.assertEqual(p.defaults["scale"], "QC_SCALE_AUTO")
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
        text = read_header().replace("QC_CODEC_NVFP4 = 15 ", "QC_CODEC_NVFP4 = 15,\n  QC_CODEC_NEW = 16 ")
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


def trailing_comments_as(text, style):
    """Rewrite every one-line `/* doc */` after an enumerator or a field in
    another comment style ('// {}', '/**< {} */', ...)."""
    return re.sub(r"^(\s+(?:QC_\w+ = \d+,?|[\w ]+\*? ?\w+(?:\[\d+\])?;)\s*)/\* (.*?) \*/$",
                  lambda m: m.group(1) + style.format(m.group(2)), text, flags=re.M)


EXPERIMENTAL_SECTION = """
#ifdef QC_EXPERIMENTAL_API
/** Emulated allreduce of call `call_index` of one layer. */
QC_API qc_status_t qc_emulate_allreduce_layer(int nranks, const void* const* sendbufs,
                                              void* const* recvbufs, size_t count,
                                              qc_dtype_t dtype, const qc_policy_t* policy,
                                              const char* layer, uint64_t call_index);
#endif /* QC_EXPERIMENTAL_API */
"""


class SturdyAgainstHeaderEdits(unittest.TestCase):
    """Edits that are coming to qc.h (or are plain C style) and that the
    regex parser this one replaced could not take: comment styles, the
    experimental section, spacing, declarations that #if leaves out."""

    def test_comment_styles_give_the_same_bindings(self):
        for style in ("// {}", "/**< {} */", "///< {}", "/** {} */"):
            text = trailing_comments_as(read_header(), style)
            self.assertIn(style.format("IEEE 754 binary16"), text)
            rc, out = run_check(text)
            self.assertEqual(rc, 0, f"{style}: {out}")

    def test_layout_and_spelling_give_the_same_bindings(self):
        text = (read_header()
                .replace("typedef enum qc_dtype QC_ENUM_BASE {", "typedef enum qc_dtype {")
                .replace("{ sizeof(qc_stats_t), 0,", "{ sizeof (qc_stats_t), /* calls */ 0,")
                .replace("  double codec_seconds;\n  double transport_seconds;\n",
                         "  double codec_seconds, transport_seconds;\n")
                .replace("QC_CODEC_TOPK = 8", "QC_CODEC_TOPK = 0x8")
                .replace("const size_t* counts,", "const size_t counts[],")
                .replace("#ifdef __cplusplus\n}", "#if 0\nQC_API int qc_gone(void);\n#endif\n#ifdef __cplusplus\n}"))
        self.assertIn("transport_seconds;", text)
        self.assertEqual(text.count("const size_t counts[],"), 2)
        rc, out = run_check(text)
        self.assertEqual(rc, 0, out)

    def test_experimental_section_is_bound_and_marked(self):
        text = read_header().replace("#ifdef __cplusplus\n}", EXPERIMENTAL_SECTION + "\n#ifdef __cplusplus\n}")
        h = gen_bindings.parse_header(text)
        fn = next(f for f in h.functions if f.name == "qc_emulate_allreduce_layer")
        self.assertTrue(fn.experimental)
        self.assertEqual([(p.ctype, p.name) for p in fn.params[-2:]],
                         [("const char*", "layer"), ("uint64_t", "call_index")])
        before = {f.name for f in gen_bindings.parse_header(read_header()).functions
                  if f.experimental}
        self.assertIn("qc_comm_adapt_policies", before)
        self.assertEqual({f.name for f in h.functions if f.experimental}, before | {fn.name})
        rc, out = run_check(text)
        self.assertEqual(rc, 1, out)
        self.assertIn("+    ! experimental: declared in the QC_EXPERIMENTAL_API section", out)
        self.assertIn("+    @ccall libqc.qc_emulate_allreduce_layer(", out)


SYNTHETIC = """#include <stddef.h>
#include <stdint.h>
#define QC_API __attribute__((visibility("default")))
#define QC_ENUM_BASE
#define QC_VERSION_MAJOR 2
#define QC_VERSION_MINOR 1
#define QC_VERSION_PATCH 7
#define QC_STATUS_MAP(X) X(SUCCESS, 0, "fine") X(ERROR_BAD, 1, "not fine")
typedef enum qc_status QC_ENUM_BASE {
#define ENTRY_(name, value, text) QC_##name = value,
  QC_STATUS_MAP(ENTRY_)
#undef ENTRY_
} qc_status_t;
"""


class WithoutLibclang(unittest.TestCase):
    def run_without_clang(self, ci):
        code = ("import sys; sys.modules['clang'] = None; sys.path.insert(0, sys.argv[1]); "
                "import gen_bindings; sys.exit(gen_bindings.main(['--check', '--root', sys.argv[2]]))")
        env = dict(os.environ, CI=ci)
        return subprocess.run([sys.executable, "-c", code, HERE, ROOT], capture_output=True, text=True, env=env)

    def test_says_what_to_install_and_skips_outside_ci(self):
        p = self.run_without_clang("")
        self.assertEqual(p.returncode, 77, p.stderr)
        self.assertIn("apt-get install python3-clang-14", p.stderr)
        self.assertEqual(self.run_without_clang("true").returncode, 1)


class SyntheticHeaders(unittest.TestCase):
    """Small headers with one feature each, read by parse_header."""

    def parse(self, body):
        return gen_bindings.parse_header(SYNTHETIC + body)

    def test_version_and_statuses(self):
        h = self.parse("")
        self.assertEqual(h.version, {"MAJOR": 2, "MINOR": 1, "PATCH": 7})
        self.assertEqual([(i.name, i.value, i.doc) for i in h.enums[0].items],
                         [("QC_SUCCESS", 0, "fine"), ("QC_ERROR_BAD", 1, "not fine")])

    def test_doc_comments_in_every_style(self):
        h = self.parse("""
typedef enum qc_mode QC_ENUM_BASE {
  QC_MODE_A = 0, /* plain */
  QC_MODE_B = 1, // line
  QC_MODE_C = 2, /**< doc after */
  /** doc before */
  QC_MODE_D = 3,
  QC_MODE_E = 4, /* runs over
                    two lines */
  QC_MODE_F = 5
} qc_mode_t;
typedef struct qc_thing {
  size_t struct_size; ///< bytes
  /* --- a note on the fields below --- */
  int late;
  double x; /* x doc */
} qc_thing_t;
""")
        docs = {i.name: i.doc for i in h.enums[1].items}
        self.assertEqual(docs, {"QC_MODE_A": "plain", "QC_MODE_B": "line", "QC_MODE_C": "doc after",
                                "QC_MODE_D": "doc before", "QC_MODE_E": "", "QC_MODE_F": ""})
        self.assertEqual([(f.name, f.doc) for f in h.struct("qc_thing_t").fields],
                         [("struct_size", "bytes"), ("late", ""), ("x", "x doc")])

    def test_macros_are_not_functions_and_initializers_are_read(self):
        h = self.parse("""
typedef struct qc_knob {
  size_t struct_size;
  float ratio;
  int widths[3];
} qc_knob_t;
#define QC_KNOB_INIT { sizeof (qc_knob_t), /* ratio */ 0.5f, {1, 2, 3} }
QC_API qc_status_t qc_knob_init_sized(qc_knob_t* knob, size_t struct_size);
#define qc_knob_init(knob) qc_knob_init_sized((knob), sizeof *(knob))
""")
        self.assertEqual([f.name for f in h.functions], ["qc_knob_init_sized"])
        knob = h.struct("qc_knob_t")
        self.assertEqual(knob.defaults, {"struct_size": "sizeof(qc_knob_t)", "ratio": "0.5f",
                                         "widths": "{1, 2, 3}"})
        self.assertEqual((knob.fields[2].ctype, knob.fields[2].array), ("int", 3))
        self.assertIn("real(c_float) :: ratio = 0.5_c_float", gen_bindings.gen_fortran(h)[0])

    def test_handles_and_experimental_declarations(self):
        h = self.parse("""
typedef struct qc_thing_s* qc_thing_t;
QC_API qc_status_t qc_thing_poke(qc_thing_t thing, const char* layer, uint64_t call_index);
#ifdef QC_EXPERIMENTAL_API
typedef struct qc_probe { size_t struct_size; } qc_probe_t;
QC_API qc_status_t qc_thing_probe(qc_thing_t thing, qc_probe_t* probe);
#endif
""")
        self.assertEqual(h.handles, ["qc_thing_t"])
        self.assertEqual([(f.name, f.experimental) for f in h.functions],
                         [("qc_thing_poke", False), ("qc_thing_probe", True)])
        self.assertTrue(h.struct("qc_probe_t").experimental)
        julia = gen_bindings.gen_julia(h)
        self.assertIn("# experimental: declared in the QC_EXPERIMENTAL_API section of qc.h, "
                      "may change in a minor release\nqc_thing_probe(", julia)
        self.assertNotIn("experimental", julia.split("qc_thing_probe(")[0].split("qc_thing_poke(")[1])

    def test_refusals_name_the_problem(self):
        for body, message in [
                ("QC_API int qc_f(foo_t* x);", "unknown type name 'foo_t'"),
                ("int qc_f(int x);", "qc_f is declared without QC_API"),
                ("QC_API int qc_f();", "qc_f: needs a prototype"),
                ("QC_API int qc_f(int);", "qc_f: parameter 1 has no name"),
                ("typedef enum qc_e QC_ENUM_BASE { QC_E_A = 0, QC_E_B } qc_e_t;", "QC_E_B has no explicit value"),
                ("typedef struct qc_s { int a; } qc_s_t;\n#define QC_S_INIT { 1, 2 }", "QC_S_INIT: 2 values for 1 fields")]:
            with self.assertRaises(HeaderError, msg=body) as cm:
                self.parse(body)
            self.assertIn(message, str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
