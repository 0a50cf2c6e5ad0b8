"""Read include/qc.h into a model of the C ABI, with libclang.

clang parses qc.h as a C compiler does, with QC_EXPERIMENTAL_API defined so
that the experimental section is read too (and once more without it, to
mark what that section declares). Comments, code that #if leaves out and
function-like macros cannot be mistaken for declarations; types come out as
the compiler sees them. What the compiler does not keep is read from what
clang hands back of the source:
  - QC_VERSION_* and the QC_<STRUCT>_INIT initializers: the macros' tokens;
  - the statuses' descriptions: the tokens of the QC_STATUS_MAP X-macro;
  - enumerators' and fields' docs: the one-line comment after the
    declaration on its line (any style), or a doc comment alone on the line
    above it, found from where clang says the declaration is.
Needs libclang's Python bindings (Debian: python3-clang-14).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional


class HeaderError(Exception):
    """qc.h contains something the generator cannot map."""


class MissingLibclang(Exception):
    """libclang or its Python bindings are not installed."""


@dataclass
class Enumerator:
    name: str
    value: int
    doc: str = ""


@dataclass
class Enum:
    tag: str          # qc_codec
    typedef: str      # qc_codec_t
    items: List[Enumerator]
    experimental: bool = False


@dataclass
class Field:
    ctype: str        # canonical C type, e.g. "size_t", "qc_codec_t", "void*"
    name: str
    array: Optional[int] = None
    doc: str = ""


@dataclass
class Struct:
    tag: str
    typedef: str
    fields: List[Field]
    init_macro: Optional[str] = None
    defaults: Dict[str, str] = field(default_factory=dict)  # field -> C expression
    experimental: bool = False


@dataclass
class Param:
    ctype: str
    name: str


@dataclass
class Function:
    name: str
    ret: str
    params: List[Param]
    experimental: bool = False  # declared in the QC_EXPERIMENTAL_API section


@dataclass
class Header:
    version: Dict[str, int]
    enums: List[Enum]
    structs: List[Struct]
    handles: List[str]        # typedef names of opaque handles (qc_comm_t)
    functions: List[Function]

    def enum_typedefs(self) -> List[str]:
        return [e.typedef for e in self.enums]

    def struct(self, typedef: str) -> Optional[Struct]:
        return next((s for s in self.structs if s.typedef == typedef), None)


def load_cindex():
    try:
        from clang import cindex
    except ImportError:
        # Debian's bindings are pure Python, usable from any Python 3 (pyenv's, say).
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            from clang import cindex
        except ImportError:
            raise MissingLibclang("libclang's Python bindings are not installed (Debian: apt-get "
                                  "install python3-clang-14, or run scripts/install-deps.sh)") from None
    try:
        cindex.Index.create()
    except cindex.LibclangError as e:
        raise MissingLibclang(f"libclang cannot be loaded (Debian: libclang1-14): {e}")
    return cindex


def _canon_type(spelling: str) -> str:
    """clang's 'const void *const *' -> 'const void* const*'."""
    t = re.sub(r"\s*\*\s*", "* ", spelling.strip())
    return re.sub(r"\s+", " ", t).replace("* *", "**").strip()


def _split_commas(tokens: List[str]) -> List[List[str]]:
    """Split tokens on commas not inside braces or parentheses."""
    out: List[List[str]] = [[]]
    depth = 0
    for t in tokens:
        depth += (t in ("(", "{")) - (t in (")", "}"))
        if t == "," and depth == 0:
            out.append([])
        else:
            out[-1].append(t)
    return out


def _join(tokens: List[str]) -> str:
    """['sizeof', '(', 'qc_policy_t', ')'] -> 'sizeof(qc_policy_t)'; '{2, 3}'."""
    return "".join(t + " " if t == "," else t for t in tokens)


def _doc(cursor, lines: List[bytes]) -> str:
    """A one-line comment after the declaration on its line (any style), or
    a one-line doc comment (/** */, ///) alone on the line above it. A
    comment of several lines is left to qc.h, not cut short; an ordinary
    comment above is a note on what follows, not this member's doc."""
    end, start = cursor.extent.end, cursor.extent.start
    m = re.match(rb"\s*[,;]?\s*(/\*.*?\*/|//.*?)\s*$", lines[end.line - 1][end.column - 1:])
    raw = m.group(1) if m else lines[start.line - 2].strip()
    if not m and not re.fullmatch(rb"/\*\*.*\*/|///.*", raw):
        return ""
    return re.sub(r"^(/\*[*!]?<?|//[/!]?<?)|\*/$", "", raw.decode()).strip()


