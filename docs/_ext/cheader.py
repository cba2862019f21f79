"""The C reference, read from the installed header's own comments.

    .. c-header:: include/caibridge.h

(a path from the source tree's top) becomes Sphinx C-domain entries in the
header's order: each exported function (``CAI_API``) with the comment above
it, the types with their members and the comments beside them, the macros,
and a rubric for each ``/* ---- section ---- */`` line.  An exported
function without a comment is a warning, so ``make docs`` (warnings are
errors) fails until it is documented.  No Doxygen: the header's comment
style is ours and regular, and this reads it.
"""
import os
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import plaintext

logger = logging.getLogger(__name__)

# Macros for the compiler, not for readers.
_HIDDEN_MACROS = re.compile(r"^(CAIBRIDGE_H|CAI_API|CAI_WUR|CAI_NONNULL)\b")
_ANNOTATIONS = re.compile(r"\bCAI_API\b|\bCAI_WUR\b|\bCAI_NONNULL\([^)]*\)")


def _comment_text(block):
    """The text of a /* ... */ comment, without its frame."""
    body = block.strip()[2:-2]
    lines = []
    for line in body.splitlines():
        line = re.sub(r"^\s*\* ?", "", line) if line.strip().startswith("*") \
            else line.strip()
        lines.append(line.rstrip())
    return "\n".join(lines).strip("\n")


def _split_trailing(line):
    """'int x; /* why */' -> ('int x;', 'why')."""
    m = re.match(r"^(.*?)\s*/\*(.*)\*/\s*$", line)
    if m:
        return m.group(1).strip(), m.group(2).strip()
    return line.strip(), ""


