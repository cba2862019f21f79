"""The Python examples of the docs and the README, found and run.

Every ``.. code-block:: python`` block in docs/**/*.rst and every ```python
fence in README.md is an example; each runs on its own, in a fresh
namespace, so none may lean on a name another block defined.

- tests/python/test_docs_examples.py runs the CPU examples in `make check`
  (one test each) and checks every example for names it never defines.
- The GPU-only examples, those importing Numba, PyCUDA or CuPy, run on a
  GPU through check-gpu.py (gpu_cases.py makes each one a case of its own,
  in its own child process); ``python tests/gpu/doc_examples.py`` runs them
  alone, in TAP, through ``run_gpu_examples(ok, skip)``.

Standard library only: the pytest test and the GPU script both import it.
"""
import ast
import builtins
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# An example importing one of these runs only on a GPU.
GPU_MODULES = ("numba", "pycuda", "cupy")

_RST_START = re.compile(
    r"^(\s*)\.\. (?:code-block|code|sourcecode)::\s*(python3?|py)\s*$")
_MD_START = re.compile(r"^(\s*)```\s*(python3?|py)\s*$")


class Example:
    """One code block: where it is, its code, and what it imports."""

    def __init__(self, path, line, code):
        self.path = os.path.relpath(path, ROOT)
        self.line = line
        self.code = code
        self.tree = ast.parse(code, self.name)
        self.imports = sorted(_imported(self.tree))
        self.gpu = any(m in GPU_MODULES for m in self.imports)

    @property
    def name(self):
        return "%s:%d" % (self.path, self.line)

    def missing(self):
        """The imported modules that are not installed here."""
        return [m for m in self.imports
                if importlib.util.find_spec(m) is None]

    def undefined_names(self):
        """Names the code reads but neither defines nor gets from builtins,
        in any branch, run or not."""
        defined = set(dir(builtins))
        loaded = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    loaded.append(node.id)
                else:
                    defined.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                   ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    defined.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                defined.add(node.name)
        return sorted(set(n for n in loaded if n not in defined))

    def caibridge_mistakes(self, module):
        """What the code asks of the caibridge module that it does not
        have: an attribute (``caibridge.add_dlpak``), or a keyword argument
        a function does not take (``caibridge.as_dlpack(x, bogus=1)``).
        Read from the code, so GPU-only examples are checked on a machine
        without a GPU."""
        import inspect
        aliases = {"caibridge"}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names
                            if a.name == "caibridge" and a.asname}
        mistakes = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "caibridge":
                mistakes += ["from caibridge import %s" % a.name
                             for a in node.names
                             if not hasattr(module, a.name)]
            if not (isinstance(node, ast.Attribute) and
                    isinstance(node.value, ast.Name) and
                    node.value.id in aliases):
                continue
            if not hasattr(module, node.attr):
                mistakes.append("caibridge.%s" % node.attr)
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Call) and
                    isinstance(node.func, ast.Attribute) and
                    isinstance(node.func.value, ast.Name) and
                    node.func.value.id in aliases and
                    hasattr(module, node.func.attr)):
                continue
            try:
                parameters = inspect.signature(
                    getattr(module, node.func.attr)).parameters
            except (TypeError, ValueError):
                continue
            if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
                continue
            mistakes += ["caibridge.%s(%s=...)" % (node.func.attr, k.arg)
                         for k in node.keywords
                         if k.arg is not None and k.arg not in parameters]
        return sorted(set(mistakes))

    def run(self):
        """Runs the example in a fresh namespace; raises what it raises."""
        namespace = {"__name__": "__doc_example__"}
        exec(compile(self.tree, self.name, "exec"), namespace)


def _imported(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _blocks(text, opening, markdown):
    """(line, code) of each block whose first line matches opening: a
    Markdown fence runs to its closing fence, a reST directive to the first
    line indented no deeper than the directive, after its options."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = opening.match(lines[i])
        i += 1
        if not m:
            continue
        indent = len(m.group(1))
        while not markdown and i < len(lines) and (
                not lines[i].strip() or lines[i].strip().startswith(":")):
            i += 1
        start = i
        body = []
        while i < len(lines) and (
                not lines[i].strip().startswith("```") if markdown else
                not lines[i].strip() or
                len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        yield start + 1, _dedent(body)


def _dedent(body):
    while body and not body[-1].strip():
        body.pop()
    margin = min((len(line) - len(line.lstrip())
                  for line in body if line.strip()), default=0)
    return "\n".join(line[margin:] for line in body) + "\n"


def documents(root=ROOT):
    """README.md and every .rst page under docs/, in a stable order."""
    paths = [os.path.join(root, "README.md")]
    for folder, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and
                         d != "html")
        paths += [os.path.join(folder, f) for f in sorted(files)
                  if f.endswith(".rst")]
    return paths


def examples(root=ROOT):
    """Every Python example of the docs and the README."""
    found = []
    for path in documents(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        markdown = path.endswith(".md")
        blocks = _blocks(text, _MD_START if markdown else _RST_START,
                         markdown)
        found += [Example(path, line, code) for line, code in blocks]
    return found


def gpu_examples(root=ROOT):
    return [e for e in examples(root) if e.gpu]


def run_gpu_examples(ok, skip, root=ROOT):
    """Runs each GPU-only example: ok(passed, description, detail) for one
    that ran, skip(description, reason) for one whose library is missing.
    The caller has already checked that a GPU is there."""
    import traceback
    for example in gpu_examples(root):
        description = "docs example %s runs" % example.name
        missing = example.missing()
        if missing:
            skip(description, "not installed: " + ", ".join(missing))
            continue
        try:
            example.run()
        except Exception:
            ok(False, description, traceback.format_exc())
        else:
            ok(True, description, None)


def main():
    found = gpu_examples()
    print("1..%d" % len(found))
    state = {"n": 0, "failed": 0}

    def ok(passed, description, detail):
        state["n"] += 1
        state["failed"] += not passed
        print("%s %d - %s" % ("ok" if passed else "not ok", state["n"],
                              description))
        for line in (detail or "").splitlines():
            print("#   " + line)

    def skip(description, reason):
        state["n"] += 1
        print("ok %d - %s # SKIP %s" % (state["n"], description, reason))

    run_gpu_examples(ok, skip)
    return 1 if state["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
