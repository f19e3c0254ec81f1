# lib.sh: helpers for the CLI test scripts. Each check prints "ok N - what" or
# "FAIL N - what" with the command's output, and qst_done exits non-zero on any failure.
# Needs QSPEC (the binary under test); QS_SRCDIR and QS_BUILDDIR come from make check.
: "${QSPEC:?QSPEC must name the qspec binary}"
QST_N=0
QST_FAILED=0
QST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/qspec-test.XXXXXX")
trap 'rm -rf "$QST_TMP"' EXIT

qst_fail() {
    QST_FAILED=$((QST_FAILED + 1))
    echo "FAIL $QST_N - $1"
    shift
    for line in "$@"; do echo "    $line"; done
}

# qst_run: runs "$@" capturing stdout in $QST_TMP/out, stderr in $QST_TMP/err, status in $QST_RC
qst_run() {
    set +e
    "$@" >"$QST_TMP/out" 2>"$QST_TMP/err"
    QST_RC=$?
    set -e
}

# expect_status WHAT CODE CMD...: the command exits with CODE
expect_status() {
    what=$1 code=$2
    shift 2
    QST_N=$((QST_N + 1))
    qst_run "$@"
    if [ "$QST_RC" -ne "$code" ]; then
        qst_fail "$what" "expected exit $code, got $QST_RC: $*" "stdout: $(head -c 600 "$QST_TMP/out")" \
            "stderr: $(head -c 600 "$QST_TMP/err")"
        return 0
    fi
    echo "ok $QST_N - $what"
}

# expect_usage WHAT CMD...: exit 2 with exactly one line on stderr and nothing on stdout
expect_usage() {
    what=$1
    shift
    QST_N=$((QST_N + 1))
    qst_run "$@"
    lines=$(wc -l <"$QST_TMP/err")
    if [ "$QST_RC" -ne 2 ] || [ "$lines" -ne 1 ] || [ -s "$QST_TMP/out" ]; then
        qst_fail "$what" "expected exit 2 with one stderr line, got exit $QST_RC and $lines lines: $*" \
            "stdout: $(head -c 600 "$QST_TMP/out")" "stderr: $(head -c 600 "$QST_TMP/err")"
        return 0
    fi
    echo "ok $QST_N - $what"
}

# expect_out WHAT PATTERN: the last command's stdout matches the grep -E PATTERN
expect_out() {
    QST_N=$((QST_N + 1))
    if grep -Eq -- "$2" "$QST_TMP/out"; then
        echo "ok $QST_N - $1"
    else
        qst_fail "$1" "stdout does not match /$2/:" "$(head -c 1200 "$QST_TMP/out")"
    fi
}

# expect_err WHAT PATTERN: the last command's stderr matches the grep -E PATTERN
expect_err() {
    QST_N=$((QST_N + 1))
    if grep -Eq -- "$2" "$QST_TMP/err"; then
        echo "ok $QST_N - $1"
    else
        qst_fail "$1" "stderr does not match /$2/:" "$(head -c 1200 "$QST_TMP/err")"
    fi
}

# expect_true WHAT CMD...: the command succeeds
expect_true() {
    what=$1
    shift
    QST_N=$((QST_N + 1))
    if "$@"; then echo "ok $QST_N - $what"; else qst_fail "$what" "command failed: $*"; fi
}

qst_done() {
    echo "# $QST_N checks, $QST_FAILED failed"
    [ "$QST_FAILED" -eq 0 ]
}