def _parse(cindex, text: str, path: str, experimental: bool):
    args = ["-x", "c", "-std=c99"]
    if experimental:
        args.append("-DQC_EXPERIMENTAL_API")
    tu = cindex.Index.create().parse(path, args, unsaved_files=[(path, text)],
                                     options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    errors = [f"line {d.location.line}: {d.spelling}" for d in tu.diagnostics
              if d.severity >= cindex.Diagnostic.Error]
    if errors:
        raise HeaderError("; ".join(errors))
    return [c for c in tu.cursor.get_children() if c.location.file and c.location.file.name == path]


def parse_header(text: str, path: str = "qc.h") -> Header:
    ci = load_cindex()
    K, T = ci.CursorKind, ci.TypeKind
    decls = _parse(ci, text, path, experimental=True)
    stable = {c.spelling for c in _parse(ci, text, path, experimental=False)}
    lines = text.encode().split(b"\n")
    macros = {c.spelling: [t.spelling for t in c.get_tokens() if t.kind != ci.TokenKind.COMMENT][1:]
              for c in decls if c.kind == K.MACRO_DEFINITION}

    version = {}
    for part in ("MAJOR", "MINOR", "PATCH"):
        toks = macros.get(f"QC_VERSION_{part}", [])
        if len(toks) != 1 or not toks[0].isdigit():
            raise HeaderError(f"QC_VERSION_{part} not found, or not a number")
        version[part] = int(toks[0])

    # Statuses' descriptions: QC_STATUS_MAP(X) X(NAME, value, "description") ...
    toks = macros.get("QC_STATUS_MAP")
    if not toks:
        raise HeaderError("QC_STATUS_MAP not found")
    status_docs, i = {}, 3
    while i < len(toks):
        end = toks.index(")", i) if ")" in toks[i:] else len(toks) - 1
        args = _split_commas(toks[i + 2:end])
        if toks[i:i + 2] != [toks[1], "("] or len(args) != 3 or not args[2][0].startswith('"'):
            raise HeaderError(f"QC_STATUS_MAP: cannot read '{_join(toks[i:end + 1])}'")
        status_docs["QC_" + args[0][0]] = args[2][0][1:-1]
        i = end + 1

    enums: List[Enum] = []
    structs: List[Struct] = []
    handles: List[str] = []
    functions: List[Function] = []
    for c in decls:
        experimental = c.spelling not in stable
        if c.kind == K.FUNCTION_DECL and not c.is_definition():
            if not any(a.kind == K.VISIBILITY_ATTR for a in c.get_children()):
                raise HeaderError(f"{c.spelling} is declared without QC_API")
            if c.type.kind != T.FUNCTIONPROTO or c.type.is_function_variadic():
                raise HeaderError(f"{c.spelling}: needs a prototype with fixed parameters")
            params = []
            for n, a in enumerate(c.get_arguments(), 1):
                if not a.spelling:
                    raise HeaderError(f"{c.spelling}: parameter {n} has no name")
                t = a.type  # an array parameter is a pointer
                ctype = (_canon_type(t.element_type.spelling) + "*"
                         if t.kind in (T.INCOMPLETEARRAY, T.CONSTANTARRAY) else _canon_type(t.spelling))
                params.append(Param(ctype, a.spelling))
            functions.append(Function(c.spelling, _canon_type(c.result_type.spelling), params, experimental))
            continue
        if c.kind != K.TYPEDEF_DECL:
            continue
        canon = c.underlying_typedef_type.get_canonical()
        decl = canon.get_declaration()
        if canon.kind == T.ENUM:
            items = []
            for e in decl.get_children():
                if not list(e.get_children()):
                    raise HeaderError(f"{e.spelling} has no explicit value (qc.h pins enum values)")
                doc = _doc(e, lines)
                if decl.spelling == "qc_status":
                    if e.spelling not in status_docs:
                        raise HeaderError(f"{e.spelling} is not in QC_STATUS_MAP")
                    doc = status_docs[e.spelling]
                items.append(Enumerator(e.spelling, e.enum_value, doc))
            enums.append(Enum(decl.spelling, c.spelling, items, experimental))
        elif canon.kind == T.RECORD and decl.is_definition():
            fields = []
            for f in decl.get_children():
                t, array = f.type, None
                if t.kind == T.CONSTANTARRAY:
                    t, array = t.element_type, t.element_count
                fields.append(Field(_canon_type(t.spelling), f.spelling, array, _doc(f, lines)))
            structs.append(Struct(decl.spelling, c.spelling, fields, experimental=experimental))
        elif (canon.kind == T.POINTER and canon.get_pointee().kind == T.RECORD
              and not canon.get_pointee().get_declaration().is_definition()):
            handles.append(c.spelling)  # typedef struct qc_comm_s* qc_comm_t;
    if not any(e.tag == "qc_status" for e in enums):
        raise HeaderError("enum qc_status not found")

    h = Header(version, enums, structs, handles, functions)
    for macro, toks in macros.items():
        m = re.fullmatch(r"QC_(\w+)_INIT", macro)
        if not m:
            continue
        s = h.struct(f"qc_{m.group(1).lower()}_t")
        if s is None or toks[:1] != ["{"] or toks[-1:] != ["}"]:
            raise HeaderError(f"{macro}: not a {{...}} initializer of a struct qc_{m.group(1).lower()}_t")
        values = [_join(v) for v in _split_commas(toks[1:-1])]
        if len(values) != len(s.fields):
            raise HeaderError(f"{macro}: {len(values)} values for {len(s.fields)} fields of {s.typedef}")
        s.init_macro = macro
        s.defaults = {f.name: v for f, v in zip(s.fields, values)}
    return h
