#!/usr/bin/env bash
# Run every libFuzzer target of tests/fuzz for SECONDS each (docs/reliability.md).
#
#   bash tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS [TARGET...]
#
# BUILD_DIR is a build configured with -DQC_BUILD_FUZZERS=ON and built (the
# targets and their seed corpora, BUILD_DIR/tests/fuzz/seeds/<target>). Each
# target starts from its seeds with a fresh working corpus
# (BUILD_DIR/tests/fuzz/work/<target>, new inputs go there) and writes crash,
# leak, timeout and OOM reproducers to BUILD_DIR/tests/fuzz/artifacts/<target>/
# and its log to BUILD_DIR/tests/fuzz/logs/<target>.log. One summary line per
# target; the exit status is non-zero if any target crashed, leaked, timed
# out, ran out of memory or did not run.
#
# Reproduce a failure: BUILD_DIR/tests/fuzz/<target> <reproducer file>
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$1
seconds=$2
shift 2
case $seconds in
  '' | *[!0-9]*) echo "$0: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=(fuzz_decode fuzz_error_buffer_load fuzz_params fuzz_policy_pattern)
fi

dir=$build/tests/fuzz
# Every sanitizer report is fatal and symbolized; libFuzzer checks leaks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

failed=0
for t in "${targets[@]}"; do
  exe=$dir/$t
  seeds=$dir/seeds/$t
  work=$dir/work/$t
  artifacts=$dir/artifacts/$t
  log=$dir/logs/$t.log
  if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
    echo "$t: FAIL: $exe or its seeds $seeds missing (configure with -DQC_BUILD_FUZZERS=ON and build)"
    failed=1
    continue
  fi
  rm -rf "$work" "$artifacts"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  # -timeout: one input taking longer is a failure (a hang); -rss_limit_mb: OOM.
  "$exe" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  # The last status line: "#N  DONE|pulse|NEW ... cov: C ft: F corp: U/S ..."
  status_line=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status_line")
  corpus=$(find "$work" -type f | wc -l)
  crashes=$(find "$artifacts" -type f | wc -l)
  if [ "$rc" -eq 0 ] && [ "$crashes" -eq 0 ] && [ -n "$execs" ]; then
    verdict=OK
  else
    verdict=FAIL
    failed=1
  fi
  printf '%s: %s executions=%s exec/s=%s cov: %s ft: %s new_corpus_files=%s crashes=%s rc=%s log=%s\n' \
    "$t" "$verdict" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes" "$rc" "$log"
  if [ "$verdict" = FAIL ]; then
    echo "---- last lines of $log ----"
    tail -n 40 "$log"
    for f in "$artifacts"/*; do
      [ -e "$f" ] && echo "reproducer: $f (run: $exe $f)"
    done
    echo "----"
  fi
done
exit $failed
