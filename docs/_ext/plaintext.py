"""Plain-text comments and docstrings turned into reStructuredText.

The C header's comments and the C extension's docstrings are written as
plain text, for readers of the header and of help().  Sphinx reads
reStructuredText, where ``*out``, ``name_`` or an indented formula mean
something else.  This module escapes such text, marks code words as
literals, and turns an indented block into a literal block, so the text
renders as written and produces no warning.
"""
import re

# A word that is code: a keyword set to a constant ("copy=True"), a dunder
# name, a dotted or underscored identifier, optionally called with an
# argument list ("as_dlpack(obj)").
_CODE = re.compile(
    r"(?<![\w`])([A-Za-z_]\w*=(?:True|False|None|-?\d+)(?!\w)"
    r"|(?:[A-Za-z_]\w*\.)*(?:__\w+__|[A-Za-z]\w*_\w*[A-Za-z0-9]"
    r"|[A-Za-z]\w+\.[A-Za-z_]\w+)(?:\([^()]*\))?)")


def _inline(line, link=None):
    """Escapes one line of text and marks its code words as literals (or,
    through link(word), as cross-references)."""
    out = []
    pos = 0
    for m in _CODE.finditer(line):
        out.append(_escape(line[pos:m.start()]))
        word = m.group(1)
        role = link(word) if link else None
        # An escaped space lets markup touch a non-space neighbour.
        before = m.start() > 0 and not line[m.start() - 1].isspace()
        after = m.end() < len(line) and not line[m.end()].isspace()
        out.append("\\ " * before + (role or "``%s``" % word)
                   + "\\ " * after)
        pos = m.end()
    out.append(_escape(line[pos:]))
    return "".join(out)


def _escape(text):
    return re.sub(r"([*`|\\_])", r"\\\1", text)


def to_rest(text, link=None):
    """Returns text as reStructuredText lines: paragraphs escaped, lines
    indented deeper than the text's first line kept as a literal block."""
    lines = text.expandtabs().splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return []
    base = len(lines[0]) - len(lines[0].lstrip())
    out = []
    in_literal = False
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped and indent > base:
            if not in_literal:
                # Close the paragraph with "::" so the block is literal.
                while out and not out[-1].strip():
                    out.pop()
                if out:
                    out[-1] = out[-1].rstrip()
                    out[-1] += ":" if out[-1].endswith(":") else " ::"
                else:
                    out.append("::")
                out.append("")
                in_literal = True
            out.append("    " + line[base:])
            continue
        if in_literal and stripped:
            out.append("")
            in_literal = False
        out.append(_inline(stripped, link) if stripped else "")
    return out
