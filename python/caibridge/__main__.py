"""python -m caibridge: what caibridge was built with and finds here."""
import sys

from caibridge._config import show_config

if __name__ == "__main__":
    sys.exit(show_config())
