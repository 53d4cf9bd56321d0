"""`python -m switchyard`: switchyard.info(), exit 1 when the library or
the torch backend does not load."""
import sys

from . import info

sys.exit(0 if info() else 1)
