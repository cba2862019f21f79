"""python -m caibridge [--json]: what caibridge was built with and finds
here, and a self-test.  Exit status: 0 when every step ran, 1 when one
failed (its FAILED line says which), 2 for a wrong command line."""
import sys

from caibridge._config import main

if __name__ == "__main__":
    sys.exit(main())
