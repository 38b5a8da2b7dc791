"""MkDocs hooks (``hooks:`` in mkdocs.yml).

1. The home page is README.md. ``docs/index.md`` is one snippet line, ``--8<-- "README.md"``; here it is
   replaced by README.md's text with its links made relative to ``docs/`` (``docs/runs.md`` -> ``runs.md``,
   ``CHANGELOG.md`` -> ``changelog.md``), so README.md is the one source of both (tests/test_docs.py checks
   that index.md stays that one line).
2. The docstrings use Sphinx roles (``:class:`~pipeline.data.records.TrainOutput```, ``:meth:`x```);
   mkdocstrings renders the code span but leaves the role's name in front of it. A role with a ``~``
   target becomes a cross reference (autorefs resolves it; the title is the last name, as in Sphinx; a
   target missing from the API reference fails the strict build); a role with a dotted target becomes
   a link when that object is in the API reference and stays code otherwise; the other role names are
   dropped.
"""
import re
from pathlib import Path

README_SNIPPET = '--8<-- "README.md"'
_SNIPPET_LINE = re.compile(r'^--8<-- "README\.md"[ \t]*$', re.M)
# README.md's links as the site needs them: (pattern, replacement), applied in order.
README_LINKS = [
    (re.compile(r'(\]\(|src=")docs/'), r'\1'),                  # docs/runs.md#x -> runs.md#x
    (re.compile(r'\]\(CHANGELOG\.md(#[^)]*)?\)'), r'](changelog.md\1)'),
]

_ROLES = r':(?:py:)?(?:meth|class|func|attr|mod|data|exc|obj|const):'
_TILDE_REF = re.compile(_ROLES + r'<code>~([A-Za-z_][\w.]*\.)([A-Za-z_]\w*)(\(\))?</code>')
_DOTTED_REF = re.compile(_ROLES + r'<code>([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(\(\))?</code>')
_ROLE = re.compile(_ROLES + r'(?=<code|<a )')


def readme_for_site(text: str) -> str:
    """README.md's text with its links made relative to ``docs/`` (what the home page shows)."""
    for pattern, replacement in README_LINKS:
        text = pattern.sub(replacement, text)
    return text


def link_sphinx_roles(html: str) -> str:
    """Sphinx roles in rendered docstrings -> autorefs cross references (see the module doc)."""
    html = _TILDE_REF.sub(lambda m: f'<autoref identifier="{m[1]}{m[2]}"><code>{m[2]}{m[3] or ""}</code></autoref>',
                          html)
    html = _DOTTED_REF.sub(lambda m: f'<autoref identifier="{m[1]}" optional><code>{m[1]}{m[2] or ""}</code>'
                                     f'</autoref>', html)
    return _ROLE.sub('', html)


def on_page_markdown(markdown, page, config, **kwargs):
    if page.file.src_uri == 'index.md' and _SNIPPET_LINE.search(markdown):
        readme = Path(config.config_file_path).parent / 'README.md'
        text = readme_for_site(readme.read_text(encoding='utf-8'))
        markdown = _SNIPPET_LINE.sub(lambda _: text, markdown)
    return markdown


def on_page_content(html, **kwargs):
    return link_sphinx_roles(html)
