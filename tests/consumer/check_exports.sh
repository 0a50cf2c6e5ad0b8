#!/usr/bin/env bash
# ABI surface of libqc: the dynamic symbol table holds qc_* symbols only,
# they are exactly the functions qc.h declares with QC_API, and the SONAME is
# the expected one.
#
# usage: check_exports.sh LIBQC EXPECTED_SONAME [QC_H]
#   LIBQC            the built library ($<TARGET_FILE:qc>)
#   EXPECTED_SONAME  e.g. libqc.so.1
#   QC_H             include/qc.h; when given, exports and declarations must match
#
# The only non-qc_ entries tolerated are the version-definition symbols that a
# linker version script creates (nm shows them as "A QC_0"): they name the
# symbol version node of src/qc.map and are not code or data. Every other
# defined dynamic symbol must start with qc_.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi
lib=$1
expected_soname=$2
header=${3:-}
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

[[ -f $lib ]] || { echo "FAIL: no such library: $lib" >&2; exit 1; }
echo "library: $lib"

# ---- SONAME -----------------------------------------------------------------
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [[ $soname == "$expected_soname" ]]; then
  echo "SONAME $soname"
else
  fail "SONAME is '${soname:-<none>}', expected '$expected_soname'"
fi

# ---- exported symbols ---------------------------------------------------------
# Version definitions of the library (minus the base entry, which is the SONAME).
mapfile -t version_nodes < <(readelf -V --wide "$lib" |
  awk '/Version definition section/ {d=1; next} /Version (needs|symbols) section/ {d=0}
       d && /Name:/ && !/BASE/ {for (i = 1; i <= NF; ++i) if ($i == "Name:") print $(i + 1)}' |
  sort -u)
echo "version nodes: ${version_nodes[*]:-<none>}"

# name type, with any @VERSION / @@VERSION suffix split off
mapfile -t rows < <(nm -D --defined-only --format=posix "$lib" | awk '{print $1, $2}')
[[ ${#rows[@]} -gt 0 ]] || fail "nm -D --defined-only lists no symbols"

exported=()
for row in "${rows[@]}"; do
  sym=${row% *}
  type=${row##* }
  name=${sym%%@*}
  if [[ $name == qc_* ]]; then
    exported+=("$name")
    if [[ $sym == *@* && ${#version_nodes[@]} -gt 0 ]]; then
      ver=${sym##*@}
      [[ " ${version_nodes[*]} " == *" $ver "* ]] || fail "$sym: version '$ver' is not defined by the library"
    fi
    continue
  fi
  if [[ $type == A && " ${version_nodes[*]:-} " == *" $name "* ]]; then
    continue  # the version node itself (e.g. "QC_0 A")
  fi
  fail "exported symbol outside the qc_ namespace: $sym (type $type)"
done
if [[ ${#exported[@]} -gt 0 ]]; then
  mapfile -t exported < <(printf '%s\n' "${exported[@]}" | sort -u)
else
  fail "no qc_ symbols are exported"
fi
echo "${#exported[@]} qc_ symbols exported"

# ---- exports == declarations of qc.h -----------------------------------------
if [[ -n $header ]]; then
  [[ -f $header ]] || { echo "FAIL: no such header: $header" >&2; exit 1; }
  # QC_API <return type> qc_name(   -- the name is on the QC_API line
  mapfile -t declared < <(grep -E '^[[:space:]]*QC_API[[:space:]]' "$header" |
    grep -oE '\bqc_[A-Za-z0-9_]+[[:space:]]*\(' | sed -E 's/[[:space:]]*\($//' | sort -u)
  [[ ${#declared[@]} -gt 0 ]] || fail "found no QC_API declarations in $header"
  echo "${#declared[@]} functions declared with QC_API in $(basename "$header")"
  while read -r name; do
    fail "declared in qc.h but not exported: $name"
  done < <(comm -23 <(printf '%s\n' "${declared[@]}") <(printf '%s\n' "${exported[@]}"))
  while read -r name; do
    fail "exported but not declared in qc.h: $name"
  done < <(comm -13 <(printf '%s\n' "${declared[@]}") <(printf '%s\n' "${exported[@]}"))
fi

if [[ $status -eq 0 ]]; then
  echo "PASS: exports and SONAME"
fi
exit "$status"
