#!/usr/bin/env bash
# check_abi.sh BASELINE.abi LIBRARY INCLUDE_DIR
# Fails when LIBRARY breaks the ABI recorded in BASELINE (abidiff reports an
# incompatible change: a function removed or its signature changed, a type
# changed in a way old callers see). Compatible changes (a new function, a
# field appended to a struct that carries struct_size) are printed and pass.
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '2,6p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$here/abi_dump.sh" "$2" "$3" "$work/current.abi"
rc=0
abidiff --suppressions "$here/opaque_handles.supp" "$1" "$work/current.abi" >"$work/report" 2>&1 || rc=$?
cat "$work/report"
# abidiff's exit status is a bit mask: 1 error, 2 usage error,
# 4 ABI change, 8 incompatible ABI change.
if (( rc & 3 )); then
  echo "check_abi.sh: abidiff failed (status $rc)" >&2
  exit 1
fi
if (( rc & 8 )); then
  echo "check_abi.sh: INCOMPATIBLE ABI change against $(basename "$1")" >&2
  exit 1
fi
if (( rc & 4 )); then
  echo "check_abi.sh: compatible ABI changes against $(basename "$1") (listed above)"
else
  echo "check_abi.sh: the ABI is the one recorded in $(basename "$1")"
fi
