"""MkDocs hook: the docstrings use Sphinx roles (``:meth:`x```, ``:class:`x```); mkdocstrings renders the
code span but leaves the role's name in front of it. Drop the role names from the rendered HTML."""
import re

_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|attr|mod|data|exc|obj|const):(?=<code|<a )")


def on_page_content(html, **kwargs):
    return _ROLE.sub("", html)
