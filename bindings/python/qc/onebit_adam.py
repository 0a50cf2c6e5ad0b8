"""1-bit Adam (Tang et al. 2021, as paper 004 §3 describes it) over a qc
communicator: a data-parallel optimizer that does its own communication
(do not wrap the model in DDP).

Two stages:

- warm-up (the first ``warmup_steps`` steps): plain Adam on the gradients
  averaged over the ranks uncompressed (layer ``<layer>.warmup``, codec none);
- compression: the variance is frozen (Adam's variance settles early, and
  its non-linear dependence on the gradient breaks error compensation); each
  rank updates its momentum with its own gradient, and the momentum is
  averaged with qc's 1-bit SRA with error feedback (layer ``<layer>``,
  codec onebit: the worker residual on the chunks a rank sends, the server
  residual on the chunk it owns, paper 004 §5), then the parameters move by
  lr * m / (sqrt(v) + eps).

All parameters travel in one flat buffer per step, so each stage is one
allreduce per step. Every rank gets the same averaged values bit for bit,
so the replicas stay identical.
"""

from typing import Any, Dict, Iterable, Optional

import torch

import qc as _qc


class OneBitAdam(torch.optim.Optimizer):
    """1-bit Adam over ``comm`` (a ``qc.Comm`` of the data-parallel ranks).

    Args:
        params: the parameters (or parameter groups) to optimize; every
            rank must pass the same ones, in the same order.
        comm: the communicator; the optimizer sets the policies of the layers
            ``layer`` and ``layer + ".warmup"`` on it (collective).
        lr, betas, eps, weight_decay: as torch.optim.Adam (weight decay is
            added to the update, AdamW style, in both stages).
        warmup_steps: steps of full-precision Adam before the compression
            stage, >= 1 (the frozen variance is the warm-up's).
        policy: the compression stage's policy (default: onebit, SRA,
            error feedback, always compressed).
        layer: the layer name of the compressed momentum (default "onebit_adam").

    Attributes:
        state_steps: steps taken.
        compressed_wire_bytes, warmup_wire_bytes: qc's wire bytes of this
            rank in each stage (from the layers' statistics).
    """

    def __init__(self, params: Iterable[Any], comm: "_qc.Comm", lr: float = 1e-3,
                 betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 warmup_steps: int = 100, policy: Optional["_qc.Policy"] = None,
                 layer: str = "onebit_adam"):
        if not isinstance(comm, _qc.Comm):
            raise _qc.ArgumentTypeError(1, f"argument 'comm' must be a qc.Comm, not {type(comm).__name__}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int):
            raise _qc.ArgumentTypeError(1, f"argument 'warmup_steps' must be an int, "
                                           f"not {type(warmup_steps).__name__}")
        if warmup_steps < 1:
            raise _qc.InvalidArgumentError(1, f"argument 'warmup_steps' must be >= 1 (the frozen variance "
                                              f"is the warm-up's), not {warmup_steps}")
        if not (lr > 0.0 and eps > 0.0 and weight_decay >= 0.0 and 0.0 <= betas[0] < 1.0
                and 0.0 <= betas[1] < 1.0):
            raise _qc.InvalidArgumentError(1, "OneBitAdam: need lr > 0, eps > 0, weight_decay >= 0 "
                                              f"and betas in [0, 1) (got {lr}, {eps}, {weight_decay}, {betas})")
        if policy is not None and not isinstance(policy, _qc.Policy):
            raise _qc.ArgumentTypeError(1, f"argument 'policy' must be a qc.Policy or None, "
                                           f"not {type(policy).__name__}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.comm = comm
        self.warmup_steps = warmup_steps
        self.layer = layer
        self.warmup_layer = layer + ".warmup"
        if policy is None:
            policy = _qc.Policy(codec="onebit", algorithm="sra", error_feedback=True, min_compress_bytes=0)
        comm.set_layer_policy(layer, policy)
        comm.set_layer_policy(self.warmup_layer, _qc.Policy(codec="none"))
        params_all = self._params()
        for p in params_all:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise _qc.InvalidArgumentError(1, "OneBitAdam: parameters must be float32 CPU tensors")
        self._count = sum(p.numel() for p in params_all)
        self._m = torch.zeros(self._count)
        self._v = torch.zeros(self._count)
        self._error = _qc.ErrorBuffer(comm, self._count) if policy.error_feedback else None
        self._precondition: Optional[torch.Tensor] = None
        self.state_steps = 0

    def _frozen_precondition(self, eps: float, beta2: float) -> torch.Tensor:
        """1 / (sqrt(v) + eps) of the variance at the end of the warm-up
        (bias-corrected), 0 where the gradient was 0 throughout the warm-up
        (an input that is always 0: nothing to scale by)."""
        v_hat = self._v / (1 - beta2 ** self.warmup_steps)
        s = 1.0 / (v_hat.sqrt() + eps)
        s.masked_fill_(self._v == 0, 0.0)
        return s

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def _flat_grad(self) -> torch.Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self._params()])

    @property
    def warmup_wire_bytes(self) -> int:
        return int(self.comm.layer_stats(self.warmup_layer)["wire_bytes"])

    @property
    def compressed_wire_bytes(self) -> int:
        return int(self.comm.layer_stats(self.layer)["wire_bytes"])

    @torch.no_grad()
    def step(self, closure: Any = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        g = self._flat_grad()
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        t = self.state_steps + 1
        m_hat_scale = 1.0 / (1 - beta1 ** t)  # Adam's bias correction of the momentum
        if t <= self.warmup_steps:
            g = self.comm.allreduce(g, op="avg", layer=self.warmup_layer)
            self._m.mul_(beta1).add_(g, alpha=1 - beta1)
            self._v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (self._v / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
            update = self._m * m_hat_scale / denom
        else:
            if self._precondition is None:
                self._precondition = self._frozen_precondition(group["eps"], beta2)
            s = self._precondition
            self._m.mul_(beta1).add_(g, alpha=1 - beta1)
            update = self._m * s  # this rank's update direction
            self.comm.allreduce(update, out=update, op="avg", layer=self.layer, error_buffer=self._error)
            # 1 bit per value has no 0: a coordinate without variance gets
            # +-scale back, and must stay where the warm-up left it
            update.masked_fill_(s == 0, 0.0)
            # the averaged momentum, for the next step (0 where nothing moves)
            torch.where(s > 0, update / s.clamp_min(torch.finfo(s.dtype).tiny), torch.zeros_like(s),
                        out=self._m)
            update.mul_(m_hat_scale)
        offset = 0
        for p in self._params():
            n = p.numel()
            u = update[offset:offset + n].view_as(p)
            if group["weight_decay"]:
                u = u + group["weight_decay"] * p
            p.add_(u, alpha=-group["lr"])
            offset += n
        self.state_steps = t
        return loss

    def state_dict(self) -> Dict[str, Any]:
        """This rank's state for a checkpoint: torch's ``param_groups``, and
        under ``"onebit_adam"`` the steps taken, the momentum and variance,
        and the residuals of the compressed layer (``ErrorBuffer.save``).
        Every rank saves its own (the residuals differ by rank). A resumed
        run that loads it continues bit for bit; with a stochastic-rounding
        policy, also checkpoint ``comm.save_state()`` (the layers' call
        counts, which pick the random bits)."""
        state = super().state_dict()
        state["onebit_adam"] = {
            "steps": self.state_steps,
            "warmup_steps": self.warmup_steps,
            "count": self._count,
            "m": self._m.clone(),
            "v": self._v.clone(),
            "residuals": self._error.save() if self._error is not None else None,
        }
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore ``state_dict()``'s state, saved by this rank of a run of the
        same parameters, warm-up length and error-feedback setting.
        qc.InvalidArgumentError for a state that is not such a run's (nothing
        changes then); the residuals' own checks raise qc.CorruptDataError
        or qc.MismatchError (another count, rank or group size)."""
        extra = state_dict.get("onebit_adam") if isinstance(state_dict, dict) else None
        if not isinstance(extra, dict):
            raise _qc.InvalidArgumentError(1, "OneBitAdam.load_state_dict: not a OneBitAdam state "
                                              "(no 'onebit_adam' entry)")
        problems = []
        if extra.get("count") != self._count:
            problems.append(f"{extra.get('count')} values, this optimizer has {self._count}")
        if extra.get("warmup_steps") != self.warmup_steps:
            problems.append(f"warmup_steps {extra.get('warmup_steps')}, this optimizer has "
                            f"{self.warmup_steps}")
        if (extra.get("residuals") is None) != (self._error is None):
            problems.append("error feedback " + ("off" if extra.get("residuals") is None else "on") +
                            ", this optimizer has it " + ("off" if self._error is None else "on"))
        steps = extra.get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            problems.append(f"steps {steps!r}")
        for name in ("m", "v"):
            t = extra.get(name)
            if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (self._count,)):
                problems.append(f"'{name}' is not {self._count} float32 values")
        if problems:
            raise _qc.InvalidArgumentError(1, "OneBitAdam.load_state_dict: the state is another "
                                              "run's: " + "; ".join(problems))
        before = self._error.save() if self._error is not None else None
        if self._error is not None:
            self._error.load(extra["residuals"])  # unchanged if it raises
        try:
            super().load_state_dict({k: v for k, v in state_dict.items() if k != "onebit_adam"})
        except Exception:
            if before is not None:
                self._error.load(before)
            raise
        self._m.copy_(extra["m"])
        self._v.copy_(extra["v"])
        self.state_steps = steps
        self._precondition = None  # made again from v, which the compression stage never changes
