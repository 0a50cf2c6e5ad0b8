#!/usr/bin/env bash
# abi_dump.sh LIBRARY INCLUDE_DIR OUT.abi
# The ABI of libqc as the guard sees it: exported qc_* functions and the
# types of qc.h they reach (abidw from abigail-tools, DWARF of a -g build),
# without the opaque handle types and without machine-specific paths.
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '2,5p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
abidw --exported-interfaces-only --headers-dir "$2" --drop-private-types \
  --no-corpus-path --no-comp-dir-path --drop-undefined-syms \
  --suppressions "$here/opaque_handles.supp" "$1" >"$3.tmp"
# Source locations are informative only; strip the checkout's path so the
# baseline does not depend on where it was made.
sed -e "s|filepath='[^']*/include/|filepath='include/|g" \
    -e "s|filepath='[^']*/src/|filepath='src/|g" "$3.tmp" >"$3"
rm -f "$3.tmp"
