"""The Python reference's signatures, from the package's type stubs.

The extension module's functions carry text signatures without types; the
stubs (python/caibridge/__init__.pyi) have the types.  This extension reads
the stubs and gives autodoc their signatures, turns the C docstrings (plain
text, written for help()) into reStructuredText, and warns when a name the
stubs export (__all__) is documented nowhere, so ``make docs`` fails until
it is.
"""
import ast
import inspect
import os

from sphinx.util import logging

import plaintext

logger = logging.getLogger(__name__)


class Stubs:
    """Signatures by dotted name ('as_dlpack', 'CAIView.__dlpack__')."""

    def __init__(self, path, package):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        self.package = package
        self.signatures = {}
        self.fields = {}
        self.exported = []
        classes = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.signatures[node.name] = self._signature(node)
                self._note_fields(node.name, node)
            elif isinstance(node, ast.ClassDef):
                classes[node.name] = node
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__"
                    for t in node.targets):
                self.exported = [e.value for e in node.value.elts]
        for name, node in classes.items():
            for owner in self._mro(node, classes):
                for item in owner.body:
                    if isinstance(item, ast.FunctionDef):
                        key = "%s.%s" % (name, item.name)
                        self.signatures.setdefault(key, self._signature(item))
                        if key not in self.fields:
                            self._note_fields(key, item)

    def _note_fields(self, key, node):
        doc = ast.get_docstring(node)
        if doc:
            self.fields[key] = doc.splitlines()

    @staticmethod
    def _mro(node, classes):
        order = [node]
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                order += Stubs._mro(classes[base.id], classes)
        return order

    @staticmethod
    def _signature(node):
        args = node.args
        if args.args and args.args[0].arg == "self":
            args = ast.arguments(
                posonlyargs=args.posonlyargs, args=args.args[1:],
                vararg=args.vararg, kwonlyargs=args.kwonlyargs,
                kw_defaults=args.kw_defaults, kwarg=args.kwarg,
                defaults=args.defaults)
        returns = ast.unparse(node.returns) if node.returns else None
        return "(%s)" % ast.unparse(args), returns

    def _key(self, fullname):
        prefix = self.package + "."
        return fullname[len(prefix):] if fullname.startswith(prefix) else None

    def lookup(self, fullname):
        return self.signatures.get(self._key(fullname))

    def field_list(self, fullname):
        """The stub's docstring of a function (reST: Parameters, Returns,
        Raises as field lists), or []."""
        return list(self.fields.get(self._key(fullname), []))


def _is_c_object(obj):
    """True for what the C extension defines, whose docstrings are plain
    text; a Python class (DLPackProducer, even with __slots__ = ()) is
    written in reST and left alone: its own dict holds Python functions."""
    if inspect.isbuiltin(obj) or inspect.ismethoddescriptor(obj) or \
            inspect.isgetsetdescriptor(obj):
        return True
    return (inspect.isclass(obj) and obj.__module__ == "caibridge"
            and not issubclass(obj, int)
            and type(obj).__module__ == "builtins"
            and "__dict__" not in vars(obj)
            and not any(inspect.isfunction(v) or isinstance(v, property)
                        for v in vars(obj).values()))


def process_signature(app, what, name, obj, options, signature, ret):
    found = app.env.caibridge_stubs.lookup(name)
    if found is None or what not in ("function", "method"):
        return None
    return found


def process_docstring(app, what, name, obj, options, lines):
    if what == "module" or not _is_c_object(obj):
        return
    text = "\n".join(lines)
    lines[:] = plaintext.to_rest(text)
    # A C function's parameters, result and errors come from its stub,
    # where editors show them too; the C docstring stays plain text for
    # help().
    if what in ("function", "method"):
        fields = app.env.caibridge_stubs.field_list(name)
        if fields:
            lines += [""] + fields


def load_stubs(app):
    path = os.path.normpath(os.path.join(app.srcdir, app.config.pystubs_file))
    app.env.caibridge_stubs = Stubs(path, app.config.pystubs_package)


def check_exported(app, env):
    objects = env.get_domain("py").objects
    for name in env.caibridge_stubs.exported:
        full = "%s.%s" % (app.config.pystubs_package, name)
        if full not in objects:
            logger.warning("%s is exported by the stubs but documented "
                           "nowhere", full)


def setup(app):
    app.add_config_value("pystubs_file", "", "env")
    app.add_config_value("pystubs_package", "", "env")
    app.connect("builder-inited", load_stubs)
    app.connect("autodoc-process-signature", process_signature)
    app.connect("autodoc-process-docstring", process_docstring)
    app.connect("env-check-consistency", check_exported)
    return {"parallel_read_safe": True, "version": "1"}
