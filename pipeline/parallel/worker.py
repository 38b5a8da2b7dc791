"""Entry point of one node started by ``rlpipe run``: ``python -m pipeline.parallel.worker --main M``.

Ties the process to its launcher (it dies when the launcher dies), turns SIGTERM into KeyboardInterrupt
so the task's context manager cleans up (the router says goodbye to its peers), configures the router
from ``RLPIPE_NODE`` and calls the user's main.
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Optional, Sequence

from ..runtime.entry import load_main
from .keycheck import KeyMismatchError
from .launch import CRASH_EXIT_CODE, PARENT_ENV, configure_from_env, remove_ipc_files

log = logging.getLogger("rlpipe.worker")


def die_with_parent() -> None:
    """Make this process receive SIGTERM when its parent dies (Linux prctl), and watch the parent in a
    thread as a fallback (other systems, or a parent that died before prctl)."""
    expected = int(os.environ.get(PARENT_ENV, "0") or 0)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if not expected:
        return
    if os.getppid() != expected:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != expected:
                log.error("the launcher (pid %d) is gone: stopping this node", expected)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10.0)
                os._exit(1)

    threading.Thread(target=watch, name="rlpipe-parent-watch", daemon=True).start()


def _install_signal_handlers() -> None:
    state = {"stopping": False}

    def handler(signum: int, frame: object) -> None:
        if state["stopping"]:
            return  # already shutting down; the launcher kills us if that takes too long
        state["stopping"] = True
        log.warning("received %s: stopping", signal.Signals(signum).name)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.parallel.worker")
    ap.add_argument("--main", required=True)
    ap.add_argument("--package", default=".")
    ap.add_argument("main_args", nargs=argparse.REMAINDER, help="arguments for the user's main, after --")
    args = ap.parse_args(argv)
    main_args = args.main_args[1:] if args.main_args[:1] == ["--"] else args.main_args
    sys.argv = [args.main] + main_args  # the user's main may parse sys.argv: show it only its own arguments
    die_with_parent()
    _install_signal_handlers()
    package = os.path.abspath(args.package)
    if package not in sys.path:
        sys.path.insert(0, package)
    spec = configure_from_env()
    node = spec.node_id if spec is not None else "?"
    if not logging.getLogger().handlers:
        logging.basicConfig(level=os.environ.get("RLPIPE_LOG_LEVEL", "INFO"),
                            format=f"[node {node}] %(asctime)s %(levelname)s %(name)s: %(message)s")
    fn = load_main(args.main)
    try:
        rc = fn()
    except KeyboardInterrupt:
        log.warning("node %s interrupted", node)
        return 130
    except KeyMismatchError as e:  # a configuration error: restarting would not help
        log.error("%s", e)
        return 2
    except Exception:
        traceback.print_exc()
        log.error("node %s crashed (exit code %d)", node, CRASH_EXIT_CODE)
        return CRASH_EXIT_CODE
    finally:
        if spec is not None:
            remove_ipc_files([spec])  # the launcher may be gone (killed): leave nothing in the temp folder
    return rc if isinstance(rc, int) else 0


def exit_now(code: int) -> None:
    """End the node process with ``code`` right after its main: run the ``atexit`` handlers and flush the
    output, then skip the interpreter's teardown (freeing torch and every module takes seconds when several
    nodes end at once on a busy machine; nothing of it is needed once the handlers have run)."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
                pass
        os._exit(code)


if __name__ == "__main__":
    exit_now(main())
