"""The smallest pipeline: a fake collector, a pusher and a trainer sharing one context per step.

    python examples/hello_pipeline.py
"""
import random

from contexts import OnlineRLContext
from pipeline import Role, for_all_roles, for_roles, task


@for_roles(Role.COLLECTOR, reads=["env_step"], writes=["trajectories", "env_step"])
def collector(ctx: OnlineRLContext) -> None:
    """Writes ``ctx.trajectories`` (8 fake transitions) and advances ``ctx.env_step``."""
    ctx.trajectories = [{"obs": random.random(), "reward": 1.0} for _ in range(8)]
    ctx.env_step += len(ctx.trajectories)


@for_all_roles(reads=["trajectories"])  # checked when task.run starts: a collector must come first
def pusher(buffer: list):
    def _pusher(ctx: OnlineRLContext) -> None:
        """Reads ``ctx.trajectories``; appends them to ``buffer``."""
        buffer.extend(ctx.trajectories)
    return _pusher


@for_roles(Role.LEARNER, reads=["train_iter"], writes=["train_iter"])
def trainer(ctx: OnlineRLContext):
    """Reads the buffer size; advances ``ctx.train_iter``; reports after the step (backward part)."""
    ctx.train_iter += 1
    yield
    if ctx.train_iter % 25 == 0:
        print(f"step {ctx.total_step:3d}  env_step {ctx.env_step:4d}  train_iter {ctx.train_iter}")


def main() -> None:
    buffer: list = []
    with task.start(ctx=OnlineRLContext()):
        task.use(collector)
        task.use(pusher(buffer))
        task.use(trainer)
        task.run(max_step=100)
    print(f"done: {len(buffer)} transitions stored")


if __name__ == "__main__":
    main()
