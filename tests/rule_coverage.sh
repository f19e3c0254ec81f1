#!/bin/sh
# rule_coverage.sh: every rule ID defined in spec/ must be cited by a conformance case or a
# unit test, and every ID a case or test cites must be defined in spec/. A rule ID is an
# upper-case hyphenated token in square brackets in spec/*.md, like [FMT-E4M3-OVF]; cases cite
# IDs in their rules: lists, tests in comments (bracketed) anywhere in tests/.
set -e
src=${QS_SRCDIR:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qspec-cov.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pat='[A-Z][A-Z0-9]*(-[A-Z0-9]+)+'
grep -ohE "\[$pat\]" "$src"/spec/*.md | tr -d '[]' | LC_ALL=C sort -u >"$tmp/defined"
{
    grep -ohE "\[$pat\]" "$src"/tests/*.c "$src"/tests/*.sh 2>/dev/null | tr -d '[]'
    # rules: [A, B] and "- A" items under rules: in case files
    cat "$src"/conformance/cases/*.yaml 2>/dev/null | grep -oE "rules: *\[[^]]*\]" |
        sed 's/rules: *\[//; s/\]//' | tr ',' '\n' | tr -d ' '
} | grep -E "^$pat$" | LC_ALL=C sort -u >"$tmp/cited"
# IDs in tests that are not rule citations (status names and the like) are not prefixed
# with a spec section; restrict "cited but undefined" to the prefixes spec/ uses.
sed -E 's/-.*//' "$tmp/defined" | sort -u >"$tmp/prefixes"
grep -E "^($(paste -sd'|' "$tmp/prefixes"))-" "$tmp/cited" >"$tmp/cited_known" || true
uncited=$(LC_ALL=C comm -23 "$tmp/defined" "$tmp/cited")
undefined=$(LC_ALL=C comm -13 "$tmp/defined" "$tmp/cited_known")
ndef=$(wc -l <"$tmp/defined")
status=0
n=0
for id in $uncited; do
    n=$((n + 1))
    echo "FAIL $n - rule $id is defined in spec/ but no case or unit test cites it"
    status=1
done
for id in $undefined; do
    n=$((n + 1))
    echo "FAIL $n - $id is cited by a case or test but spec/ defines no such rule"
    status=1
done
if [ "$status" -eq 0 ]; then
    echo "ok 1 - all $ndef rules of spec/ are cited by a case or a unit test, and every citation is defined"
fi
exit $status
