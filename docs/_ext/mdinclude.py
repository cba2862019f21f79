"""The changelog page from CHANGELOG.md, which stays Markdown for the
repository's readers:

    .. markdown-include:: ../CHANGELOG.md

reads the small part of Markdown the changelog uses (headings, bullets
with continuation lines, paragraphs, `code`, [links](url)) and hands it to
Sphinx as reStructuredText.  Its first heading is left out: the page has
its own title.  Anything else is kept as text.
"""
import os
import re

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

_UNDERLINE = {2: "-", 3: "~", 4: "^"}


def _inline(text):
    text = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r"`\1 <\2>`__", text)
    return re.sub(r"(?<!`)`([^`]+)`(?!`|_)", r"``\1``", text)


def to_rest(markdown):
    out = []
    first = True
    for line in markdown.splitlines():
        heading = re.match(r"^(#{1,4})\s+(.*)$", line)
        if heading:
            level, title = len(heading.group(1)), heading.group(2).strip()
            if first and level == 1:
                first = False
                continue
            first = False
            title = _inline(title)
            out += ["", title, _UNDERLINE.get(level, "^") * len(title), ""]
            continue
        first = False
        out.append(_inline(line.rstrip()))
    return out


class MarkdownInclude(SphinxDirective):
    required_arguments = 1

    def run(self):
        path = os.path.normpath(os.path.join(
            os.path.dirname(self.env.doc2path(self.env.docname)),
            self.arguments[0]))
        self.env.note_dependency(path)
        with open(path, encoding="utf-8") as f:
            lines = to_rest(f.read())
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList(lines, path), self.content_offset,
                                node, match_titles=True)
        return node.children


def setup(app):
    app.add_directive("markdown-include", MarkdownInclude)
    return {"parallel_read_safe": True, "version": "1"}
