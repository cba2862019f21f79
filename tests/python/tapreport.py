"""pytest's results as TAP, for Automake's TAP driver and CI's counts.

As a plugin (tests/python on sys.path):   python -m pytest -p tapreport ...
It replaces pytest's terminal output with one TAP line per test: "ok",
"ok ... # SKIP reason", "not ok" with the failure as "#" comments, and
"# TODO" for an expected failure.  A file skipped whole at collection is one
skip line naming the reason.

As a script:   python tests/python/tapreport.py [pytest arguments] FILE
it first checks that the test tools are importable; when one is not, it
prints a single TAP skip line naming what is missing and the command that
installs it, and exits 0, so `make check` still passes with the C tests run.

A few lines of our own rather than pytest-tap: that plugin failed to load
under pytest 9.2 (its --tap-stream option clashed), and TAP output needs
nothing beyond pytest's stable report hooks.
"""
import io
import sys

try:
    import pytest
except ImportError:  # run as a script without pytest: main() says so
    pytest = None

REQUIRED = ("pytest", "hypothesis", "numpy")


def _escape(text):
    # '#' starts a TAP directive; a newline would end the line.
    return " ".join(str(text).split()).replace("#", "\\#")


def _comment(out, text):
    for line in str(text).splitlines():
        out.write("# " + line + "\n")


class TapReporter:
    def __init__(self, out):
        self.out = out
        self.count = 0

    def line(self, ok, name, directive="", details=""):
        self.count += 1
        text = "%s %d %s" % ("ok" if ok else "not ok", self.count,
                             _escape(name))
        if directive:
            text += " # " + directive
        self.out.write(text + "\n")
        if details:
            _comment(self.out, details)
        self.out.flush()

    @staticmethod
    def _skip_reason(report):
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reason = longrepr[2]
        else:
            reason = str(longrepr)
        return _escape(reason[len("Skipped: "):]
                       if reason.startswith("Skipped: ") else reason)

    def pytest_collectreport(self, report):
        if report.failed:
            self.line(False, "collect " + report.nodeid,
                      details=report.longreprtext)
        elif report.skipped:
            self.line(True, report.nodeid,
                      "SKIP " + self._skip_reason(report))

    def pytest_runtest_logreport(self, report):
        name = report.nodeid
        xfail = getattr(report, "wasxfail", None)
        if report.when == "call" or (report.when == "setup"
                                     and not report.passed):
            if xfail is not None:
                # Expected failure (skipped) or unexpected pass (passed).
                self.line(report.passed, name,
                          "TODO " + _escape(xfail or "expected to fail"))
            elif report.skipped:
                self.line(True, name, "SKIP " + self._skip_reason(report))
            else:
                self.line(report.passed, name,
                          details="" if report.passed
                          else report.longreprtext)
        elif report.when == "teardown" and report.failed:
            self.line(False, name + " (teardown)",
                      details=report.longreprtext)

    def pytest_sessionfinish(self, session):
        self.out.write("1..%d\n" % self.count)
        self.out.flush()
        # A file skipped whole collects no test; its skip line is the result.
        if session.exitstatus == 5 and self.count:
            session.exitstatus = 0


def pytest_configure(config):
    terminal = config.pluginmanager.getplugin("terminalreporter")
    if terminal is not None:
        # Silenced, not removed: pytest's assertion messages need a
        # terminal reporter to render the values compared.
        config.pluginmanager.unregister(terminal)
        config.pluginmanager.register(
            pytest.TerminalReporter(config, io.StringIO()),
            "terminalreporter")
    config.pluginmanager.register(TapReporter(sys.stdout), "tapreporter")


if pytest is not None:
    # After the terminal reporter is registered, so it can be replaced.
    pytest_configure = pytest.hookimpl(trylast=True)(pytest_configure)


def _minimums():
    """{name: (major, minor)} of python/requirements-test.txt's ">="."""
    import os
    import re
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "..", "python", "requirements-test.txt")
    found = {}
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"\s*([A-Za-z0-9_-]+)\s*>=\s*(\d+)(?:\.(\d+))?",
                             line)
                if m:
                    found[m.group(1)] = (int(m.group(2)), int(m.group(3) or 0))
    except OSError:
        pass
    return found


def _version(name):
    import importlib.metadata
    try:
        parts = importlib.metadata.version(name).split(".")[:2]
        return tuple(int("".join(c for c in p if c.isdigit()) or 0)
                     for p in parts)
    except Exception:  # noqa: BLE001 - no metadata: taken as recent enough
        return None


def _missing():
    """The required tools absent, or older than the requirements ask (a
    distribution's pytest 7 lacks what the plugin uses)."""
    import importlib.util
    minimums = _minimums()
    out = []
    for name in REQUIRED:
        if importlib.util.find_spec(name) is None:
            out.append(name)
            continue
        have, need = _version(name), minimums.get(name)
        if have is not None and need is not None and have < need:
            out.append("%s>=%d.%d (%d.%d here)" % ((name,) + need + have))
    return out


def main(args):
    missing = _missing()
    if missing:
        target = args[-1] if args else "the Python tests"
        wanted = " ".join(repr(m.split(" ")[0]) if ">=" in m else m
                          for m in missing)
        print("1..0 # SKIP %s: needs %s, not installed for this Python; "
              "install with: %s -m pip install %s"
              % (target, ", ".join(missing), sys.executable, wanted))
        return 0
    return pytest.main(["-p", "tapreport"] + list(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
