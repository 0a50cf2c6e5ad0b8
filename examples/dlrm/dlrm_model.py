"""The DLRM of paper 000 (Table 1), split the way hybrid parallel training
splits it: embedding tables (model parallel, each on one node) and the
dense part (data parallel: bottom MLP, pairwise dot interaction, top MLP).

Paper sizes: bottom MLP 13-512-256-64-16, embeddings of dimension 16, the
dots of the 27 vectors (351) next to the bottom output (16) = 367, top MLP
367-512-256-1. ``width`` scales the hidden layers (1.0 = the paper's).

The dense part is written as a function of a parameter dict so that
torch.func can take one gradient per emulated node in a single vmap.
"""

import math

import torch

BOTTOM = (13, 512, 256, 64, 16)
TOP_HIDDEN = (512, 256, 1)


def layer_sizes(dim, n_sparse, width=1.0):
    """(bottom, top): the widths of both MLPs, input first."""
    def scaled(sizes):
        return tuple(sizes[:1]) + tuple(max(1, round(s * width)) for s in sizes[1:-1]) + sizes[-1:]
    bottom = scaled(BOTTOM[:-1] + (dim,))
    n_vec = n_sparse + 1
    top_in = n_vec * (n_vec - 1) // 2 + dim
    top = scaled((top_in,) + TOP_HIDDEN)
    return bottom, top


def init_dense_params(dim, n_sparse, width, generator):
    """The dense part's parameters, as DLRM's reference initialises them:
    weights N(0, sqrt(2 / (fan_in + fan_out))), biases N(0, sqrt(1 / fan_out)).
    Returns an ordered dict name -> tensor."""
    bottom, top = layer_sizes(dim, n_sparse, width)
    params = {}
    for prefix, sizes in (("bot", bottom), ("top", top)):
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = torch.randn(n_out, n_in, generator=generator) * math.sqrt(2.0 / (n_in + n_out))
            b = torch.randn(n_out, generator=generator) * math.sqrt(1.0 / n_out)
            params[f"{prefix}{i}.weight"] = w
            params[f"{prefix}{i}.bias"] = b
    return params


def init_tables(rows, dim, generator):
    """One table per categorical feature, uniform in +-1/sqrt(rows) (DLRM's)."""
    return [(torch.rand(r, dim, generator=generator) * 2 - 1) / math.sqrt(r) for r in rows]


def _relu_mlp(params, prefix, x):
    i = 0
    while f"{prefix}{i}.weight" in params:
        x = torch.relu(torch.nn.functional.linear(x, params[f"{prefix}{i}.weight"],
                                                  params[f"{prefix}{i}.bias"]))
        i += 1
    return x


def dense_forward(params, dense, emb):
    """Click logits of a batch: dense (n x 13), emb (n x 26 x dim), the
    looked-up embeddings. The top MLP's last layer has no activation here
    (the loss takes logits)."""
    x = _relu_mlp(params, "bot", dense)
    v = torch.cat([x.unsqueeze(1), emb], dim=1)            # n x 27 x dim
    z = torch.bmm(v, v.transpose(1, 2))                    # n x 27 x 27
    li, lj = torch.tril_indices(v.shape[1], v.shape[1], -1)
    top_in = torch.cat([x, z[:, li, lj]], dim=1)           # n x 367
    i = 0
    y = top_in
    while f"top{i}.weight" in params:
        y = torch.nn.functional.linear(y, params[f"top{i}.weight"], params[f"top{i}.bias"])
        if f"top{i + 1}.weight" in params:
            y = torch.relu(y)
        i += 1
    return y.squeeze(-1)


def loss_sum(params, dense, emb, labels):
    """Binary cross-entropy summed over the batch (the caller divides by
    the global batch, so that per-node gradients add up to the global one)."""
    return torch.nn.functional.binary_cross_entropy_with_logits(
        dense_forward(params, dense, emb), labels, reduction="sum")
