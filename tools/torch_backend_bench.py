"""Time dist.all_reduce over the torch.distributed backend "qc" against gloo.

    GLOO_SOCKET_IFNAME=lo PYTHONPATH=<build>/bindings/python \\
        torchrun --standalone --nproc_per_node 4 tools/torch_backend_bench.py BACKEND CODEC NUMEL

BACKEND: "gloo" or "cpu:qc"; CODEC: "none" or a qc codec for the layers
"allreduce:*" (4 bits, min_compress_bytes 0). Rank 0 prints the median of 20
timed calls (after 5 untimed) on NUMEL float32 values; every call is preceded
by a barrier so that ranks start together.
"""

import statistics
import sys
import time

import torch
import torch.distributed as dist

import qc
import qc.torch as qct


def main() -> None:
    backend, codec, numel = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if backend.endswith("qc") and codec != "none":
        qct.set_backend_policy("allreduce:*", qc.Policy(codec=codec, bits=4, min_compress_bytes=0))
    dist.init_process_group(backend)
    torch.set_num_threads(1)
    x = torch.randn(numel)
    times = []
    for _ in range(25):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
        x.div_(dist.get_world_size())
    if dist.get_rank() == 0:
        print(f"{backend} codec={codec} numel={numel}: median {statistics.median(times[5:]) * 1e3:.1f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
