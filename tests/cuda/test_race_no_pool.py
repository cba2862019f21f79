"""test_race.py's races again with the event pool off, as tools that count
an event made and destroyed per hand-over set it (CAIBRIDGE_EVENT_POOL=0,
from tests/cuda/local.mk: the library reads it once, at its first
hand-over)."""
import os

from test_race import *  # noqa: F401,F403  (the same tests, collected here)

assert os.environ.get("CAIBRIDGE_EVENT_POOL") == "0", \
    "run with CAIBRIDGE_EVENT_POOL=0 (tests/cuda/local.mk sets it)"
