"""The docs tell the truth: printed values match their comments; the context table lists every field."""
import contextlib
import dataclasses
import io
import os
import re

from contexts import OnlineRLContext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme(page: str = 'README.md') -> str:
    with open(os.path.join(ROOT, page)) as f:
        return f.read()


def test_learner_update_snippet_prints_what_its_comment_says():
    blocks = re.findall(r'```python\n(.*?)```', readme('docs/learner.md'), re.S)
    block = next(b for b in blocks if 'RegressionLearner' in b)
    expected = [m.group(1).strip() for m in re.finditer(r'print\(.*\)\s+#\s*(\S+)\s*$', block, re.M)]
    assert expected, 'the snippet has no commented print'
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, 'README-snippet', 'exec'), {})
    assert out.getvalue().split() == expected


def test_context_table_lists_every_field_with_its_kept_flag():
    text = readme('docs/contexts.md')
    section = text[text.index('## The context: `OnlineRLContext` fields'):]
    end = section.find('\n## ', 5)
    section = section if end < 0 else section[:end]
    rows = re.findall(r'^\| `(\w+)` \| (.+?) \| (.+?) \| (yes|no) \|$', section, re.M)
    table = {name: kept == 'yes' for name, _, _, kept in rows}
    fields = {f.name for f in dataclasses.fields(OnlineRLContext) if not f.name.startswith('_')}
    assert set(table) == fields
    kept = set(OnlineRLContext._default_kept) | {'total_step'}
    assert {n for n, k in table.items() if k} == kept
