#!/usr/bin/env python3
"""The pages a user reads point only at what the repository has.

  check_links.py SOURCE_ROOT

Checks README.md, docs/*.md and every README.md under plugins/ and tools/:
- each relative Markdown link ([text](path) or [text](path#anchor)) names
  a file or folder that exists, and an anchor names a heading of that page;
- each repository path written in backticks (`docs/x.md`, `tools/y.sh`,
  `lib/...`; from the root or from the page's folder) exists (a glob or a placeholder such as <build> is skipped);
- no page cites the design notes that live outside the repository
  (DESIGN.md, STYLE.md, MEASURE.md, BUILD-NOTES.md, MECHANISMS.md).
And in the code (lib/, include/, plugins/, tools/, kernels/): no comment
carries a date, which goes stale; history belongs in commit messages.
Exit 1 with one line per problem."""
import os
import re
import sys

root = sys.argv[1]
problems = []
TOP = ("docs/", "tools/", "lib/", "include/", "plugins/", "tests/",
       "kernels/", ".ci/")
OUTSIDE = ("DESIGN.md", "STYLE.md", "MEASURE.md", "BUILD-NOTES.md",
           "MECHANISMS.md")


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and line.startswith("#"):
                out.add(slug(line.lstrip("#")))
    return out


def pages():
    yield "README.md"
    for d in ("docs",):
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith(".md"):
                yield f"{d}/{name}"
    for top in ("plugins", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if "README.md" in files:
                yield os.path.relpath(os.path.join(dirpath, "README.md"), root)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TICK = re.compile(r"`([^`\s]+)`")
for page in pages():
    path = os.path.join(root, page)
    if not os.path.exists(path):
        continue
    base = os.path.dirname(page)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in enumerate(text.splitlines(), 1):
        for name in OUTSIDE:
            if name in line and not os.path.exists(os.path.join(root, name)):
                problems.append(f"{page}:{n}: cites {name}, which the "
                                "repository does not have")
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(base, file)) if file else page
            full = os.path.join(root, dest)
            if not os.path.exists(full):
                problems.append(f"{page}:{n}: link to {target}: no {dest}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(full):
                problems.append(f"{page}:{n}: link to {target}: {dest} has "
                                f"no heading #{anchor}")
        for word in TICK.findall(line):
            word = word.rstrip(".,:;")
            if not word.startswith(TOP) or re.search(r"[<>*{}$|]|\.\.\.",
                                                     word):
                continue
            cand = word.split(":")[0]
            if not (os.path.exists(os.path.join(root, cand)) or
                    os.path.exists(os.path.join(root, base, cand))):
                problems.append(f"{page}:{n}: `{word}`: no such path in "
                                "the repository")

DATE = re.compile(r"(?<![\w-])20\d\d-[01]\d(-[0-3]\d)?\b")
COMMENT = re.compile(r"(/\*|\*|//|#)")
for top in ("lib", "include", "plugins", "tools", "kernels"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for name in files:
            if not name.endswith((".c", ".h", ".cu", ".cuh", ".cpp", ".hpp",
                                  ".py", ".sh")) and name != "meson.build":
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = DATE.search(line)
                    c = COMMENT.search(line)
                    if m and c and c.start() < m.start():
                        rel = os.path.relpath(path, root)
                        problems.append(f"{rel}:{n}: a date in a comment "
                                        f"({m.group(0)})")

for p in problems:
    print(p)
print(f"{len(problems)} problem(s) in the documentation's references"
      if problems else "documentation references: all found")
sys.exit(1 if problems else 0)
