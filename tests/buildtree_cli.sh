#!/bin/sh
# buildtree_cli.sh: a qspec run from its build tree ([CASE-BUILD-TREE]) takes that tree's
# suite and plugins as `make conformance` does, and says so; the same executable copied out
# of the tree (as an installed one) keeps the installed defaults.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
n=$("$QSPEC" list "$SUITE" | wc -l)

expect_status "list with no path, from the build tree" 0 env -u QSPEC_CASES "$QSPEC" list
expect_true "lists the tree's suite" test "$(wc -l <"$QST_TMP/out")" -eq "$n" -a "$n" -gt 0
expect_true "and says nothing on stderr when it is not a terminal" test ! -s "$QST_TMP/err"
expect_status "run with no path, from the build tree" 0 env -u QSPEC_CASES "$QSPEC" run --quiet \
    --filter 'fmt.e4m3.rne.*'
expect_out "runs the tree's cases" "^[1-9][0-9]* passed, 0 failed, 0 skipped$"
mkdir "$QST_TMP/mine"
cp "$SUITE/formats-e4m3.yaml" "$QST_TMP/mine/"
expect_status "QSPEC_CASES still chooses another suite" 0 env QSPEC_CASES="$QST_TMP/mine" "$QSPEC" list
expect_true "that suite's cases only" test "$(wc -l <"$QST_TMP/out")" -eq "$(grep -c '^  - id: ' "$SUITE/formats-e4m3.yaml")"
expect_status "backends from the build tree" 0 env -u QSPEC_BACKEND_PATH "$QSPEC" backends
expect_out "the tree's plugin folder is on the search path" "^search path: $QS_BUILDDIR/cuda:"
expect_out "and it says which tree" "^build tree: $QS_BUILDDIR \\(its plugins, in $QS_BUILDDIR/cuda, are on the search path\\)$"
expect_status "QSPEC_BACKEND_PATH comes first" 0 env QSPEC_BACKEND_PATH="$QST_TMP/mine" "$QSPEC" backends
expect_out "then the tree's folder" "^search path: $QST_TMP/mine:$QS_BUILDDIR/cuda:"
if command -v script >/dev/null 2>&1 && script -qec true /dev/null </dev/null >/dev/null 2>&1; then
    env -u QSPEC_CASES script -qec "'$QSPEC' list" /dev/null </dev/null >"$QST_TMP/tty" 2>&1 || true
    expect_true "on a terminal it names the suite it uses" grep -q "^qspec: run from the build tree $QS_BUILDDIR: by default the cases of $SUITE and the plugins of $QS_BUILDDIR/cuda" "$QST_TMP/tty"
fi

# the same executable outside its tree: the installed defaults
real=$QS_BUILDDIR/.libs/qspec
[ -x "$QS_BUILDDIR/.libs/lt-qspec" ] && real=$QS_BUILDDIR/.libs/lt-qspec
if [ -x "$real" ]; then
    cp "$real" "$QST_TMP/qspec"
    expect_status "a copy outside the tree" 0 env -u QSPEC_BACKEND_PATH LD_LIBRARY_PATH="$QS_BUILDDIR/.libs" \
        "$QST_TMP/qspec" backends
    expect_true "does not take the tree's plugins" sh -c "! grep -q '^build tree: \\|$QS_BUILDDIR/cuda' '$QST_TMP/out'"
    expect_status "a copy outside the tree lists" 0 env LD_LIBRARY_PATH="$QS_BUILDDIR/.libs" QSPEC_CASES="$QST_TMP/mine" \
        "$QST_TMP/qspec" list
    QST_N=$((QST_N + 1))
    set +e
    env -u QSPEC_CASES LD_LIBRARY_PATH="$QS_BUILDDIR/.libs" "$QST_TMP/qspec" list >"$QST_TMP/out" 2>"$QST_TMP/err"
    set -e
    if grep -q "$SUITE" "$QST_TMP/err" "$QST_TMP/out"; then
        qst_fail "a copy outside the tree does not read the tree's suite" "$(head -c 400 "$QST_TMP/err")"
    else
        echo "ok $QST_N - a copy outside the tree does not read the tree's suite"
    fi
fi
qst_done
