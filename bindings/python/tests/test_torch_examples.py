"""examples/torch_ddp_digits.py, examples/torch_fsdp_digits.py and
examples/torch_onebit_adam.py under torchrun
(4 ranks, a tiny MLP, a few epochs): DDP over gloo, DDP over gloo with qc's
hook, DDP over the backend "qc"; FSDP2 over gloo and over "qc". Each run must
exit 0, print its RESULT line with replicas that agree (DDP: the same parameter
digest on every rank; FSDP2: the same gathered full parameters, each rank's own
shard unchanged in them) and a mean loss that fell from the first epoch to the last.

Needs torch >= 2 (the backend "qc", FSDP2), torchrun and scikit-learn (skips
otherwise); CTest runs it with QC_TORCH2_PYTHON (bindings/python/CMakeLists.txt).
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
qc = pytest.importorskip("qc")
if not hasattr(qc, "Comm"):
    pytest.skip("the qc extension is not built", allow_module_level=True)
if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip(f"the examples' torchrun modes need torch >= 2 (this is {torch.__version__})",
                allow_module_level=True)
import torch.distributed as dist  # noqa: E402
from conftest import torchrun_result  # noqa: E402
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DDP = EXAMPLES / "torch_ddp_digits.py"
FSDP = EXAMPLES / "torch_fsdp_digits.py"
NPROC = 4
TINY = ["--hidden", "96", "--epochs", "3", "--lr", "0.1", "--quiet"]


def _run(script, args):
    if not script.exists():
        pytest.skip(f"{script} not found")
    res, out = torchrun_result([script] + args + TINY, nproc=NPROC)
    assert res["status"] == "ok" and res["ranks"] == NPROC, res
    assert res["replicas_agree"], res
    assert res["last_loss"] < res["first_loss"], res
    assert res["ms_per_step"] > 0 and res["wire_bytes_per_step"] > 0, res
    assert 0.0 <= res["test_accuracy"] <= 1.0, res
    return res, out


def test_ddp_gloo():
    res, _ = _run(DDP, ["--backend", "gloo", "--hook", "none"])
    assert (res["method"], res["wire_source"]) == ("allreduce", "formula"), res


def test_ddp_gloo_with_qc_hook():
    res, _ = _run(DDP, ["--backend", "gloo", "--hook", "qc-minmax4"])
    assert res["method"] == "qc-minmax4" and res["wire_source"] == "qc hook stats", res


def test_ddp_gloo_with_adaptive_qc_hook():
    fixed, _ = _run(DDP, ["--backend", "gloo", "--hook", "qc-minmax4"])
    res, _ = _run(DDP, ["--backend", "gloo", "--hook", "qc-minmax4", "--adapt-every", "5"])
    assert res["adapt"]["every"] == 5 and res["adapt"]["adaptations"] == res["steps"] // 5, res
    assert fixed["adapt"]["adaptations"] == 0, fixed
    # the same run, fewer bits per value once adapted (alpha 2: twice the 4-bit error allowed)
    assert res["adapt"]["bits_per_value"] < fixed["adapt"]["bits_per_value"], (res, fixed)


def test_onebit_adam_example():
    res, _ = torchrun_result([EXAMPLES / "torch_onebit_adam.py", "--method", "onebit-adam", "--hidden", "64",
                              "--epochs", "4", "--warmup", "15", "--quiet"], nproc=NPROC)
    assert res["status"] == "ok" and res["replicas_agree"] and res["ranks"] == NPROC, res
    assert res["last_loss"] < res["first_loss"], res
    # 1 bit per value after the warm-up against float32 in it
    assert res["compressed_stage_bytes_per_step"] * 20 < res["warmup_bytes_per_step"], res


def test_ddp_backend_qc(backend_compiled):
    res, _ = _run(DDP, ["--backend", "qc", "--hook", "none"])
    assert res["method"] == "backend-qc" and res["wire_source"] == "qc backend stats", res
    assert "minmax" in res["policy"], res


def test_fsdp_gloo():
    res, out = _run(FSDP, ["--backend", "gloo"])
    assert "replicas identical" in out, out[-4000:]
    assert res["own_shards_exact"], res
    assert res["wire_bytes_per_step"] == res["wire_formula_uncompressed"], res


def test_fsdp_backend_qc(backend_compiled):
    # min_compress_bytes=0: the tiny model's messages are all under qc's 16 KiB default
    res, out = _run(FSDP, ["--backend", "qc",
                           "--rs-policy", "codec=minmax,bits=4,bucket_size=128,error_feedback=1,"
                                          "min_compress_bytes=0",
                           "--ag-policy", "codec=minmax,bits=8,bucket_size=128,min_compress_bytes=0"])
    assert "replicas identical" in out, out[-4000:]
    assert res["own_shards_exact"], res
    # 4-bit gradients and 8-bit parameters send less than gloo's float32 would
    assert res["wire_bytes_per_step"] < res["wire_formula_uncompressed"], res
