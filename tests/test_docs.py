"""Every ```python block of README.md and docs/*.md runs (issue 29; issue 27 item 8).

The blocks of one page run in order in one subprocess whose working directory is a fresh temporary
folder (so a block may use a file an earlier block of the same page wrote, e.g. a checkpoint), each in
a fresh namespace and under a timeout. The repository's root is on ``sys.path`` (``from examples...``).

A block is skipped when the line before it (blank lines aside) is an HTML comment:

- ``<!-- no-run -->``: not runnable here (e.g. needs several machines); use sparingly;
- ``<!-- needs: EXTRA -->``: needs an optional extra of setup.cfg (``atari``, ``mujoco``, ``ray``, ...);
  skipped, with the reason shown, when a module of that extra is not installed;
- ``<!-- run-by: tests/FILE.py -->``: that test file runs the block (e.g. with a smaller training budget).

A ``print(...)  # TEXT`` line promises what it prints: the block's output must contain a line ``TEXT``
(the commented prints in order). Each block is its own test (``README.md:40``, ``docs/runs.md:97``, ...),
so a failure names the block.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT = 60  # seconds per block: a hang guard; the blocks take a few seconds at most
# The modules each optional extra provides (what a block marked `<!-- needs: EXTRA -->` imports).
EXTRA_MODULES = {
    "atari": ["ale_py", "cv2"],
    "mujoco": ["mujoco"],
    "envpool": ["envpool"],
    "ray": ["ray"],
    "video": ["moviepy", "pygame"],
    "dist": ["zmq", "cryptography"],
    "log": ["tensorboard"],
    "offline": ["minari", "jax"],
}
PROMISE = re.compile(r"^\s*print\(.*\)\s+#\s*(.+?)\s*$", re.M)
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*(no-run|needs:\s*([\w, -]+?)|run-by:\s*([\w/.]+))\s*-->\s*$")


class Block(NamedTuple):
    page: Path
    line: int
    code: str
    skip: Optional[str]  # the reason, when skipped


def _marker(text: str, start: int) -> Optional[re.Match]:
    before = text[:start].rstrip("\n").rsplit("\n", 1)[-1].strip()
    return MARK.search(before)


def _skip_reason(mark: Optional[re.Match]) -> Optional[str]:
    if mark is None:
        return None
    if mark.group(1) == "no-run":
        return "marked <!-- no-run --> in the page"
    if mark.group(3):
        if not (ROOT / mark.group(3)).is_file():
            raise ValueError(f"<!-- run-by: {mark.group(3)} -->: no such test file")
        return f"run by {mark.group(3)} (with a smaller budget)"
    for extra in (e.strip() for e in mark.group(2).split(",")):
        if extra not in EXTRA_MODULES:
            raise ValueError(f"<!-- needs: {extra} -->: unknown extra (known: {', '.join(EXTRA_MODULES)})")
        missing = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
        if missing:
            return f"needs the '{extra}' extra (pip install -e '.[{extra}]'): {', '.join(missing)} not installed"
    return None


def collect(page: Path) -> List[Block]:
    text = page.read_text()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), _skip_reason(_marker(text, m.start())))
            for m in FENCE.finditer(text)]


BLOCKS = [b for page in PAGES for b in collect(page)]

# Runs inside the subprocess: each block in a fresh namespace, its outcome as one JSON line in the report file.
RUNNER = r"""
import contextlib, io, json, os, signal, sys, traceback
report = open(os.environ["RLPIPE_DOCS_REPORT"], "w")
blocks = json.loads(sys.stdin.read())
def alarm(signum, frame):
    raise TimeoutError("the block did not finish within %d s" % TIMEOUT)
signal.signal(signal.SIGALRM, alarm)
for line, code in blocks:
    signal.alarm(TIMEOUT)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "%s:%d" % (PAGE, line), "exec"), {"__name__": "__main__"})
        outcome = None
    except SystemExit as e:
        outcome = None if e.code in (None, 0) else "SystemExit(%r)\n" % (e.code,)
    except BaseException:
        outcome = traceback.format_exc()
    finally:
        signal.alarm(0)
    sys.stdout.write(out.getvalue())
    report.write(json.dumps([line, outcome, out.getvalue()]) + "\n")
    report.flush()
