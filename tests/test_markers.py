"""The test markers (slow, multiprocess, bench): registered, used, left out by the README's fast command,
and the guard that fails a test starting a Python process without ``multiprocess`` (tests/process_guard.py)."""
import configparser
import multiprocessing
import multiprocessing.process
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from process_guard import process_starts, starts_python, unmarked_start

ROOT = Path(__file__).resolve().parents[1]
FULL = "python -m pytest -q"


def registered():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    section = cfg["tool:pytest"]
    names = [line.split(":")[0].strip() for line in section["markers"].strip().splitlines()]
    return names, section["addopts"].split()


def test_the_markers_are_registered_and_a_misspelled_one_is_refused():
    names, addopts = registered()
    assert names == ["slow", "multiprocess", "bench"]
    assert "--strict-markers" in addopts
    assert not any(a == "-m" or a.startswith("-m") and not a.startswith("--") for a in addopts), \
        "addopts must not select tests: the README's full command (and CI's) runs every test"


def test_every_registered_marker_marks_some_test():
    text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != "test_markers.py")
    for name in registered()[0]:
        assert re.search(rf"pytest\.mark\.{name}\b", text), f"no test is marked {name}"


def test_the_readme_gives_the_full_command_and_a_fast_one_that_leaves_out_every_marker():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run the tests"):]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)[:2]
    assert blocks[0].strip() == FULL, "the first command is the whole suite, as CI runs it"
    fast = re.fullmatch(r'python -m pytest -q -m "(.*)"', blocks[1].strip())
    assert fast, blocks[1]
    assert sorted(re.findall(r"not (\w+)", fast.group(1))) == sorted(registered()[0])
    assert fast.group(1) == " and ".join(f"not {name}" for name in registered()[0])
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.findall(r'"\$PY" -m pytest(.*)', ci) and all(x.strip() == "-q" for x in re.findall(r'"\$PY" -m pytest(.*)', ci))


def test_which_commands_count_as_starting_python():
    for args in ([sys.executable, "-c", "pass"], ["python3", "x.py"], "python -m pytest", ["/usr/bin/python3.11", "-V"],
                 ["rlpipe", "run", "--package", "."], "cd /tmp && python x.py"):
        assert starts_python(args), args
    for args in (["git", "rev-parse", "HEAD"], ["/sbin/ldconfig", "-p"], "ls python_files", ["echo", "mypython"]):
        assert not starts_python(args), args


def test_the_message_names_the_test_and_what_it_started():
    marked = SimpleNamespace(nodeid="t.py::a", get_closest_marker=lambda name: object())
    unmarked = SimpleNamespace(nodeid="t.py::b", get_closest_marker=lambda name: None)
    assert unmarked_start(marked, ["subprocess python"]) == ""
    assert unmarked_start(unmarked, []) == ""
    message = unmarked_start(unmarked, ["subprocess python x", "multiprocessing process P"])
    assert message.startswith("t.py::b started a Python process (subprocess python x (and 1 more))")
    assert "@pytest.mark.multiprocess" in message


@pytest.mark.multiprocess
def test_the_guard_sees_subprocesses_and_multiprocessing_processes(tmp_path, monkeypatch):
    before = (subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start)
    (tmp_path / "probes_on_import.py").write_text("import subprocess, sys\n"
                                                  "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with process_starts() as started:
        import probes_on_import  # noqa: F401  (a library's probe on first import, as glfw's: not counted)
        assert started == []
        subprocess.run(["true"], check=True)
        assert started == []
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        p = multiprocessing.get_context("spawn").Process(target=os.getpid, name="guard-check")
        p.start()
        p.join()
    assert len(started) == 2 and started[0].startswith("subprocess ") and "guard-check" in started[1]
    assert (subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start) == before   # put back
