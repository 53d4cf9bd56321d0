"""The JSON lines that bench-train.sh prints (swy-train --json, with the
repetition and configuration in front), read by its summaries
(train-ratio.py, pipeline-eff.py)."""
import json
import sys


def json_lines(paths):
    """Each line starting with "{" of the files in paths ("-" or none:
    standard input), parsed."""
    for path in paths or ["-"]:
        f = sys.stdin if path == "-" else open(path)
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                yield json.loads(line)
