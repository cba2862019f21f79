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
        word = m.group(1)
        start, end = m.start(), m.end()
        # A quoted code word keeps its quotes inside the literal: quotes
        # outside it would be paired by smart quotes the wrong way round.
        quoted = (start > 0 and end < len(line) and line[start - 1] in "'\""
                  and line[end] == line[start - 1] and start - 1 >= pos)
        if quoted:
            out.append(_escape(line[pos:start - 1]))
            start, end = start - 1, end + 1
            word = line[start:end]
        else:
            out.append(_escape(line[pos:start]))
        # A possessive after a code word ("__dlpack__'s"): smart quotes
        # would take the quote for an opening one.
        if not quoted and line[end:end + 1] == "'" and \
                line[end + 1:end + 2].isalpha():
            line = line[:end] + "\u2019" + line[end + 1:]
        role = None if quoted or not link else link(word)
        # An escaped space lets markup touch a non-space neighbour.
        before = start > 0 and not line[start - 1].isspace()
        after = end < len(line) and not line[end].isspace()
        out.append("\\ " * before + (role or "``%s``" % word)
                   + "\\ " * after)
        pos = end
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
