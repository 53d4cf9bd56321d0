"""Prints the python the torch backend is built for when -Dtorch_python
is empty: $SWY_VENV/bin/python when SWY_VENV is set, else the project's
default virtual environment (~/.cache/switchyard/venv) when it exists,
else python3 from PATH."""
import os
import shutil

venv = os.environ.get("SWY_VENV") or os.path.expanduser(
    "~/.cache/switchyard/venv")
python = os.path.join(venv, "bin", "python")
print(python if os.access(python, os.X_OK) else
      (shutil.which("python3") or "python3"))
