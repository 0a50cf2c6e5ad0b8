"""Paper 000's Tables 2-4 with qc: run the emulated-node configurations
(emulated.py) for several seeds, then report δq next to the paper's numbers.

    python tables.py run --table 2 --out runs.jsonl [--seeds 1,2,3,4] [training flags]
    python tables.py run --table 3 --nodes 32,64,128 --out runs.jsonl
    python tables.py report runs.jsonl            # markdown tables
    python tables.py plot runs.jsonl out.png      # δq against bits, one line per N

`run` appends one JSON line per finished run to --out and skips the runs
already there (same configuration and seed), so it can be stopped and
resumed. Every table needs the fp32 baseline of each (N, seed); `run` adds
it. δq = the mean over seeds of 100 (acc_q - acc_fp32) / acc_fp32, the
paper's Equation 2, seeds paired (the same initialisation and data).
"""

import argparse
import json
import os
import sys
import time

import emulated

# The paper's numbers (§4), for the report.
PAPER_T2 = {(8, 8): 0.00096, (8, 4): -0.00380, (4, 8): 0.00571, (4, 4): -0.00222,
            (4, 2): 0.01651, (2, 4): -0.05674, (2, 2): -0.06339}
T3_ROWS = ["ring:8", "ring:4", "ring:4:ec", "rd:4", "ring:2", "ring:2:ec", "rd:2", "rd:2:ec"]
PAPER_T3 = {"ring:8": (0.00222, -0.01332, -0.01997), "ring:4": (-0.30503, -0.87948, -1.78011),
            "ring:4:ec": (-0.00603, -0.00571, -0.00380), "rd:4": (-0.00031, 0.00191, -0.01585),
            "ring:2": (-0.93560, -1.37794, -4.91551), "ring:2:ec": (-2.92281, -6.32555, -6.32555),
            "rd:2": (-0.23143, -0.44602, -0.48192), "rd:2:ec": (-0.20638, -0.27524, -0.29675)}
T4_ROWS = [("ring:8", (4, 4)), ("ring:4:ec", (4, 4)), ("ring:4:ec", (4, 2)), ("rd:4", (4, 4)),
           ("rd:4:ec", (4, 4)), ("rd:4:ec", (4, 2))]
PAPER_T4 = {("ring:8", (4, 4)): (0.00031, -0.01395, -0.02631),
            ("ring:4:ec", (4, 4)): (-0.01109, -0.00444, -0.00190),
            ("ring:4:ec", (4, 2)): (0.01902, -1.58532, -0.01553),
            ("rd:4", (4, 4)): (-0.01458, -0.01226, -0.03678),
            ("rd:4:ec", (4, 4)): (-0.00950, -0.00666, -0.02473),
            ("rd:4:ec", (4, 2)): (-0.02409, -0.03170, -0.02874)}
PAPER_NODES = (32, 64, 128)


def configs(table, nodes):
    """(nodes, a2a, allreduce text) of a table; the fp32 baselines first."""
    out = [(n, (32, 32), "fp32") for n in nodes]
    if table == 2:
        out += [(n, (f, b), "fp32") for n in nodes for f in (8, 4, 2) for b in (8, 4, 2)]
    elif table == 3:
        out += [(n, (32, 32), row) for n in nodes for row in T3_ROWS]
    else:
        out += [(n, a2a, row) for n in nodes for row, a2a in T4_ROWS]
    return out


