"""The smallest pipeline: a fake collector, a pusher and a trainer sharing one context per step.

    python examples/hello_pipeline.py [--steps 100]
"""
import argparse
import random

import numpy as np

from contexts import OnlineRLContext
from pipeline import Role, for_all_roles, for_roles, task


@for_roles(Role.COLLECTOR, reads=["env_step"], writes=["transitions", "env_step"])
def collector(ctx: OnlineRLContext) -> None:
    """Writes ``ctx.transitions`` (8 fake transitions, one per env) and advances ``ctx.env_step``."""
    ctx.transitions = [{"obs": np.array([random.random()]), "action": 0, "reward": 1.0,
                        "next_obs": np.array([random.random()]), "terminated": False, "truncated": False, "env_id": i}
                       for i in range(8)]  # the form of pipeline.data.Transition
    ctx.env_step += len(ctx.transitions)


@for_all_roles(reads=["transitions"])  # checked when task.run starts: a collector must come first
def pusher(buffer: list):
    def _pusher(ctx: OnlineRLContext) -> None:
        """Reads ``ctx.transitions``; appends them to ``buffer``."""
        buffer.extend(ctx.transitions or [])
    return _pusher


@for_roles(Role.LEARNER, reads=["train_iter"], writes=["train_iter"])
def trainer(ctx: OnlineRLContext):
    """Reads the buffer size; advances ``ctx.train_iter``; reports after the step (backward part)."""
    ctx.train_iter += 1
    yield
    if ctx.train_iter % 25 == 0:
        print(f"step {ctx.total_step:3d}  env_step {ctx.env_step:4d}  train_iter {ctx.train_iter}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100, help="pipeline steps to run (default 100)")
    args = ap.parse_args(argv)
    buffer: list = []
    with task.start(ctx=OnlineRLContext()):
        task.use(collector)
        task.use(pusher(buffer))
        task.use(trainer)
        task.run(max_step=args.steps)
    print(f"done: {len(buffer)} transitions stored")


if __name__ == "__main__":
    main()
