"""Learner overhead: ``Learner.update`` next to a hand-written torch loop doing the same steps.

Case 1 (issue 3): an MLP over a 4096-row batch, minibatch 256, 4 epochs (64 Adam steps per
call), as a dict of tensors and as a treetensor tree. Target: within 5 % of the raw loop.
Case 2 (the DQN hot path): ``update()`` on a 64-row batch with ``minibatch_size=None`` for a
double-DQN loss on the anchors' dueling Q-net (target network, MSE TD loss, Adam), against the
same raw step; prints the per-call overhead in µs and the ratio.

Raw and learner runs alternate in short rounds in the same process; each round gives a ratio and
the median ratio is printed. With ``--threads 1`` (default) the clock is this thread's CPU time,
which other processes on a shared machine disturb far less than wall time (``--wall`` to switch).

    python benchmarks/bench_learner.py [--reps 7] [--calls 2000] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from pipeline.learner import Learner  # noqa: E402
from pipeline.learner.optim import kernel_kwargs  # noqa: E402

OBS, HID, OUT = 64, 256, 16


def make_mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(OBS, HID), nn.ReLU(), nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, OUT))


class MLPLearner(Learner):
    def forward_train(self, module_id, batch):
        return self.modules[module_id](batch["obs"])

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        return nn.functional.mse_loss(fwd_out, batch["target"])


def raw_mlp_call(model, opt, obs, target, m, epochs):
    n = obs.shape[0]
    for _ in range(epochs):
        for s in range(0, n, m):
            out = model(obs[s : s + m])
            loss = nn.functional.mse_loss(out, target[s : s + m])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


# ---------------------------------------------------------------- DQN case
class DuelingQ(nn.Module):
    def __init__(self, obs_dim: int = 4, n_actions: int = 2) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(obs_dim, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU()
        )
        self.adv = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_actions))
        self.val = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, obs):
        h = self.encoder(obs)
        a = self.adv(h)
        return self.val(h) + a - a.mean(-1, keepdim=True)


def td_loss(q_net, target_net, b, gamma=0.97):
    q = q_net(b["obs"])
    q_sa = q.gather(1, b["action"].unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        next_a = q_net(b["next_obs"]).argmax(1, keepdim=True)
        next_q = target_net(b["next_obs"]).gather(1, next_a).squeeze(1)
        target = b["reward"] + gamma * (1.0 - b["done"]) * next_q
    return nn.functional.mse_loss(q_sa, target)


class DQNLearner(Learner):
    def __init__(self, model, **kw):
        super().__init__(model, **kw)
        self.target = copy.deepcopy(model).requires_grad_(False)

    def forward_train(self, module_id, batch):
        return None

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        return td_loss(self.modules[module_id], self.target, batch)


def dqn_batch(n=64):
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(n, 4, generator=g),
        "action": torch.randint(0, 2, (n,), generator=g),
        "reward": torch.ones(n),
        "next_obs": torch.randn(n, 4, generator=g),
        "done": torch.zeros(n),
    }


CLOCK = time.thread_time  # CPU time of this thread: robust on a shared machine (threads=1)


def timed(fn) -> float:
    t0 = CLOCK()
    fn()
    return CLOCK() - t0


def compare(raw, candidates: dict, rounds: int) -> dict:
    """Alternate raw and candidates in short rounds (rotating the order) on a shared machine.

    Returns name -> (median seconds of the candidate, median of per-round ratios to raw).
    """
    names = list(candidates)
    times: Dict[str, List[float]] = {name: [] for name in ["raw"] + names}
    ratios: Dict[str, List[float]] = {name: [] for name in names}
    fns = {"raw": raw, **candidates}
    order = ["raw"] + names
    for i in range(rounds):
        rot = order[i % len(order):] + order[: i % len(order)]
        got = {name: timed(fns[name]) for name in rot}
        for name in order:
            times[name].append(got[name])
        for name in names:
            ratios[name].append(got[name] / got["raw"])
    out = {"raw": (statistics.median(times["raw"]), 1.0)}
    for name in names:
        out[name] = (statistics.median(times[name]), statistics.median(ratios[name]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200, help="update() calls per round in the DQN case")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="mlp,dqn,tiny", help="comma-separated subset of mlp,dqn,tiny")
    ap.add_argument("--wall", action="store_true", help="time wall clock instead of this thread's CPU time")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    if args.wall or args.threads != 1:
        CLOCK = time.perf_counter  # torch's worker threads are not in thread_time
    print(f"clock: {'wall' if CLOCK is time.perf_counter else 'thread CPU time'}")

    cases = set(args.cases.split(","))
    if "mlp" in cases:
        case_mlp(args)
    if "dqn" in cases:
        case_dqn(args)
    if "tiny" in cases:
        case_tiny(args)


def case_mlp(args) -> None:
    """4096 rows, m=256, 4 epochs."""
    n, m, epochs = 4096, 256, 4
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(n, OBS, generator=g)
    target = torch.randn(n, OUT, generator=g)
    raw_model = make_mlp(0)
    raw_opt = torch.optim.Adam(list(raw_model.parameters()), lr=1e-3, **kernel_kwargs(list(raw_model.parameters())))  # as the Learner's default
    learner = MLPLearner(make_mlp(0), lr=1e-3)
    batch = {"obs": obs, "target": target}
    import treetensor.torch as ttorch

    tree = ttorch.Tensor(batch)
    tree_learner = MLPLearner(make_mlp(0), lr=1e-3)

    # warm-up
    raw_mlp_call(raw_model, raw_opt, obs, target, m, 1)
    learner.update(batch, minibatch_size=m, num_epochs=1)
    tree_learner.update(tree, minibatch_size=m, num_epochs=1)
    res = compare(
        lambda: raw_mlp_call(raw_model, raw_opt, obs, target, m, epochs),
        {
            "dict": lambda: learner.update(batch, minibatch_size=m, num_epochs=epochs),
            "tree": lambda: tree_learner.update(tree, minibatch_size=m, num_epochs=epochs),
        },
        args.reps,
    )
    steps = epochs * n // m
    r = res["raw"][0]
    print(f"[mlp 4096 rows, m={m}, {epochs} epochs = {steps} steps/call, threads={args.threads}, {args.reps} rounds]")
    print(f"  raw torch loop      {r * 1e3:8.2f} ms/call")
    for name in ("dict", "tree"):
        t, ratio = res[name]
        print(f"  Learner.update {name} {t * 1e3:8.2f} ms/call   ratio {ratio:.3f}   (median of per-round ratios)")


def case_dqn(args) -> None:
    """The DQN hot path: 64 rows, minibatch_size=None, one update per call."""
    import treetensor.torch as ttorch

    b = dqn_batch()
    q_raw = DuelingQ()
    tgt_raw = copy.deepcopy(q_raw).requires_grad_(False)
    opt_raw = torch.optim.Adam(list(q_raw.parameters()), lr=1e-3, **kernel_kwargs(list(q_raw.parameters())))
    dqn = DQNLearner(DuelingQ(), lr=1e-3)
    tb = ttorch.Tensor(b)

    def raw_steps(batch=b):
        for _ in range(args.calls):
            loss = td_loss(q_raw, tgt_raw, batch)
            opt_raw.zero_grad(set_to_none=True)
            loss.backward()
            opt_raw.step()
            loss.item()  # a training loop reads its loss

    def learner_steps():
        for _ in range(args.calls):
            dqn.update(b)

    def learner_steps_tree():
        for _ in range(args.calls):
            dqn.update(tb)

    raw_steps()
    learner_steps()
    learner_steps_tree()
    print(f"[dqn 64 rows, minibatch_size=None, {args.reps * 3} rounds of {args.calls} calls]")
    for name, raw, cand in (("dict", raw_steps, learner_steps), ("tree", lambda: raw_steps(tb), learner_steps_tree)):
        res = compare(raw, {name: cand}, args.reps * 3)
        r2 = res["raw"][0] / args.calls
        t, ratio = res[name]
        t /= args.calls
        print(f"  raw torch step ({name}) {r2 * 1e6:8.1f} us/call | Learner.update {t * 1e6:8.1f} us/call"
              f"   ratio {ratio:.3f}   (+{(t - r2) * 1e6:.1f} us/call)")


def case_tiny(args) -> None:
    """Pure per-call overhead on a tiny linear model."""
    tiny_b = {"x": torch.randn(64, 4), "y": torch.randn(64, 1)}
    tiny_raw = nn.Linear(4, 1)
    tiny_opt = torch.optim.Adam(list(tiny_raw.parameters()), lr=1e-3, **kernel_kwargs(list(tiny_raw.parameters())))

    class Tiny(Learner):
        def forward_train(self, module_id, batch):
            return self.modules[module_id](batch["x"])

        def compute_loss_for_module(self, module_id, batch, fwd_out):
            return nn.functional.mse_loss(fwd_out, batch["y"])

    tiny = Tiny(nn.Linear(4, 1), lr=1e-3)

    def tiny_raw_steps():
        for _ in range(args.calls):
            loss = nn.functional.mse_loss(tiny_raw(tiny_b["x"]), tiny_b["y"])
            tiny_opt.zero_grad(set_to_none=True)
            loss.backward()
            tiny_opt.step()
            loss.item()

    def tiny_steps():
        for _ in range(args.calls):
            tiny.update(tiny_b)

    tiny_raw_steps()
    tiny_steps()
    res = compare(tiny_raw_steps, {"dict": tiny_steps}, args.reps * 3)
    r3 = res["raw"][0] / args.calls
    t3 = res["dict"][0] / args.calls
    print(f"[tiny Linear(4,1), 64 rows: the learner's own per-call cost]")
    print(f"  raw torch step      {r3 * 1e6:8.1f} us/call")
    print(f"  Learner.update dict {t3 * 1e6:8.1f} us/call   (+{(t3 - r3) * 1e6:.1f} us/call)")


if __name__ == "__main__":
    main()
