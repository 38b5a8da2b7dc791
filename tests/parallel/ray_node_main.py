"""Entry script for the Ray-backend tests: collectors send numbered items to the learner, which finishes
the job once it holds every item; each node's main returns what it saw (run_on_ray hands it back)."""
import os
import signal
import time

from pipeline import task

ITEMS = 30


def _assigned():
    import ray

    return {k: float(v) for k, v in ray.get_runtime_context().get_assigned_resources().items()}


def main():
    restarts = int(os.environ.get("RLPIPE_RESTARTS", "0"))
    got = []
    with task.start():
        me = task.router.node_id
        roles = sorted(task.router.roles)
        if os.environ.get("RLPIPE_TEST_KILL_NODE") == str(me) and restarts == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # a real death of the actor process
        if "learner" in roles:
            task.on("item", lambda sender, seq: got.append((sender, seq)))

            def check(ctx):
                time.sleep(0.01)
                senders = {s for s, _ in got}
                if len(got) >= ITEMS * max(1, len(senders)) and len(senders) >= int(os.environ["RLPIPE_TEST_COLLECTORS"]):
                    task.finish = True

            task.use(check)
            task.run(max_step=int(60 / 0.01))
            from pipeline.run import node_print

            node_print(f"learner summary: {len(got)} items", "  watch it: python nothing.py --play x --render")
            return {"node": me, "roles": roles, "got": sorted(got), "restarts": restarts, "resources": _assigned()}
        if "collector" in roles:
            sent = {"n": 0}

            def send(ctx):
                # wait until the learner listens: a remote event sent before that would be replayed anyway
                if sent["n"] < ITEMS:
                    task.emit("item", me, sent["n"], only_remote=True)
                    sent["n"] += 1
                time.sleep(0.01)

            task.use(send)
            task.run(max_step=int(60 / 0.01))
            return {"node": me, "roles": roles, "sent": sent["n"], "finished": task.finish, "restarts": restarts,
                    "resources": _assigned()}
        task.use(lambda ctx: time.sleep(0.01))
        task.run(max_step=int(60 / 0.01))
        return {"node": me, "roles": roles, "finished": task.finish, "restarts": restarts, "resources": _assigned()}
