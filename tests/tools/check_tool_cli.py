#!/usr/bin/env python3
"""Runs one qc tool and checks what it did: exit status, stdout, stderr and
the JSON it wrote (CTest, tools/*/CMakeLists.txt).

usage: check_tool_cli.py [checks] -- COMMAND [ARG...]
  --rc N                   the exit status (default 0)
  --stdout RE              stdout matches RE (re.search, multiline); repeatable
  --stderr RE              stderr matches RE; repeatable
  --stdout-equals FILE     stdout is exactly FILE's text
  --stdout-json SCHEMA     stdout is one JSON document of SCHEMA and nothing else
  --json-file PATH SCHEMA  after the run PATH holds JSON of SCHEMA (it is
                           removed first, so a stale file cannot pass)

SCHEMA is perf (qc-perf -J), codec-bench (qc-codec-bench -J) or fidelity
(qc-fidelity --json): the fields their readers rely on, in the order the
tools write them (tools/qc-perf/README.md, tools/qc-codec-bench/README.md,
docs/fidelity.md).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

PERF_ROW = [
    "op", "size", "count", "type", "algo", "codec", "time_us", "algbw", "busbw", "wire",
    "ratio", "wire_ideal", "wire_ok", "na", "error", "bound", "wrong", "replica_mismatch",
    "passed", "failure", "mpi_time_us", "speedup", "codec_us", "hidden_codec_us",
    "transport_us", "baseline", "nranks", "transport", "redop", "dtype", "codec_name", "bits",
    "bucket", "rounding", "error_feedback", "warmup", "iters", "qc_version", "date", "density",
    "nrows", "row_len"]

CODEC_BENCH_TOP = [
    "tool", "command", "date", "qc_version", "cpu", "cpu_avx2", "cpu_avx512", "compiler",
    "build_type", "auto_isa", "bytes", "count", "threads", "iters", "warmup", "statistic",
    "rounding", "memcpy_gbps", "memcpy_samples_seconds", "rows", "targets"]
CODEC_BENCH_ROW_RAN = [
    "codec", "bits", "bucket", "isa", "ran", "encode", "decode", "decode_accumulate", "dqe",
    "wire_bytes", "compression_ratio", "nmse", "max_abs_error", "bound", "over_bound",
    "differs_from_scalar", "row_memcpy_gbps"]
CODEC_BENCH_ROW_NOT_RAN = ["codec", "bits", "bucket", "isa", "ran", "why"]
CODEC_BENCH_OP = ["seconds", "gbps", "x_memcpy"]
CODEC_BENCH_TARGET = [
    "codec", "bits", "bucket", "isa", "op", "target_x_memcpy", "x_memcpy", "result"]

FIDELITY_TOP = [
    "tool", "qc_version", "command", "nranks", "count", "dtype", "redop", "bucket",
    "topk_ratio", "seed", "seed_per_call", "norm", "T", "rows", "passed"]
FIDELITY_ROW = [
    "algo", "algorithm", "codec", "codec_name", "bits", "rounding", "error_feedback", "error",
    "bookkeeping", "replica_mismatch", "passed", "seconds"]


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(what)


def keys_are(obj, keys, what):
    expect(isinstance(obj, dict), f"{what}: not an object: {obj!r}")
    expect(list(obj) == keys, f"{what}: fields {list(obj)}, expected {keys}")


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number_or_null(v):
    return v is None or is_number(v)


PERF_OPS = ("allreduce", "alltoall", "reduce_scatter", "allgather", "broadcast",
            "sparse_allreduce")
PERF_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def check_perf_sizes(i, row):
    """size, count, algbw and busbw as tools/qc-perf/README.md ("Ops") defines them."""
    op, n = row["op"], row["nranks"]
    width = PERF_DTYPE_BYTES[row["dtype"]]
    if op == "sparse_allreduce":
        # The size is the dense table; the count the rows each rank passes.
        nrows, row_len, density = row["nrows"], row["row_len"], row["density"]
        expect(row["size"] == nrows * row_len * width,
               f"row {i}: sparse size {row['size']} for {nrows} x {row_len} x {width} B")
        expect(row["count"] == math.floor(density * nrows + 0.5),
               f"row {i}: sparse nnz {row['count']} for density {density} of {nrows} rows")
    else:
        expect(row["density"] is None and row["nrows"] is None and row["row_len"] is None,
               f"row {i}: {op} has sparse fields")
        per_count = n if op in ("alltoall", "reduce_scatter") else 1
        expect(row["size"] == row["count"] * per_count * width,
               f"row {i}: {op} size {row['size']} for count {row['count']}, {n} ranks, {width} B")
    if row["algbw"] is None or row["time_us"] is None or row["time_us"] <= 0:
        return
    # nccl-tests' byte count and bus factor; the MPI row moves fp32.
    size = row["size"] // width * 4 if row["baseline"] else row["size"]
    nbytes = size * n if op == "allgather" else size
    factor = {"allreduce": 2 * (n - 1) / n, "sparse_allreduce": 2 * (n - 1) / n,
              "broadcast": 1.0}.get(op, (n - 1) / n)
    expect(close(row["algbw"] * row["time_us"] * 1e3, nbytes, 1e-6),
           f"row {i}: {op} algbw {row['algbw']} x time {row['time_us']} us is not {nbytes} B")
    expect(close(row["busbw"], row["algbw"] * factor),
           f"row {i}: {op} busbw {row['busbw']} is not algbw {row['algbw']} x {factor}")


def check_perf(doc):
    expect(isinstance(doc, list) and doc, "qc-perf JSON: not a non-empty array of rows")
    for i, row in enumerate(doc):
        keys_are(row, PERF_ROW, f"row {i}")
        expect(row["op"] in PERF_OPS, f"row {i}: op {row['op']!r}")
        for k in ("size", "count", "wrong", "replica_mismatch", "nranks", "bits", "bucket"):
            expect(isinstance(row[k], int) and not isinstance(row[k], bool),
                   f"row {i}: {k} = {row[k]!r} is not an integer")
        for k in ("time_us", "algbw", "busbw", "wire", "ratio", "wire_ideal", "error", "bound",
                  "mpi_time_us", "speedup", "codec_us", "hidden_codec_us", "transport_us"):
            expect(number_or_null(row[k]), f"row {i}: {k} = {row[k]!r}")
        expect(row["passed"] == (row["failure"] is None and not row["na"] and row["wrong"] == 0),
               f"row {i}: passed {row['passed']} vs failure {row['failure']!r}")
        # One rank sends nothing: the compression ratio is infinite, written as null;
        # the local transport has no MPI time (NaN, null).
        if row["nranks"] == 1 and row["passed"]:
            expect(row["wire"] == 0 and row["ratio"] is None,
                   f"row {i}: one rank: wire {row['wire']!r}, ratio {row['ratio']!r} (want 0, null)")
        if row["transport"] == "local":
            expect(row["mpi_time_us"] is None, f"row {i}: mpi_time_us {row['mpi_time_us']!r}")
        check_perf_sizes(i, row)


def check_codec_bench(doc):
    keys_are(doc, CODEC_BENCH_TOP, "qc-codec-bench JSON")
    expect(doc["tool"] == "qc-codec-bench", f"tool {doc['tool']!r}")
    expect(is_number(doc["memcpy_gbps"]) and doc["memcpy_gbps"] > 0, "memcpy_gbps")
    expect(doc["rows"], "no rows")
    for i, row in enumerate(doc["rows"]):
        if row.get("ran"):
            keys_are(row, CODEC_BENCH_ROW_RAN, f"row {i}")
            for op in ("encode", "decode", "decode_accumulate", "dqe"):
                if row[op] is not None:
                    keys_are(row[op], CODEC_BENCH_OP, f"row {i} {op}")
            for k in ("compression_ratio", "nmse", "max_abs_error", "bound", "row_memcpy_gbps"):
                expect(number_or_null(row[k]), f"row {i}: {k} = {row[k]!r}")
        else:
            keys_are(row, CODEC_BENCH_ROW_NOT_RAN, f"row {i}")
    for i, t in enumerate(doc["targets"]):
        keys_are(t, CODEC_BENCH_TARGET, f"target {i}")
        expect(t["result"] in ("PASS", "MISS", "n/a"), f"target {i}: result {t['result']!r}")
        expect((t["result"] == "n/a") == (t["x_memcpy"] is None),
               f"target {i}: x_memcpy {t['x_memcpy']!r} with result {t['result']}")


def check_fidelity(doc):
    keys_are(doc, FIDELITY_TOP, "qc-fidelity JSON")
    expect(doc["tool"] == "qc-fidelity", f"tool {doc['tool']!r}")
    ts = doc["T"]
    expect(ts and ts[0] == 1 and all(b == 2 * a for a, b in zip(ts, ts[1:])), f"T = {ts}")
    expect(doc["rows"], "no rows")
    for i, row in enumerate(doc["rows"]):
        keys_are(row, FIDELITY_ROW, f"row {i}")
        expect(len(row["error"]) == len(ts) and all(is_number(e) for e in row["error"]),
               f"row {i}: error {row['error']!r} for T = {ts}")
        expect((row["bookkeeping"] is None) == (not row["error_feedback"]),
               f"row {i}: bookkeeping {row['bookkeeping']!r} with error_feedback "
               f"{row['error_feedback']}")
    expect(doc["passed"] == all(r["passed"] for r in doc["rows"]), "passed vs the rows'")


SCHEMAS = {"perf": check_perf, "codec-bench": check_codec_bench, "fidelity": check_fidelity}


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--rc", type=int, default=0)
    ap.add_argument("--stdout", action="append", default=[])
    ap.add_argument("--stderr", action="append", default=[])
    ap.add_argument("--stdout-equals")
    ap.add_argument("--stdout-json", choices=SCHEMAS)
    ap.add_argument("--json-file", nargs=2, metavar=("PATH", "SCHEMA"))
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command after --")
    if a.json_file:
        if a.json_file[1] not in SCHEMAS:
            ap.error(f"unknown schema {a.json_file[1]!r}")
        if os.path.exists(a.json_file[0]):
            os.remove(a.json_file[0])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", stdin=subprocess.DEVNULL)
    try:
        expect(p.returncode == a.rc, f"exit status {p.returncode}, expected {a.rc}")
        for rx in a.stdout:
            expect(re.search(rx, p.stdout, re.M), f"stdout does not match {rx!r}")
        for rx in a.stderr:
            expect(re.search(rx, p.stderr, re.M), f"stderr does not match {rx!r}")
        if a.stdout_equals:
            with open(a.stdout_equals, encoding="utf-8") as f:
                expect(p.stdout == f.read(), f"stdout differs from {a.stdout_equals}")
        if a.stdout_json:
            try:
                doc = json.loads(p.stdout)
            except ValueError as e:
                raise Failure(f"stdout is not one JSON document: {e}")
            SCHEMAS[a.stdout_json](doc)
        if a.json_file:
            try:
                with open(a.json_file[0], encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                raise Failure(f"{a.json_file[0]}: {e}")
            SCHEMAS[a.json_file[1]](doc)
    except Failure as e:
        print(f"command: {' '.join(cmd)}\n--- stdout (tail)\n{p.stdout[-3000:]}\n"
              f"--- stderr (tail)\n{p.stderr[-3000:]}\n--- FAIL: {e}", file=sys.stderr)
        return 1
    print(f"ok: {' '.join(cmd)} (exit {p.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
