#!/bin/sh
# The library's edges, as docs/architecture.md ("The layers as folders")
# draws them: this script reads the layer diagram and the table of
# external libraries from that file, so the document and the check cannot
# drift, and checks every source file of lib/, include/, tools/, plugins/
# and kernels/ against them:
#   - a lib/ folder includes its own headers, the public ones, and those of
#     the layers to its left on a line of the diagram (a header named on a
#     line: that header only); every lib/ folder is on the diagram, and
#     every layer of it a lib/ folder;
#   - an external library's headers only where the table says;
#   - the public headers include C's standard headers and each other only;
#   - tools/, plugins/ and kernels/ include of Switchyard the public headers
#     only (besides their own folder's, the kernels' and tools/common's);
#   - libswitchyard needs no UCX library.
# Usage: boundaries.sh SOURCE_ROOT LIBSWITCHYARD
set -u
src=$1 lib=$2
doc=$src/docs/architecture.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The section of the document the rules come from.
awk '/^## /{on = ($0 ~ /^## The layers as folders/)} on' "$doc" \
    >"$tmp/section"
if [ ! -s "$tmp/section" ]; then
    echo "FAIL: $doc has no section \"## The layers as folders\""
    exit 1
fi

# The diagram, the first fenced block of the section: each line a chain
# "a, b ← c ← d". "EDGE X Y" for every Y in a group to the left of X's,
# "NODE X" for every element.
awk '/^```/{if (f) exit; f = 1; next} f' "$tmp/section" | awk '
function trim(x) { gsub(/[ \t]/, "", x); return x }
{
    n = split($0, groups, "←")
    for (i = 1; i <= n; i++) {
        m = split(groups[i], items, ",")
        for (j = 1; j <= m; j++) {
            x = trim(items[j])
            if (x == "")
                continue
            print "NODE", x
            for (k = 1; k < i; k++) {
                mm = split(groups[k], left, ",")
                for (l = 1; l <= mm; l++)
                    if (trim(left[l]) != "")
                        print "EDGE", x, trim(left[l])
            }
        }
    }
}' >"$tmp/graph"

