"""Checks the built HTML for markup that renders wrong although Sphinx
builds it without a warning: reST shown as text (a role such as
``:func:`x```, double backticks, a ``.. directive::``, a literal block's
``::``) and quotes paired the wrong way round (``’word‘``).

    python docs/check_html.py docs/html

`make docs` runs it after Sphinx; tests/python/test_docs_html.py checks
that it catches each fault.  Prints one line per fault, exits 1 if any.
Standard library only.
"""
import html.parser
import os
import re
import sys

# Text that is reST, not prose, once rendered.
_RAW = [
    (re.compile(r":(?:[a-z]+:)?[a-z]+:`"), "a reST role shown as text"),
    (re.compile(r"``"), "double backticks shown as text"),
    (re.compile(r"(?:^|\s)\.\. [a-z][a-z-]*::"), "a reST directive shown "
     "as text"),
    (re.compile(r"\w::(?:\s|$)"), "a literal block's '::' shown as text"),
    (re.compile(r"`[^`\s][^`]*`"), "backticks shown as text"),
]
# Quotes the wrong way round: a closing quote opening a word, an opening
# quote closing one.  (’ inside a word is an apostrophe.)
_QUOTES = [
    (re.compile(r"(?:^|[\s(\[])[’”]\w"), "a closing quote opens a word"),
    (re.compile(r"\w[.,;:!?)]?[‘“](?:[\s.,;:!?)\]]|$)"),
     "an opening quote closes a word"),
    (re.compile(r"\w‘\w"), "an opening quote as an apostrophe"),
]
# Elements whose text is code: left out, or counted as one word (X).
_SKIP = {"pre", "script", "style", "head"}
_CODE = {"code", "kbd", "samp", "tt"}
# Elements after which a new run of text starts.
_BLOCK = {"p", "li", "dt", "dd", "td", "th", "h1", "h2", "h3", "h4", "h5",
          "h6", "div", "section", "blockquote", "caption", "title", "br"}


class _Text(html.parser.HTMLParser):
    """The prose of a page, one string per block, code as 'X'."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks = [[]]
        self.skip = 0
        self.code = 0

    def handle_starttag(self, tag, attrs):
        classes = dict(attrs).get("class") or ""
        if tag in _SKIP or "highlight" in classes.split():
            self.skip += 1
            self._skipping = getattr(self, "_skipping", []) + [tag]
        elif tag in _CODE or (tag == "span" and "pre" in classes.split()
                              and self.code):
            if tag in _CODE:
                if not self.code and not self.skip:
                    self.blocks[-1].append("X")
                self.code += 1
        if tag in _BLOCK:
            self.blocks.append([])

    def handle_endtag(self, tag):
        stack = getattr(self, "_skipping", [])
        if stack and tag == stack[-1]:
            stack.pop()
            self.skip -= 1
        elif tag in _CODE and self.code:
            self.code -= 1
        if tag in _BLOCK:
            self.blocks.append([])

    def handle_data(self, data):
        if not self.skip and not self.code:
            self.blocks[-1].append(data)

    def texts(self):
        return [" ".join("".join(b).split()) for b in self.blocks
                if "".join(b).strip()]


def check_text(texts):
    """Faults in blocks of prose: [(why, excerpt)]."""
    faults = []
    for text in texts:
        for pattern, why in _RAW + _QUOTES:
            m = pattern.search(text)
            if m:
                faults.append((why, text[max(0, m.start() - 30):
                                         m.end() + 30]))
    return faults


def check_page(source):
    parser = _Text()
    # Sphinx's own search page and index have no prose of ours.
    parser.feed(source)
    parser.close()
    return check_text(parser.texts())


def check_tree(root):
    """Faults of every page under root: [(page, why, excerpt)]."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("_"))
        for name in sorted(files):
            if not name.endswith(".html") or name in ("search.html",
                                                      "genindex.html"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                faults = check_page(f.read())
            found += [(os.path.relpath(path, root), why, excerpt)
                      for why, excerpt in faults]
    return found


def main(argv):
    if len(argv) != 2:
        print("usage: check_html.py HTML-FOLDER", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(argv[1], "index.html")):
        print("check_html: %s has no index.html" % argv[1], file=sys.stderr)
        return 2
    faults = check_tree(argv[1])
    for page, why, excerpt in faults:
        print("%s: %s: ...%s..." % (page, why, excerpt))
    if faults:
        print("check_html: %d fault(s) in the rendered docs" % len(faults))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