"""

_results: Dict[Path, Dict[int, Optional[str]]] = {}


def broken_promises(code: str, printed: str) -> List[str]:
    """The ``print(...)  # TEXT`` promises of ``code`` that ``printed`` does not keep, in order."""
    lines, at, broken = [x.strip() for x in printed.splitlines()], 0, []
    for want in PROMISE.findall(code):
        try:
            at = lines.index(want, at) + 1
        except ValueError:
            broken.append(want)
    return broken


def run_page(page: Path) -> Dict[int, Optional[str]]:
    """Run the page's runnable blocks once (the first test of the page does it); line -> error or None."""
    if page in _results:
        return _results[page]
    blocks = [(b.line, b.code) for b in BLOCKS if b.page == page and b.skip is None]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MPLBACKEND="Agg", SDL_VIDEODRIVER="dummy")
    code = RUNNER.replace("TIMEOUT", str(BLOCK_TIMEOUT)).replace("PAGE", repr(str(page.relative_to(ROOT))))
    with tempfile.TemporaryDirectory(prefix="rlpipe-docs-") as tmp:
        cwd = os.path.join(tmp, "work")
        os.mkdir(cwd)
        env["RLPIPE_DOCS_REPORT"] = report = os.path.join(tmp, "report.jsonl")
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = proc.communicate(json.dumps(blocks).encode(), timeout=BLOCK_TIMEOUT * (len(blocks) + 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        with open(report) if os.path.exists(report) else open(os.devnull) as f:
            outcomes = {line: (err, printed) for line, err, printed in (json.loads(x) for x in f.read().splitlines())}
    output = out.decode(errors="replace")[-4000:]
    results = {}
    for line, block_code in blocks:
        if line in outcomes:
            err, printed = outcomes[line]
            broken = [] if err else broken_promises(block_code, printed)
            if broken:
                err = f"printed:\n{printed}\nbut not (in this order) the commented lines: {broken}"
            results[line] = None if err is None else f"{err}\n--- page output ---\n{output}"
        else:
            results[line] = f"the page's process ended (code {proc.returncode}) before this block finished\n{output}"
    _results[page] = results
    return results


@pytest.mark.multiprocess
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page.relative_to(ROOT)}:{b.line}" for b in BLOCKS])
def test_code_block_runs(block: Block) -> None:
    if block.skip:
        pytest.skip(block.skip)
    error = run_page(block.page)[block.line]
    assert error is None, f"{block.page.relative_to(ROOT)}:{block.line} failed:\n{error}"


def test_every_page_has_its_blocks_found() -> None:
    """The fence pattern finds what a plain count of ```python fences finds (no block silently missed)."""
    for page in PAGES:
        assert len(collect(page)) == page.read_text().count("```python"), page


def test_a_broken_print_promise_is_caught() -> None:
    code = 'print(1)  # 1\nprint(2)  # 3\n'
    assert broken_promises(code, "1\n2\n") == ["3"]
    assert broken_promises(code, "1\n3\n") == []
    assert broken_promises('print(2)  # 2\nprint(1)  # 1\n', "1\n2\n") == ["1"]  # order matters


def test_the_readme_and_the_guides_have_code_blocks() -> None:
    pages = {b.page.name for b in BLOCKS}
    for name in ("README.md", "runtime.md", "contexts.md", "learner.md", "replay.md", "envs.md", "ppo.md", "runs.md"):
        assert name in pages, f"{name} has no python block"


# --------------------------------------------------------------------------- the pages as markdown and the site
HEADING = re.compile(r"^#{1,6} ")
# A line that may follow a heading directly: a list, a table, a fence, HTML, a quote, an image, an admonition.
NOT_A_PARAGRAPH = re.compile(r"^(\s*$|\s*([-*+] |\d+\. |\||```|<|>|!|:::|--8<--))")


def _hooks():
    spec = importlib.util.spec_from_file_location("rlpipe_docs_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def headings_with_a_paragraph_glued_on(text: str) -> List[str]:
    """The headings (outside code fences) followed directly by a line of paragraph text: the first line of
    a paragraph joined onto a heading (``## Several machines On several machines, ...``) becomes part of
    the heading, and the rest of the paragraph hangs under it."""
    lines, fence, bad = text.split("\n"), False, []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and HEADING.match(line) and i + 1 < len(lines) and not NOT_A_PARAGRAPH.match(lines[i + 1]):
            bad.append(f"{i + 1}: {line[:70]}")
    return bad


def test_no_heading_swallows_the_paragraph_after_it() -> None:
    assert headings_with_a_paragraph_glued_on("## Two\n\ntext\n") == []
    assert headings_with_a_paragraph_glued_on("## Added\n- an item\n```python\n# a comment\nx\n```\n") == []
    assert headings_with_a_paragraph_glued_on("## Several machines On several\nmachine A learns\n") == [
        "1: ## Several machines On several"]
    for page in [*PAGES, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs" / "api").glob("*.md"))]:
        bad = headings_with_a_paragraph_glued_on(page.read_text())
        assert not bad, f"{page.relative_to(ROOT)}: a heading followed directly by paragraph text (a blank line " \
                        f"missing, or the paragraph's first line joined onto the heading): {bad}"


def test_the_home_page_is_the_readme_with_links_for_the_site() -> None:
    """docs/index.md is README.md (one source; docs/hooks.py puts it there): nothing of its own to drift."""
    hooks = _hooks()
    index = re.sub(r"<!--.*?-->", "", (ROOT / "docs" / "index.md").read_text(), flags=re.S).strip()
    assert index == hooks.README_SNIPPET, \
        "docs/index.md must be the one line --8<-- \"README.md\" (edit README.md: it is the home page too)"
    site = hooks.readme_for_site((ROOT / "README.md").read_text())
    targets = re.findall(r"\]\(([^)\s]+)\)", site)
    assert targets, "README.md has no links?"
    for target in targets:
        if re.match(r"[a-z]+:|#", target):
            continue  # a URL or an anchor on the page itself
        path = target.split("#")[0]
        assert (ROOT / "docs" / path).is_file(), \
            f"README.md's link {target!r} has no page on the site (docs/{path}); link docs/ pages, or make " \
            f"docs/hooks.py's README_LINKS rewrite it"


def test_sphinx_roles_become_cross_references() -> None:
    link = _hooks().link_sphinx_roles
    assert link("a :class:<code>~pipeline.data.records.TrainOutput</code>.") == \
        'a <autoref identifier="pipeline.data.records.TrainOutput"><code>TrainOutput</code></autoref>.'
    assert link(":meth:<code>~pipeline.learner.Learner.update()</code>") == \
        '<autoref identifier="pipeline.learner.Learner.update"><code>update()</code></autoref>'
    assert link(":mod:<code>pipeline.envs.atari</code>") == \
        '<autoref identifier="pipeline.envs.atari" optional><code>pipeline.envs.atari</code></autoref>'
    assert link(":attr:<code>last_outputs</code>") == "<code>last_outputs</code>"


DOCS_MODULES = {"mkdocs": "mkdocs", "material": "mkdocs-material", "mkdocstrings_handlers.python": "mkdocstrings[python]"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built as CI builds it (``mkdocs build --strict``; about 10 s) into a temporary folder."""
    missing = [pkg for mod, pkg in DOCS_MODULES.items() if importlib.util.find_spec(mod.split(".")[0]) is None
               or importlib.util.find_spec(mod) is None]
    if missing:
        pytest.skip(f"needs the 'docs' extra (pip install -e '.[docs]'): {', '.join(missing)} not installed")
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert p.returncode == 0, f"mkdocs build --strict failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return out


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_site_has_no_raw_cross_reference(site: Path) -> None:
    """A docstring's ``:class:`~pipeline.x.Y``` is a link on the site, not the text ``~pipeline.x.Y``."""
    raw = re.compile(r"~(?:pipeline|middleware|contexts)\.[\w.]+|:(?:py:)?(?:meth|class|func|attr|mod|data|exc|obj|"
                     r"const):<")
    found = {}
    for html in sorted(site.rglob("*.html")):
        hits = raw.findall(html.read_text(encoding="utf-8"))
        if hits:
            found[str(html.relative_to(site))] = sorted(set(hits))
    assert not found, f"cross references left as raw text (docs/hooks.py turns Sphinx roles into links): {found}"
    learner = (site / "api" / "learner" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="../data/#pipeline.data.records.TrainBatch"',
                     learner), "the Learner's TrainBatch reference is not a link to the data page"


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_site_home_page_is_the_readme(site: Path) -> None:
    home = (site / "index.html").read_text(encoding="utf-8")
    for heading in re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(), flags=re.M):
        assert f">{heading}<" in home.replace("&#39;", "'"), f"README.md's section {heading!r} is not on the home page"
    assert 'href="docs/' not in home and 'href="runs/#training-on-a-gpu"' in home
