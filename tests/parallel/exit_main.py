"""A main for the launcher test of a node's exit: an atexit handler writes a file, the last output has no
newline, and the main returns exit code 3."""
import atexit
import json
import os
import sys

from pipeline.parallel.launch import NODE_ENV


def _at_exit(path: str) -> None:
    with open(path, "w") as f:
        f.write("ran")


def main() -> int:
    me = json.loads(os.environ[NODE_ENV])["node_id"]
    atexit.register(_at_exit, os.path.join(os.environ["RLPIPE_TEST_OUT"], f"atexit-{me}"))
    sys.stdout.write(f"last words of node {me}")  # no newline, not flushed
    return 3