# The table of external libraries: "library|header globs|place globs".
awk -F'|' '
function ticks(s,    out) {
    out = ""
    while (match(s, /`[^`]*`/)) {
        out = out " " substr(s, RSTART + 1, RLENGTH - 2)
        s = substr(s, RSTART + RLENGTH)
    }
    return substr(out, 2)
}
/^\| *library *\|/ {t = 1; next}
t && /^\|---/ {next}
t && /^\|/ {name = $2; gsub(/^ +| +$/, "", name)
            print name "|" ticks($3) "|" ticks($4); next}
t {exit}' "$tmp/section" >"$tmp/external"

# Every file of the checked folders, and the lib/ folders.
(cd "$src" && find lib include tools plugins kernels -type f) | sort \
    >"$tmp/files"
for d in "$src"/lib/*/; do
    basename "$d"
done >"$tmp/folders"

# Their includes: "FILE:LINE:DELIMITER:NAME".
(cd "$src" && find lib include tools plugins kernels -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -exec awk '
/^[ \t]*#[ \t]*include[ \t]*[<"]/ {
    s = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*/, "", s)
    d = substr(s, 1, 1)
    s = substr(s, 2)
    sub(/[>"].*/, "", s)
    print FILENAME ":" FNR ":" d ":" s
}' {} +) | sort -t: -k1,1 -k2,2n >"$tmp/includes"

awk -v doc="docs/architecture.md" '
# A glob of the table as a regular expression: * any run of characters.
function glob_re(g,    r) {
    r = g
    gsub(/[.+?()|{}^$\[\]]/, "\\\\&", r)
    gsub(/\*/, ".*", r)
    return "^" r "$"
}
function dirname(p) {
    sub(/\/[^\/]*$/, "", p)
    return p
}
function fail(msg) {
    print "FAIL: " msg
    failed = 1
}
FILENAME ~ /\/graph$/ {
    if ($1 == "NODE" && $2 !~ /\//) layer[$2] = 1
    if ($1 == "EDGE") allowed[$2 " " $3] = 1
    next
}
FILENAME ~ /\/external$/ {
    split($0, f, "|")
    nlib++
    libname[nlib] = f[1]
    libheads[nlib] = f[2]
    libplaces[nlib] = f[3]
    next
}
FILENAME ~ /\/files$/ {
    exists[$0] = 1
    if ($0 ~ /^lib\/.*\.h$/) {
        b = $0
        sub(/.*\//, "", b)
        lib_header[b] = 1
    }
    next
}
FILENAME ~ /\/folders$/ {
    folder[$0] = 1
    next
}
FNR == 1 && !started {
    started = 1
    if (length(allowed) == 0)
        fail("no layer diagram (a fenced block of \"a ← b\" lines) in " doc)
    if (nlib == 0)
        fail("no table of external libraries (| library | its headers | " \
             "included only under |) in " doc)
    for (x in folder)
        if (!(x in layer))
            fail("lib/" x " is not on the layer diagram of " doc)
    for (x in layer)
        if (!(x in folder))
            fail("the layer diagram of " doc " names " x \
                 ", which is not a folder of lib/")
    split("assert complex ctype errno fenv float inttypes iso646 limits " \
          "locale math setjmp signal stdalign stdarg stdatomic stdbool " \
          "stddef stdint stdio stdlib stdnoreturn string tgmath threads " \
          "time uchar wchar wctype", s, " ")
    for (i in s)
        std[s[i] ".h"] = 1
}
{
    # FILE:LINE:DELIMITER:NAME (a name has no colon)
    file = $0; sub(/:.*/, "", file)
    rest = substr($0, length(file) + 2)
    line = rest; sub(/:.*/, "", line)
    rest = substr(rest, length(line) + 2)
    delim = substr(rest, 1, 1)
    name = substr(rest, 3)
    shown = delim name (delim == "<" ? ">" : "\"")
    where = file ":" line
    n_includes++
    top = name; sub(/\/.*/, "", top)

    # The external libraries.
    for (i = 1; i <= nlib; i++) {
        nh = split(libheads[i], heads, " ")
        hit = 0
        for (j = 1; j <= nh; j++)
            if (name ~ glob_re(heads[j]))
                hit = 1
        if (!hit)
            continue
        np = split(libplaces[i], places, " ")
        ok = 0
        for (j = 1; j <= np; j++)
            if (file ~ glob_re(places[j]))
                ok = 1
        if (!ok)
            fail(where " includes " shown ": " libname[i] " headers " \
                 "belong under " libplaces[i] " only (" doc ")")
    }

    if (file ~ /^lib\//) {
        own = file; sub(/^lib\//, "", own); sub(/\/.*/, "", own)
        n_lib++
        if (name !~ /\// || top == own || top == "switchyard" ||
            !(top in folder))
            next
        if ((own " " top) in allowed || (own " " name) in allowed)
            next
        fail(where " includes " shown ": lib/" own " may not include " \
             "lib/" top " (the layer diagram of " doc ")")
    } else if (file ~ /^include\//) {
        # switchyard/version.h is generated from include/switchyard/version.h.in.
        if (name ~ /^switchyard\// && (("include/" name) in exists ||
                                       ("include/" name ".in") in exists))
            next
        if (name !~ /\// && (("include/switchyard/" name) in exists ||
                             (delim == "<" && name in std)))
            next
        fail(where " includes " shown ": a public header includes " \
             "C\047s standard headers and the other public headers only")
    } else {
        # tools/, plugins/, kernels/
        if (name ~ /^switchyard\//) {
            if (("include/" name) in exists || ("include/" name ".in") in exists)
                next
        } else if (name ~ /\//) {
            if (!(top in folder))
                next # a system or external header
        } else if (delim == "<") {
            next # a system header (<sched.h> is not lib/sched/sched.h)
        } else {
            dir = dirname(file)
            if ((dir "/" name) in exists || (dir "/" name ".in") in exists ||
                ("kernels/" name) in exists ||
                ("tools/common/" name) in exists)
                next
            if (!(name in lib_header))
                next # generated, or found on the include path
        }
        fail(where " includes " shown ": outside lib/, Switchyard " \
             "is reached through its public headers only (<switchyard/...>)")
    }
}
END {
    if (n_includes == 0)
        fail("no includes found under lib/, include/, tools/, plugins/ " \
             "and kernels/")
    printf "%d includes under lib/, %d in all; %d layers, %d external " \
           "libraries\n", n_lib, n_includes, length(layer), nlib
    exit failed
}' "$tmp/graph" "$tmp/external" "$tmp/files" "$tmp/folders" \
    "$tmp/includes"
fail=$?

needed=$(readelf -d "$lib" | grep NEEDED)
if [ -z "$needed" ]; then
    echo "FAIL: readelf -d $lib listed no NEEDED entry"
    fail=1
elif echo "$needed" | grep -q 'libuc[ptsm]'; then
    echo "FAIL: $lib needs UCX:"
    echo "$needed"
    fail=1
fi
[ $fail = 0 ] && echo "PASS: lib/, include/, tools/, plugins/ and" \
    "kernels/ keep the edges of docs/architecture.md; libswitchyard" \
    "needs no UCX"
exit $fail
