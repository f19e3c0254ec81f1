#!/bin/sh
# format_tables.sh: the committed docs/format-tables.md equals a fresh generation from the
# reference decoder ([FMT-DECODE], [FMT-LAYOUT]), so the published tables cannot drift.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"

gen_tables() { sh "$QS_SRCDIR/docs/gen-format-tables.sh" "$QSPEC" >"$QST_TMP/tables.md"; }
expect_true "the table generator runs" gen_tables
QST_N=$((QST_N + 1))
if cmp -s "$QST_TMP/tables.md" "$QS_SRCDIR/docs/format-tables.md"; then
    echo "ok $QST_N - docs/format-tables.md is up to date"
else
    qst_fail "docs/format-tables.md is up to date" "run 'make format-tables'" \
        "$(diff "$QS_SRCDIR/docs/format-tables.md" "$QST_TMP/tables.md" | head -20)"
fi
qst_done
