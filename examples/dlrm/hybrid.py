"""What the emulated and the real DLRM runs share: the hybrid-parallel
layout of the alltoall messages, the paper's quantizer as qc policies, the
command line, and the evaluation.

Layout: table t lives on node t mod N, in slot t // N of that node (slots =
ceil(26 / N) on every node, the missing ones zero). Node m owns samples
[m B/N, (m+1) B/N) of the global batch. In the forward alltoall owner o
sends node m a block of (slots, B/N, DIM) values: its tables' lookups for
m's samples, table by table, one embedding row (DIM values, one minmax
bucket) after the other. The backward alltoall sends the gradients of the
same values the other way, in the same layout.
"""

import argparse
import math

import torch

import qc

from ctr_data import N_SPARSE, DataSpec
from dlrm_model import dense_forward, loss_sum

DIM = 16
A2A_FORWARD = "a2a.forward"
A2A_BACKWARD = "a2a.backward"


class Layout:
    def __init__(self, nodes, batch):
        if batch % nodes:
            raise SystemExit(f"--batch {batch} is not a multiple of {nodes} nodes")
        self.n = nodes
        self.mb = batch // nodes
        self.slots = math.ceil(N_SPARSE / nodes)

    def tables_of(self, owner):
        """(slot, table) of the tables on node `owner`."""
        return [(k, k * self.n + owner) for k in range(self.slots) if k * self.n + owner < N_SPARSE]

    def owner_send(self, lookups):
        """lookups: B x slots x DIM of one owner -> its alltoall input,
        N blocks (one per sample owner) of slots x B/N x DIM."""
        return lookups.view(self.n, self.mb, self.slots, DIM).transpose(1, 2).reshape(-1)

    def node_receive(self, recv):
        """A sample owner's forward alltoall output -> its B/N x 26 x DIM lookups."""
        x = recv.view(self.n, self.slots, self.mb, DIM).permute(2, 1, 0, 3)  # sample, slot, owner
        return x.reshape(self.mb, self.slots * self.n, DIM)[:, :N_SPARSE]

    def node_send(self, grads):
        """grads: B/N x 26 x DIM of one sample owner -> its backward alltoall
        input, N blocks (one per table owner) of slots x B/N x DIM."""
        pad = grads.new_zeros(self.mb, self.slots * self.n, DIM)
        pad[:, :N_SPARSE] = grads
        return pad.view(self.mb, self.slots, self.n, DIM).permute(2, 1, 0, 3).reshape(-1)

    def owner_receive(self, recv):
        """A table owner's backward alltoall output -> B x slots x DIM."""
        x = recv.view(self.n, self.slots, self.mb, DIM).transpose(1, 2)  # node, sample, slot
        return x.reshape(self.n * self.mb, self.slots, DIM)


def node_gradients(params, dense, emb, labels, batch):
    """One node's share of the global mean loss over `batch` samples, and
    its gradients: (loss, the lookups' gradient, the dense parameters'
    gradients in params' order). The emulation and the real ranks both
    call this, so that they compute the same values bit for bit."""
    emb = emb.detach().requires_grad_(True)
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    loss = loss_sum(leaves, dense, emb, labels) / batch
    grads = torch.autograd.grad(loss, [emb] + list(leaves.values()))
    return loss.detach(), grads[0], grads[1:]


def row_policy(bits, row, algorithm="ring", ec=False):
    """The paper's quantizer (§3.1): unsigned integers on the min-max grid
    of each row of `row` values, rounded to nearest even: qc's minmax codec
    with one bucket per row, always compressed (min_compress_bytes 0);
    recursive doubling in groups of 8 (§3.4.2). bits 32: uncompressed."""
    if bits == 32:
        return qc.Policy(codec="none", algorithm=algorithm)
    return qc.Policy(codec="minmax", bits=bits, bucket_size=row, rounding="nearest",
                     algorithm=algorithm, error_feedback=ec, group_size=8, min_compress_bytes=0)


