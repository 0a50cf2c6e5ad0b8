#!/usr/bin/env bash
# check_detects_removal.sh LIBRARY INCLUDE_DIR
# Shows that the guard can fail: a dump of LIBRARY with qc_allreduce taken
# out stands for a library that dropped a function; check_abi.sh-style
# comparison against the real dump must report an incompatible change.
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n '2,5p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$here/abi_dump.sh" "$1" "$2" "$work/old.abi"
grep -q "name='qc_allreduce'" "$work/old.abi" || { echo "qc_allreduce not in the dump" >&2; exit 1; }
# Drop qc_allreduce's ELF symbol and its <function-decl>...</function-decl>.
awk '
  /<elf-symbol name=.qc_allreduce. / { next }
  /<function-decl name=.qc_allreduce. / { skip = 1 }
  skip { if (/<\/function-decl>/) skip = 0; next }
  { print }' "$work/old.abi" >"$work/new.abi"
! grep -q "name='qc_allreduce'" "$work/new.abi" || { echo "doctoring failed" >&2; exit 1; }
rc=0
abidiff --suppressions "$here/opaque_handles.supp" "$work/old.abi" "$work/new.abi" >"$work/report" 2>&1 || rc=$?
cat "$work/report"
if (( rc & 8 )) && grep -q "qc_allreduce" "$work/report"; then
  echo "check_detects_removal.sh: a removed qc_allreduce is reported as incompatible (status $rc)"
  exit 0
fi
echo "check_detects_removal.sh: abidiff did not report the removal as incompatible (status $rc)" >&2
exit 1
