"""qc.torch.OneBitAdam (paper 004 §3) on local ranks (threads): the warm-up is
Adam on the averaged gradients, the compression stage is momentum with the
warm-up's frozen variance, averaged through the compressed layer with error
feedback; replicas stay identical; bad arguments raise qc errors.
"""

import io

import pytest

torch = pytest.importorskip("torch")
qc = pytest.importorskip("qc")
if not hasattr(qc, "Comm"):
    pytest.skip("the qc extension is not built", allow_module_level=True)
import qc.torch as qct  # noqa: E402
from conftest import check_ok, run_ranks  # noqa: E402

NRANKS = 3
STEPS = 12
WARMUP = 5
OUT = 32  # outputs: 672 parameters, so that the wire bytes are mostly values


def _data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(32, 20, generator=g)
    x[:, 3] = 0.0  # an input that is always 0: its weights get no gradient
    w_true = torch.linspace(-1, 1, 20 * OUT).reshape(20, OUT)
    return x, x @ w_true + 0.01 * torch.randn(32, OUT, generator=g)


def _model():
    """The same initial model on every rank (a local generator: the ranks are
    threads, and torch's global one would be shared between them)."""
    model = torch.nn.Linear(20, OUT)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.weight.copy_(0.1 * torch.randn(OUT, 20, generator=g))
        model.bias.zero_()
    return model


def _step(model, opt, x, y):
    """One training step on the squared error; the loss before it."""
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def _flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def _train(comm, policy=None, warmup=WARMUP, lr=0.05):
    torch.set_num_threads(1)
    model = _model()
    opt = qct.OneBitAdam(model.parameters(), comm, lr=lr, warmup_steps=warmup, policy=policy)
    x, y = _data(comm.rank)
    params, losses = [], []
    for _ in range(STEPS):
        losses.append(_step(model, opt, x, y))
        params.append(_flat(model))
    return {"params": params, "losses": losses,
            "warm": opt.warmup_wire_bytes, "compressed": opt.compressed_wire_bytes}


def _reference(warmup=WARMUP, lr=0.05, betas=(0.9, 0.999), eps=1e-8):
    """The algorithm without compression, from the definition: Adam on the
    mean gradient for `warmup` steps, then m <- b1 m + (1 - b1) mean g and
    x <- x - lr m_hat / (sqrt(v_hat_frozen) + eps), no move where v = 0."""
    models = [_model() for _ in range(NRANKS)]
    data = [_data(r) for r in range(NRANKS)]
    flat = torch.cat([p.detach().reshape(-1) for p in models[0].parameters()]).double()
    m = torch.zeros_like(flat)
    v = torch.zeros_like(flat)
    out = []
    for t in range(1, STEPS + 1):
        grads = []
        for model, (x, y) in zip(models, data):
            with torch.no_grad():
                i = 0
                for p in model.parameters():
                    p.copy_(flat[i:i + p.numel()].view_as(p).float())
                    i += p.numel()
            model.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double())
        g = sum(grads) / NRANKS
        m = betas[0] * m + (1 - betas[0]) * g
        if t <= warmup:
            v = betas[1] * v + (1 - betas[1]) * g * g
            v_hat = v / (1 - betas[1] ** t)
        else:
            v_hat = v / (1 - betas[1] ** warmup)
        step = m / (1 - betas[0] ** t) / (v_hat.sqrt() + eps)
        if t > warmup:
            step = torch.where(v == 0, torch.zeros_like(step), step)
        flat = flat - lr * step
        out.append(flat.clone())
    return out


def test_without_compression_it_is_the_two_stage_algorithm():
    comms = qc.Comm.local(NRANKS, timeout=60.0)
    try:
        res = check_ok(run_ranks(comms, lambda c: _train(c, policy=qc.Policy(codec="none"))))
    finally:
        for c in comms:
            c.close()
    ref = _reference()
    for r in res:
        for t, (got, want) in enumerate(zip(r["params"], ref)):
            assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6), f"step {t + 1}"
    # the always-zero input's weights never moved
    w0 = _model().weight.detach()[:, 3]
    for p in res[0]["params"]:
        assert torch.equal(p[:20 * OUT].view(OUT, 20)[:, 3], w0)


