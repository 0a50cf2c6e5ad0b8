#!/usr/bin/python3
"""Plot qc-perf --json output.

Usage: tools/plot_perf.py OUT_PREFIX FILE.json [FILE.json ...]
         [--algo sra] [--op allreduce] [--title TEXT]

--op picks one op (allreduce, alltoall, reduce_scatter, allgather,
broadcast). Writes
  OUT_PREFIX-busbw.png    busbw (GB/s) vs size per rank, one line per
                          (codec, algo); the op's MPI baseline (algo "mpi",
                          MPI_Allreduce, MPI_Reduce_scatter_block, ..., from
                          --transport mpi runs) dashed in black
  OUT_PREFIX-speedup.png  speedup over the plain MPI call vs size, one line
                          per (codec, algo); only when the rows have a speedup
                          (--transport mpi); a dotted line at 1x

Several JSON files are merged (e.g. one per codec setting). Rows that failed
or are n/a are left out. --algo keeps only those algorithms (comma
separated); the baseline rows are always kept. Needs matplotlib (Debian:
apt-get install python3-matplotlib).
"""
import argparse
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return str(n)


def load(paths, op, algos):
    rows = []
    for path in paths:
        with open(path) as f:
            for r in json.load(f):
                if r.get("op") != op or r.get("na") or r.get("time_us") is None:
                    continue
                if algos and not r.get("baseline") and r.get("algo") not in algos:
                    continue
                rows.append(r)
    return rows


def series(rows, key):
    """(label -> sorted [(size, value)]); the baseline's label is its MPI call's
    name (its codec field, e.g. 'MPI_Allreduce')."""
    out = collections.defaultdict(dict)
    for r in rows:
        v = r.get(key)
        if v is None:
            continue
        label = r["codec"] if r.get("baseline") else f"{r['codec']} {r['algo']}"
        out[label][r["size"]] = v  # a later file wins for the same size
    return {k: sorted(v.items()) for k, v in out.items()}


def plot(data, ylabel, title, path, logy, ref=None):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label in sorted(data, key=lambda s: (not s.startswith("MPI_"), s)):
        pts = data[label]
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        if label.startswith("MPI_"):
            ax.plot(xs, ys, "k--", marker="s", label=label, linewidth=2)
        else:
            ax.plot(xs, ys, marker="o", label=label)
    if ref is not None:
        ax.axhline(ref, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    sizes = sorted({p[0] for pts in data.values() for p in pts})
    ax.set_xticks(sizes)
    ax.set_xticklabels([human(s) for s in sizes], rotation=30)
    ax.set_xlabel("size per rank")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix")
    ap.add_argument("json", nargs="+")
    ap.add_argument("--algo", default="", help="comma separated algorithms to keep")
    ap.add_argument("--op", default="allreduce")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    algos = set(x for x in a.algo.split(",") if x)
    rows = load(a.json, a.op, algos)
    if not rows:
        sys.exit("plot_perf.py: no rows to plot")
    first = rows[0]
    title = a.title or f"qc-perf {a.op}, {first.get('nranks')} ranks, {first.get('transport')}"
    plot(series(rows, "busbw"), "busbw (GB/s)", title, a.prefix + "-busbw.png", True)
    sp = series([r for r in rows if not r.get("baseline")], "speedup")
    if sp:
        mpi = next((r["codec"] for r in rows if r.get("baseline")), "MPI")
        plot(sp, f"speedup over {mpi} (x)", title, a.prefix + "-speedup.png", True, ref=1.0)


if __name__ == "__main__":
    main()