def key(rec):
    """A run's identity: everything but its results."""
    ar = rec["allreduce"]
    ar_text = "fp32" if ar is None else (("ring" if ar["algorithm"] == "ring" else "rd")
                                          + f":{ar['bits']}" + (":ec" if ar["ec"] else ""))
    return (rec["nodes"], tuple(rec["a2a"]), ar_text, rec["seed"], rec["steps"], rec["batch"],
            rec["lr"], rec["width"], rec["max_rows"], rec["layers"], rec["data_seed"])


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cmd_run(args, train_flags):
    done = {key(r) for r in load(args.out)}
    nodes = [int(x) for x in args.nodes.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    todo = [(n, a2a, ar, s) for n, a2a, ar in configs(args.table, nodes) for s in seeds]
    for i, (n, a2a, ar, seed) in enumerate(todo):
        flags = train_flags + ["--nodes", str(n), "--a2a", f"{a2a[0]},{a2a[1]}", "--allreduce", ar,
                               "--seed", str(seed), "--train-seed", str(seed)]
        cfg = emulated.parser().parse_args(flags)
        rec_key = key(dict(emulated.config_record(cfg, n)))
        if rec_key in done:
            continue
        t0 = time.time()
        rec = emulated.train(cfg)
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        done.add(rec_key)
        print(f"[{i + 1}/{len(todo)}] N={n} a2a={a2a} allreduce={ar} seed={seed}: "
              f"acc {rec['test_accuracy']:.5f} ({time.time() - t0:.0f} s)", flush=True)


def delta_q(records):
    """(N, a2a, allreduce) -> (δq, seeds, the fp32 accuracy's mean) over the
    seeds that have both the run and its baseline."""
    base = {}
    for r in records:
        k = key(r)
        if k[1] == (32, 32) and k[2] == "fp32":
            base[(k[0],) + k[3:]] = r["test_accuracy"]
    groups = {}
    for r in records:
        k = key(r)
        b = base.get((k[0],) + k[3:])
        if b is None:
            continue
        groups.setdefault(k[:3], []).append((100.0 * (r["test_accuracy"] - b) / b, b))
    return {k: (sum(d for d, _ in v) / len(v), len(v), sum(b for _, b in v) / len(v))
            for k, v in groups.items()}


def fmt(x):
    return "-" if x is None else f"{x:+.4f}"


def cmd_report(args):
    dq = delta_q(load(args.runs))
    print("Table 2 (alltoall f/b, allreduce fp32): δq %, ours (seeds) | paper\n")
    print("| N | forward | backward | ours | seeds | paper |\n| --- | --- | --- | --- | --- | --- |")
    for (n, a2a, ar), (d, s, _) in sorted(dq.items()):
        if ar == "fp32" and a2a != (32, 32):
            print(f"| {n} | uint{a2a[0]} | uint{a2a[1]} | {fmt(d)} | {s} | {fmt(PAPER_T2.get(a2a))} |")
    nodes = sorted({k[0] for k in dq})
    print("\nTable 3 (allreduce, alltoall fp32): δq %, ours | paper\n")
    print("| allreduce | " + " | ".join(f"N={n}" for n in nodes) + " |")
    print("| --- |" + " --- |" * len(nodes))
    for row in T3_ROWS:
        cells = []
        for n in nodes:
            got = dq.get((n, (32, 32), row))
            paper = PAPER_T3[row][PAPER_NODES.index(n)] if n in PAPER_NODES else None
            cells.append(f"{fmt(got[0]) if got else '-'} / {fmt(paper)}")
        print(f"| {row} | " + " | ".join(cells) + " |")
    print("\nTable 4 (both): δq %, ours / paper\n")
    print("| allreduce; alltoall | " + " | ".join(f"N={n}" for n in nodes) + " |")
    print("| --- |" + " --- |" * len(nodes))
    for row, a2a in T4_ROWS:
        cells = []
        for n in nodes:
            got = dq.get((n, a2a, row))
            paper = PAPER_T4[(row, a2a)][PAPER_NODES.index(n)] if n in PAPER_NODES else None
            cells.append(f"{fmt(got[0]) if got else '-'} / {fmt(paper)}")
        print(f"| {row}; (f{a2a[0]}, b{a2a[1]}) | " + " | ".join(cells) + " |")
    base = sorted({(k[0], v[2]) for k, v in dq.items() if k[1] == (32, 32) and k[2] == "fp32"})
    print("\nfp32 test accuracy (mean over seeds): " + ", ".join(f"N={n}: {a:.5f}" for n, a in base))


VARIANTS = (("ring", ""), ("ring", ":ec"), ("rd", ""), ("rd", ":ec"))


def table3_series(dq):
    """Table 3's points for the plot: {N: {variant: {"ours": [(bits, δq)],
    "paper": [(bits, δq)]}}} for every N with runs; a variant is
    "ring", "ring:ec", "rd" or "rd:ec", bits 8, 4, 2 where there are numbers
    (the paper has no uint8 RD or EC rows)."""
    out = {}
    for n in sorted({k[0] for k in dq}):
        per_n = {}
        for algo, ec in VARIANTS:
            ours, paper = [], []
            for bits in (8, 4, 2):
                row = f"{algo}:{bits}{ec}"
                got = dq.get((n, (32, 32), row))
                if got:
                    ours.append((bits, got[0]))
                if row in PAPER_T3 and n in PAPER_NODES:
                    paper.append((bits, PAPER_T3[row][PAPER_NODES.index(n)]))
            if ours:
                per_n[algo + ec] = {"ours": ours, "paper": paper}
        if per_n:
            out[n] = per_n
    return out


def cmd_plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = table3_series(delta_q(load(args.runs)))
    if not series:
        print(f"{args.runs}: no Table 3 runs with their fp32 baselines", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 4.2), sharey=True,
                             squeeze=False)
    colors = {"ring": "C0", "ring:ec": "C1", "rd": "C2", "rd:ec": "C3"}
    for ax, (n, per_n) in zip(axes[0], series.items()):
        for variant, pts in per_n.items():
            ax.plot(*zip(*pts["ours"]), "-o", color=colors[variant])
            if pts["paper"]:
                ax.plot(*zip(*pts["paper"]), ":", marker="x", color=colors[variant])
        ax.axhline(-0.02, color="gray", lw=0.8, ls="--")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_xticks([2, 4, 8])
        ax.set_xlabel("allreduce bits per value")
        ax.set_title(f"N = {n}")
    axes[0][0].set_ylabel("δq, % change of test accuracy vs fp32")
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, lw=2, label=v.replace(":ec", " EC")) for v, c in colors.items()]
    handles += [Line2D([], [], color="k", ls="-", marker="o", label="qc emulation"),
                Line2D([], [], color="k", ls=":", marker="x", label="paper")]
    axes[0][0].legend(handles=handles, fontsize=7, loc="lower right")
    fig.suptitle("DLRM, quantized allreduce, alltoall fp32 (paper 000 Table 3); dashed: the "
                 "paper's -0.02 threshold", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a table's configurations (other flags go to emulated.py)")
    run.add_argument("--table", type=int, choices=(2, 3, 4), required=True)
    run.add_argument("--nodes", default="32", help="N values, comma separated (default 32)")
    run.add_argument("--seeds", default="1,2,3,4")
    run.add_argument("--out", required=True, help="JSON lines, appended")
    rep = sub.add_parser("report", help="markdown tables of δq")
    rep.add_argument("runs")
    plot = sub.add_parser("plot", help="δq against bits (Table 3)")
    plot.add_argument("runs")
    plot.add_argument("out")
    args, rest = ap.parse_known_args(argv)
    if args.cmd == "run":
        return cmd_run(args, rest)
    if rest:
        ap.error(f"unknown arguments {rest}")
    return cmd_report(args) if args.cmd == "report" else cmd_plot(args)


if __name__ == "__main__":
    sys.exit(main())