class Header:
    """The documented entries of a header, as reStructuredText lines."""

    def __init__(self, text, path):
        self.path = path
        self.lines = text.splitlines()
        self.functions = []
        self.undocumented = []

    def _link(self, word):
        name = word.split("(")[0]
        if name in self.functions:
            return ":c:func:`%s`" % name
        return None

    def _text(self, comment, indent="   "):
        return [indent + line if line else ""
                for line in plaintext.to_rest(comment, self._link)]

    def rest(self):
        out = []
        # Function names first, so comments can link to later functions.
        for line in self.lines:
            m = re.match(r"^CAI_API\b.*?\b(cai_\w+)\s*\(", line)
            if m:
                self.functions.append(m.group(1))
        i = 0
        pending = ""
        first_comment = True
        lines = self.lines
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped.startswith("/*"):
                block = [line]
                while "*/" not in lines[i]:
                    i += 1
                    block.append(lines[i])
                i += 1
                text = _comment_text("\n".join(block))
                section = re.match(r"^-+\s*(.*?)\s*-+$", text)
                if first_comment:
                    first_comment = False  # the file's own header
                elif section:
                    title = re.sub(r"\s*\(.*\)$", "", section.group(1))
                    out += ["", ".. rubric:: " + title, ""]
                    pending = ""
                else:
                    pending = text
                continue
            if stripped.startswith("#define "):
                i = self._macros(i, pending, out)
                pending = ""
                continue
            if stripped.startswith(("typedef enum", "typedef struct",
                                    "enum {")) and stripped.endswith("{"):
                i = self._aggregate(i, pending, out)
                pending = ""
                continue
            if stripped.startswith("typedef "):
                decl = stripped.rstrip(";")
                m = re.match(r"^typedef struct (\w+) (\w+)$", decl)
                if m:
                    decl = m.group(2)
                else:
                    decl = decl[len("typedef "):]
                out += ["", ".. c:type:: " + decl, ""]
                out += self._text(pending) if pending else []
                pending = ""
                i += 1
                continue
            if stripped.startswith("CAI_API"):
                decl = stripped
                while not decl.rstrip().endswith(";"):
                    i += 1
                    decl += " " + lines[i].strip()
                i += 1
                decl = " ".join(_ANNOTATIONS.sub("", decl).split()).rstrip(";")
                decl = re.sub(r"\( ", "(", decl).strip()
                name = re.search(r"(cai_\w+)\s*\(", decl).group(1)
                if not pending:
                    self.undocumented.append(name)
                out += ["", ".. c:function:: " + decl, ""]
                out += self._text(pending) if pending else []
                pending = ""
                continue
            if stripped and not stripped.startswith("#") and \
                    stripped not in ("extern \"C\" {", "}"):
                pending = ""
            i += 1
        return out

    def _macros(self, i, comment, out):
        """The documented macros of consecutive #define lines from
        lines[i], as one entry: the comment above them is the entry's own
        text, not a loose paragraph before it.  Returns the index after."""
        group = []
        lines = self.lines
        while i < len(lines) and lines[i].strip().startswith("#define "):
            stripped = lines[i].strip()
            i += 1
            name = stripped.split()[1]
            if "(" in name or _HIDDEN_MACROS.match(name) or \
                    not re.match(r"^CAI", name):
                continue
            decl, why = _split_trailing(stripped)
            value = decl.split(None, 2)[2] if len(decl.split()) > 2 else ""
            group.append((name, value, why))
        if not group:
            return i
        out += ["", ".. c:macro:: " + group[0][0]]
        out += ["             " + name for name, _, _ in group[1:]]
        out += [""]
        if comment:
            out += self._text(comment) + [""]
        for name, value, why in group:
            text = "``%s``" % name if len(group) > 1 else "Value:"
            if value:
                text += (" = ``%s``" if len(group) > 1 else " ``%s``") % value
            out += ["   " + ("- " if len(group) > 1 else "") + text]
            if why:
                out[-1] += ": " + " ".join(
                    s.strip() for s in plaintext.to_rest(why))
        return i

    def _aggregate(self, i, comment, out):
        """An enum or struct from lines[i] (its opening line) to its
        closing '} name;'.  Returns the index after it."""
        lines = self.lines
        head = lines[i].strip()
        members = []
        i += 1
        while not lines[i].strip().startswith("}"):
            decl, why = _split_trailing(lines[i].strip())
            if decl:
                members.append((decl.rstrip(",;"), why))
            i += 1
        close = lines[i].strip().rstrip(";").lstrip("}").strip()
        i += 1
        is_enum = "enum" in head
        tag = re.match(r"^(?:typedef )?(?:enum|struct)\s*(\w*)", head).group(1)
        if is_enum:
            name = close or tag
            out += ["", ".. c:enum:: " + name if name else "", ""]
            if not name:
                out.pop(-2)
            body = (self._text(comment, "   " if name else "") if comment
                    else [])
            out += body
            indent = "   " if name else ""
            for decl, why in members:
                out += ["", indent + ".. c:enumerator:: " + decl, ""]
                out += self._text(why, indent + "   ") if why else []
        else:
            out += ["", ".. c:type:: " + close, ""]
            out += ["   ``typedef struct %s { ... } %s``" % (tag, close), ""]
            out += self._text(comment) if comment else []
            for decl, why in members:
                out += ["", "   .. c:member:: " + decl, ""]
                out += self._text(why, "      ") if why else []
        return i


class CHeader(SphinxDirective):
    required_arguments = 1
    option_spec = {"root": directives.unchanged}

    def run(self):
        root = os.path.join(self.env.srcdir, self.config.cheader_root)
        path = os.path.normpath(os.path.join(root, self.arguments[0]))
        self.env.note_dependency(path)
        with open(path, encoding="utf-8") as f:
            header = Header(f.read(), path)
        text = header.rest()
        for name in header.undocumented:
            logger.warning("%s: %s has no comment above it", path, name,
                           location=self.get_location())
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList(text, path), self.content_offset,
                                node)
        return node.children


def setup(app):
    app.add_config_value("cheader_root", "..", "env")
    app.add_directive("c-header", CHeader)
    return {"parallel_read_safe": True, "version": "1"}