def dense_policies(params, nodes, allreduce, layers):
    """name -> policy of every dense tensor whose allreduce is quantized.
    layers "paper": only those of layers whose first weight dimension
    divides by N (the paper's emulation could only split those); "all"."""
    out = {}
    if allreduce is None:
        return out
    for name, p in params.items():
        layer = name.rsplit(".", 1)[0]
        if layers == "paper" and params[layer + ".weight"].shape[0] % nodes != 0:
            continue
        row = p.shape[1] if p.dim() == 2 else p.shape[0]
        out[name] = row_policy(allreduce["bits"], row, allreduce["algorithm"], allreduce["ec"])
    return out


def parse_a2a(text):
    """'f,b' -> (f, b) widths of the forward and backward alltoall; 32 = fp32."""
    try:
        f, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"alltoall {text!r}: F,B") from None
    for w in (f, b):
        if w not in (1, 2, 3, 4, 5, 6, 7, 8, 32):
            raise argparse.ArgumentTypeError(f"alltoall width {w}: 1..8 or 32 (fp32)")
    return f, b


def parse_allreduce(text):
    """'fp32' or 'ALGO:BITS[:ec]' with ALGO ring or rd."""
    if text == "fp32":
        return None
    parts = text.split(":")
    ok = (len(parts) in (2, 3) and parts[0] in ("ring", "rd") and parts[1].isdigit()
          and 1 <= int(parts[1]) <= 8 and (len(parts) == 2 or parts[2] == "ec"))
    if not ok:
        raise argparse.ArgumentTypeError(f"allreduce {text!r}: fp32 or ring|rd:BITS[:ec], BITS 1..8")
    return {"algorithm": "ring" if parts[0] == "ring" else "recursive_doubling",
            "bits": int(parts[1]), "ec": len(parts) == 3}


def training_parser(doc):
    """The command line both trainers share; `doc`'s first paragraph is its
    description."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap)
    return ap


def add_training_args(ap):
    ap.add_argument("--batch", type=int, default=1024, help="global batch (paper: 1024)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (default 0.5)")
    ap.add_argument("--width", type=float, default=1.0,
                    help="hidden layer widths relative to the paper's Table 1 (default 1.0)")
    ap.add_argument("--max-rows", type=int, default=DataSpec.max_rows)
    ap.add_argument("--a2a", type=parse_a2a, default=(32, 32),
                    help="forward,backward alltoall widths, 32 = fp32 (default 32,32)")
    ap.add_argument("--allreduce", type=parse_allreduce, default=None,
                    help="fp32 (default) or ring|rd:BITS[:ec]")
    ap.add_argument("--layers", choices=("paper", "all"), default="paper",
                    help="quantize the layers whose first dimension divides by N (paper) or all")
    ap.add_argument("--seed", type=int, default=1, help="model initialisation seed")
    ap.add_argument("--train-seed", type=int, default=1, help="training data order")
    ap.add_argument("--data-seed", type=int, default=DataSpec.seed, help="the teacher")
    ap.add_argument("--test-size", type=int, default=200000)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")


def config_record(cfg, nodes):
    return {"nodes": nodes, "batch": cfg.batch, "steps": cfg.steps, "lr": cfg.lr, "width": cfg.width,
            "max_rows": cfg.max_rows, "seed": cfg.seed, "train_seed": cfg.train_seed,
            "data_seed": cfg.data_seed, "a2a": list(cfg.a2a), "allreduce": cfg.allreduce,
            "layers": cfg.layers}


def evaluate(params, tables, test):
    """(accuracy, mean loss) of the model on the test set, in fp32."""
    dense, sparse, labels = test
    with torch.no_grad():
        emb = torch.stack([tables[t][sparse[:, t]] for t in range(N_SPARSE)], dim=1)
        logits = dense_forward(params, dense, emb)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
        acc = ((logits > 0).float() == labels).float().mean().item()
    return acc, loss
