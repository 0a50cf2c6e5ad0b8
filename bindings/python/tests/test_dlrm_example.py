"""examples/dlrm (paper 000's DLRM on emulated nodes and on real ranks): the
synthetic data is a function of its seeds, the alltoall layout moves every
lookup to the right node and back (exact with codec none), the quantized
exchange stays within the minmax bound, a tiny training run (4 nodes, a few
steps) keeps its replicas equal and lowers its loss, and the same run on 4
processes under torchrun ends where the emulation ends.

Needs torch >= 2; CTest runs it with QC_TORCH2_PYTHON, CI in
its torch stage.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
qc = pytest.importorskip("qc")
if not hasattr(qc, "emulate_alltoall"):
    pytest.skip("the qc extension is not built", allow_module_level=True)

DLRM = Path(__file__).resolve().parents[3] / "examples" / "dlrm"
sys.path.insert(0, str(DLRM))
import ctr_data  # noqa: E402
import emulated  # noqa: E402
import hybrid  # noqa: E402


@pytest.fixture(scope="module")
def teacher():
    return ctr_data.Teacher(ctr_data.DataSpec(max_rows=300, seed=5))


def test_data_is_a_function_of_its_seeds(teacher):
    a = teacher.batch(500, [3, 1])
    b = ctr_data.Teacher(ctr_data.DataSpec(max_rows=300, seed=5)).batch(500, [3, 1])
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    c = teacher.batch(500, [3, 2])
    assert not np.array_equal(a[1], c[1])
    dense, sparse, labels, p = teacher.batch(20000, 9)
    assert dense.shape == (20000, ctr_data.N_DENSE) and sparse.shape == (20000, ctr_data.N_SPARSE)
    assert (sparse >= 0).all() and (sparse < np.array(teacher.spec.rows)).all()
    assert abs(labels.mean() - teacher.spec.ctr) < 0.02
    assert teacher.bayes_accuracy(p) > max(labels.mean(), 1 - labels.mean()) + 0.02


@pytest.mark.parametrize("nodes,batch", [(1, 8), (3, 12), (4, 32), (32, 64)])
def test_alltoall_layout_moves_every_lookup_exactly(nodes, batch):
    a2a = emulated.Alltoall(nodes, batch)
    exact = qc.Policy(codec="none")
    emb = torch.randn(batch, ctr_data.N_SPARSE, hybrid.DIM)
    assert torch.equal(a2a.forward(emb, exact), emb)
    assert torch.equal(a2a.backward(emb, exact), emb)
    assert a2a.calls == {hybrid.A2A_FORWARD: 1, hybrid.A2A_BACKWARD: 1}


def test_quantized_alltoall_is_within_the_rowwise_minmax_bound():
    nodes, batch, bits = 4, 32, 4
    a2a = emulated.Alltoall(nodes, batch)
    emb = torch.randn(batch, ctr_data.N_SPARSE, hybrid.DIM)
    policy = hybrid.row_policy(bits, hybrid.DIM)
    for got in (a2a.forward(emb, policy), a2a.backward(emb, policy)):
        assert not torch.equal(got, emb)
        step = (emb.amax(-1, keepdim=True) - emb.amin(-1, keepdim=True)) / (2**bits - 1)
        assert ((got - emb).abs() <= step / 2 * (1 + 1e-5) + 1e-7).all()


TINY = ["--batch", "64", "--steps", "40", "--width", "0.1", "--max-rows", "300", "--test-size", "2000",
        "--a2a", "4,2", "--allreduce", "ring:4:ec", "--layers", "all", "--log-every", "1", "--lr", "0.5",
        "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_emulated():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun worker
    try:
        return emulated.train(emulated.parser().parse_args(["--nodes", "4"] + TINY))
    finally:
        torch.set_num_threads(threads)


def test_tiny_training_keeps_replicas_equal_and_lowers_the_loss(tiny_emulated):
    res = tiny_emulated
    assert res["replicas_agree"]
    assert len(res["quantized_tensors"]) == 14
    losses = [l for _, l in res["train_loss"]]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    assert 0.5 < res["test_accuracy"] <= 1.0


def test_cli_rejects_bad_widths():
    with pytest.raises(SystemExit):
        emulated.parser().parse_args(["--a2a", "4,16"])
    with pytest.raises(SystemExit):
        emulated.parser().parse_args(["--allreduce", "tree:4"])


def test_real_ranks_under_torchrun_end_where_the_emulation_ends(tiny_emulated):
    from conftest import torchrun_result

    res, _ = torchrun_result([DLRM / "distributed.py"] + TINY)
    assert res["ranks"] == 4 and res["replicas_agree"], res
    assert res["wire_bytes_per_step"] > 0
    losses = [l for _, l in res["train_loss"]]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    # The emulation computes what the ranks compute, bit for bit: qc's
    # emulate_* are the real collectives' arithmetic, and both take the
    # gradients with hybrid.node_gradients on one thread.
    assert res["test_loss"] == tiny_emulated["test_loss"]
    assert res["test_accuracy"] == tiny_emulated["test_accuracy"]


def test_tables_delta_q_pairs_seeds_with_their_baseline():
    import tables

    cfg = emulated.parser().parse_args(["--nodes", "4"] + TINY)

    def rec(a2a, allreduce, seed, acc):
        flags = TINY + ["--nodes", "4", "--a2a", a2a, "--allreduce", allreduce, "--seed", str(seed)]
        r = emulated.config_record(emulated.parser().parse_args(flags), cfg.nodes)
        return dict(r, test_accuracy=acc)

    runs = [rec("32,32", "fp32", 1, 0.80), rec("32,32", "fp32", 2, 0.50),
            rec("4,2", "fp32", 1, 0.76), rec("4,2", "fp32", 2, 0.55),
            rec("32,32", "ring:4:ec", 1, 0.80)]
    dq = tables.delta_q(runs)
    d, seeds, base = dq[(4, (4, 2), "fp32")]
    assert seeds == 2 and base == pytest.approx(0.65)
    assert d == pytest.approx((100 * (0.76 - 0.80) / 0.80 + 100 * (0.55 - 0.50) / 0.50) / 2)
    assert dq[(4, (32, 32), "ring:4:ec")][:2] == (0.0, 1)
    assert len(tables.configs(3, [32, 64])) == 2 + 2 * 8


def test_table3_series_puts_ours_and_the_papers_numbers_by_bits():
    import tables

    dq = {(32, (32, 32), "ring:8"): (0.05, 4, 0.81), (32, (32, 32), "ring:2"): (-0.4, 4, 0.81),
          (32, (32, 32), "rd:2:ec"): (-0.1, 3, 0.81), (7, (32, 32), "ring:4"): (-1.0, 2, 0.8),
          (32, (4, 2), "fp32"): (0.01, 4, 0.81)}  # Table 2's: not on this plot
    series = tables.table3_series(dq)
    assert sorted(series) == [7, 32]
    assert sorted(series[32]) == ["rd:ec", "ring"]
    assert series[32]["ring"]["ours"] == [(8, 0.05), (2, -0.4)]
    # The paper's row at N = 32, every width it reports.
    assert series[32]["ring"]["paper"] == [(b, tables.PAPER_T3[f"ring:{b}"][0]) for b in (8, 4, 2)]
    assert series[32]["rd:ec"] == {"ours": [(2, -0.1)],
                                   "paper": [(2, tables.PAPER_T3["rd:2:ec"][0])]}
    # No paper numbers for an N the paper did not run.
    assert series[7] == {"ring": {"ours": [(4, -1.0)], "paper": []}}


def test_tables_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    import json

    import tables

    cfg = emulated.parser().parse_args(["--nodes", "4"] + TINY)
    runs = tmp_path / "runs.jsonl"
    with open(runs, "w") as f:
        for allreduce, acc in (("fp32", 0.80), ("ring:4", 0.79), ("rd:4:ec", 0.81)):
            flags = TINY + ["--nodes", "4", "--a2a", "32,32", "--allreduce", allreduce,
                            "--seed", "1"]
            rec = emulated.config_record(emulated.parser().parse_args(flags), cfg.nodes)
            f.write(json.dumps(dict(rec, test_accuracy=acc)) + "\n")
    out = tmp_path / "t3.png"
    assert tables.main(["plot", str(runs), str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tables.main(["plot", str(tmp_path / "none.jsonl"), str(tmp_path / "x.png")]) == 1
