#!/usr/bin/env bash
# docs/configuration.md is what `swy-info -c --markdown` prints: fail,
# with the difference, when the committed page and the library disagree.
#   check_config_doc.sh SWY_INFO DOCS_DIR
set -u
swy_info=$1 page=$2/configuration.md
# The page shows defaults only; no SWY_ variable of the caller's may
# change a line (the library's warnings about them go to stderr).
out=$(mktemp)
trap 'rm -f "$out"' EXIT
env $(env | sed -n 's/^\(SWY_[A-Z0-9_]*\)=.*/-u \1/p' | grep -v SWY_PLUGIN_PATH) \
    "$swy_info" -c --markdown >"$out" || {
    echo "swy-info -c --markdown failed" >&2
    exit 1
}
if ! diff -u "$page" "$out"; then
    echo "docs/configuration.md differs from the library's table; run:" >&2
    echo "  build/tools/swy-info/swy-info -c --markdown > docs/configuration.md" >&2
    exit 1
fi
echo "docs/configuration.md matches the library ($(grep -c '^### ' "$out") variables)"