def test_compressed_stage_keeps_replicas_identical_and_sends_few_bytes():
    comms = qc.Comm.local(NRANKS, timeout=60.0)
    try:
        res = check_ok(run_ranks(comms, lambda c: _train(c)))
    finally:
        for c in comms:
            c.close()
    for r in res[1:]:
        for a, b in zip(r["params"], res[0]["params"]):
            assert torch.equal(a, b)  # every rank took the same averaged step
    ref = _reference()
    # the warm-up is exact (uncompressed), the compressed stage is not
    for t in range(WARMUP):
        assert torch.allclose(res[0]["params"][t].double(), ref[t], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(res[0]["params"][-1].double(), ref[-1], rtol=1e-5, atol=1e-6)
    assert res[0]["losses"][-1] < res[0]["losses"][0]
    # the always-zero input's weights never moved, though 1-bit codes have no 0
    w0 = _model().weight.detach()[:, 3]
    for p in res[0]["params"]:
        assert torch.equal(p[:20 * OUT].view(OUT, 20)[:, 3], w0)
    # 1 bit per value (plus scales) in the compressed stage, float32 in the warm-up
    per_warm = res[0]["warm"] / WARMUP
    per_compressed = res[0]["compressed"] / (STEPS - WARMUP)
    assert 0 < per_compressed and per_compressed * 8 < per_warm


BAD_TYPE = qc.ArgumentTypeError
BAD_VALUE = qc.InvalidArgumentError
CASES = [
    ("comm.type", lambda c, p: qct.OneBitAdam(p, "comm"), BAD_TYPE),
    ("warmup.type", lambda c, p: qct.OneBitAdam(p, c, warmup_steps=2.5), BAD_TYPE),
    ("warmup.0", lambda c, p: qct.OneBitAdam(p, c, warmup_steps=0), BAD_VALUE),
    ("lr.0", lambda c, p: qct.OneBitAdam(p, c, lr=0.0), BAD_VALUE),
    ("betas.1", lambda c, p: qct.OneBitAdam(p, c, betas=(1.0, 0.999)), BAD_VALUE),
    ("policy.type", lambda c, p: qct.OneBitAdam(p, c, policy="onebit"), BAD_TYPE),
    ("params.float64", lambda c, p: qct.OneBitAdam([torch.zeros(3, dtype=torch.float64)], c), BAD_VALUE),
    ("load_state_dict.foreign", lambda c, p: qct.OneBitAdam(p, c).load_state_dict(
        torch.optim.Adam(_model().parameters()).state_dict()), BAD_VALUE),
    ("load_state_dict.count", lambda c, p: qct.OneBitAdam(p, c).load_state_dict(
        qct.OneBitAdam([torch.zeros(5)], c).state_dict()), BAD_VALUE),
    ("load_state_dict.warmup", lambda c, p: qct.OneBitAdam(p, c, warmup_steps=3).load_state_dict(
        qct.OneBitAdam(_model().parameters(), c, warmup_steps=4).state_dict()), BAD_VALUE),
]


@pytest.mark.parametrize("call, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_raise_qc_errors(call, expected):
    (c,) = qc.Comm.local(1)
    with c:
        with pytest.raises(expected):
            call(c, _model().parameters())


def _resumed(comms, cut):
    """_train's run stopped after `cut` steps and resumed from checkpoints on a
    fresh group: the models, optimizers and communicators are new, each rank
    loads its own saved states."""
    def first(comm):
        torch.set_num_threads(1)
        model = _model()
        opt = qct.OneBitAdam(model.parameters(), comm, lr=0.05, warmup_steps=WARMUP)
        x, y = _data(comm.rank)
        for _ in range(cut):
            _step(model, opt, x, y)
        # through torch.save, as a checkpoint file would be
        buf = io.BytesIO()
        torch.save((model.state_dict(), opt.state_dict(), comm.save_state()), buf)
        return buf.getvalue()

    saved = check_ok(run_ranks(comms, first))
    fresh = qc.Comm.local(NRANKS, timeout=60.0)

    def second(comm):
        torch.set_num_threads(1)
        model_state, opt_state, comm_state = torch.load(io.BytesIO(saved[comm.rank]))
        model = _model()
        model.load_state_dict(model_state)
        opt = qct.OneBitAdam(model.parameters(), comm, lr=0.05, warmup_steps=WARMUP)
        opt.load_state_dict(opt_state)
        comm.load_state(comm_state)
        x, y = _data(comm.rank)
        params = []
        for _ in range(cut, STEPS):
            _step(model, opt, x, y)
            params.append(_flat(model))
        return params, opt.state_steps

    try:
        return check_ok(run_ranks(fresh, second))
    finally:
        for c in fresh:
            c.close()


@pytest.mark.parametrize("cut", [2, WARMUP, WARMUP + 3])
def test_a_resumed_run_continues_bit_for_bit(cut):
    """Stopped in the warm-up, at its end, or in the compressed stage (the
    residuals then matter), the resumed run takes the uninterrupted run's
    steps exactly."""
    comms = qc.Comm.local(NRANKS, timeout=60.0)
    try:
        whole = check_ok(run_ranks(comms, lambda c: _train(c)))
        comms2 = qc.Comm.local(NRANKS, timeout=60.0)
        try:
            resumed = _resumed(comms2, cut)
        finally:
            for c in comms2:
                c.close()
    finally:
        for c in comms:
            c.close()
    for rank in range(NRANKS):
        params, steps = resumed[rank]
        assert steps == STEPS
        for t, got in enumerate(params):
            assert torch.equal(got, whole[rank]["params"][cut + t]), f"rank {rank} step {cut + t + 1}"


def test_a_failed_load_changes_nothing():
    (c,) = qc.Comm.local(1)
    with c:
        model = _model()
        opt = qct.OneBitAdam(model.parameters(), c, lr=0.05, warmup_steps=1)
        x, y = _data(0)
        for _ in range(3):
            _step(model, opt, x, y)
        before = opt.state_dict()
        bad = opt.state_dict()
        bad["param_groups"] = bad["param_groups"] + bad["param_groups"]  # torch refuses it
        bad["onebit_adam"]["residuals"] = qct.OneBitAdam(_model().parameters(), c).state_dict()[
            "onebit_adam"]["residuals"]
        with pytest.raises(ValueError):
            opt.load_state_dict(bad)
        after = opt.state_dict()
        assert after["onebit_adam"]["residuals"] == before["onebit_adam"]["residuals"]
        assert torch.equal(after["onebit_adam"]["m"], before["onebit_adam"]["m"])
        assert after["onebit_adam"]["steps"] == 3
