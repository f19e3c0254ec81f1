#!/bin/sh
# isolate_cli.sh: plugins run in worker processes ([CASE-ISOLATE], [CASE-TIMEOUT]). A plugin
# that exits, crashes or hangs in a slot (tests/hostile.c, once in the run) fails the case
# it was running with the reason, the other cases still run in a fresh worker, every report
# is complete and the exit status is 1: under `run`, `run --certify` and `run --ranks 2`.
# `qspec backends` survives a plugin that crashes in open, and so does `run` (exit 2).
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
# Under --enable-sanitizers, let a planted SIGSEGV kill the worker as it does in a plain
# build, instead of the sanitizer turning it into a report and exit status 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}handle_segv=0"
HOSTILE="$QS_BUILDDIR/tests/.libs/libqspec-hostile.so"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
CASES="$QS_SRCDIR/conformance/cases/formats-e4m3.yaml"
DIST="$QS_SRCDIR/conformance/cases/dist-quantize.yaml"
n=$(grep -c '^  - id: ' "$CASES")
first=fmt.e4m3.rne.satfinite.bounds # the first case that reaches the cast slot
# the suite named, so that a run from the build tree prints no note about it on a pty
QSPEC_CASES="$QS_SRCDIR/conformance/cases"
export QSPEC_CASES

# the example plugin passes these cases: what a misbehaving run is compared with
expect_status "the example plugin passes the e4m3 cases" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" "$CASES"
expect_out "two of them reach its cast slot" "^2 passed, 0 failed, $((n - 2)) skipped$"

# hostile WHAT: what the plugin's worker does, and how the kit says it
for what in "exit:exited with status 0 during the case" \
    "segv:crashed: signal 11 \\([A-Za-z ]+\\) during the case" \
    "hang:timed out after 2 s \\(--timeout\\) during the case; it was killed"; do
    how=${what%%:*} msg=${what#*:}
    rm -f "$QST_TMP/mark" "$QST_TMP/r.json" "$QST_TMP/j.xml" "$QST_TMP/r.html"
    expect_status "run: a worker that does '$how' in a slot fails the run" 1 env QSTEST_HOSTILE="$how" \
        QSTEST_HOSTILE_MARK="$QST_TMP/mark" "$QSPEC" run --timeout 2 --backend "$HOSTILE" \
        --report-json "$QST_TMP/r.json" --junit "$QST_TMP/j.xml" --html "$QST_TMP/r.html" "$CASES"
    expect_out "run/$how: the case it ran fails with the reason" "^FAIL $first seed=0 the backend's worker $msg \\["
    expect_out "run/$how: the other cases ran in a fresh worker" "^1 passed, 1 failed, $((n - 2)) skipped$"
    expect_true "run/$how: the JSON report holds every case" test "$(grep -c '^    {"id": ' "$QST_TMP/r.json")" -eq "$n"
    expect_true "run/$how: the JSON report has the failure" grep -Eq "\"id\": \"$first\", .*\"status\": \"fail\", \"message\": \"the backend's worker $msg\"" "$QST_TMP/r.json"
    expect_true "run/$how: the JUnit report counts it" grep -q "^<testsuites name=\"qspec\" tests=\"$n\" failures=\"1\" errors=\"0\" skipped=\"$((n - 2))\"" "$QST_TMP/j.xml"
    expect_true "run/$how: the HTML report is written" grep -q "1 passed, 1 failed, $((n - 2)) skipped" "$QST_TMP/r.html"
done

# a plugin that returns an error and fails every later call in its process (a GPU context
# after an illegal memory access): that case fails with the plugin's error, and the next case
# passes in a fresh worker, alone and under --jobs 2
for jobs in 1 2; do
    rm -f "$QST_TMP/mark"
    expect_status "run --jobs $jobs: a plugin whose error poisons its process fails the run" 1 \
        env QSTEST_HOSTILE=poison QSTEST_HOSTILE_MARK="$QST_TMP/mark" "$QSPEC" run --jobs $jobs \
        --backend "$HOSTILE" "$CASES"
    expect_out "run --jobs $jobs/poison: the case fails with the plugin's error" \
        "^FAIL fmt\\.e4m3\\.[^ ]+ seed=[0-9]+ the backend failed: .*cast failed"
    expect_out "run --jobs $jobs/poison: the other case passes in a fresh worker" \
        "^1 passed, 1 failed, $((n - 2)) skipped$"
done

# --jobs 2: each process runs its cases in a worker of its own; one that crashes or hangs
# fails its case, and the other process's cases and the rest of its own still run
for what in "segv:crashed: signal 11 \\([A-Za-z ]+\\) during the case" \
    "hang:timed out after 2 s \\(--timeout\\) during the case; it was killed"; do
    how=${what%%:*} msg=${what#*:}
    rm -f "$QST_TMP/mark" "$QST_TMP/r.json"
    expect_status "run --jobs 2: a worker that does '$how' in a slot fails the run" 1 env QSTEST_HOSTILE="$how" \
        QSTEST_HOSTILE_MARK="$QST_TMP/mark" "$QSPEC" run --jobs 2 --timeout 2 --backend "$HOSTILE" \
        --report-json "$QST_TMP/r.json" "$CASES"
    expect_out "run --jobs 2/$how: one case fails with the reason" "^FAIL fmt\\.e4m3\\.[^ ]+ seed=[0-9]+ the backend's worker $msg \\["
    expect_out "run --jobs 2/$how: the other cases ran" "^1 passed, 1 failed, $((n - 2)) skipped$"
    expect_true "run --jobs 2/$how: the JSON report holds every case" test "$(grep -c '^    {"id": ' "$QST_TMP/r.json")" -eq "$n"
done

# [CASE-CERTIFY-PACKAGE] a certification needs every must-pass case completed in a live worker
mkdir "$QST_TMP/suite"
cp "$CASES" "$QS_SRCDIR/conformance/cases/recipes-current.yaml" "$QST_TMP/suite/"
printf 'fmt.e4m3.*\nrec.current.*\n' >"$QST_TMP/suite/certify.list"
for how in exit segv hang; do
    rm -rf "$QST_TMP/mark" "$QST_TMP/pkg-$how"
    expect_status "certify: a worker that does '$how' in a slot: not certified" 1 env QSTEST_HOSTILE="$how" \
        QSTEST_HOSTILE_MARK="$QST_TMP/mark" "$QSPEC" run --quiet --timeout 2 --backend "$HOSTILE" \
        --certify "$QST_TMP/pkg-$how" "$QST_TMP/suite"
    expect_out "certify/$how: it says so" "NOT certified: must-pass cases failed$"
    expect_true "certify/$how: the package is complete" test -s "$QST_TMP/pkg-$how/manifest.sha256" -a \
        -s "$QST_TMP/pkg-$how/results.json" -a -s "$QST_TMP/pkg-$how/junit.xml" -a -s "$QST_TMP/pkg-$how/report.html"
    expect_true "certify/$how: the manifest says not certified" grep -q '^  "certified": false,$' "$QST_TMP/pkg-$how/manifest.json"
    expect_true "certify/$how: no temporary directory is left" sh -c "test -z \"\$(ls -d '$QST_TMP'/pkg-$how.tmp-* 2>/dev/null)\""
    expect_status "certify/$how: verify-package rejects it" 1 "$QSPEC" verify-package "$QST_TMP/pkg-$how" "$QST_TMP/suite"
    expect_out "certify/$how: naming the case" "^INVALID .*: must-pass case $first failed: the backend's worker "
done

# [CASE-RANKS] a rank's worker that ends in a distributed case leaves no rank waiting
for how in exit segv hang; do
    rm -f "$QST_TMP/mark" "$QST_TMP/d.json"
    expect_status "ranks: a worker that does '$how' in a slot fails the run" 1 env QSTEST_HOSTILE="$how" \
        QSTEST_HOSTILE_MARK="$QST_TMP/mark" TMPDIR="$QST_TMP" "$QSPEC" run --quiet --timeout 3 \
        --backend "$HOSTILE" --ranks 2 --report-json "$QST_TMP/d.json" "$DIST"
    expect_out "ranks/$how: the two-rank case fails" "^FAIL dist\\.q\\.current\\.r2 seed=9801 (the backend's worker |not run: the ranks cannot meet again)"
    expect_out "ranks/$how: the later distributed cases are not run" "^FAIL dist\\.q\\.block\\.r2 seed=[0-9]+ not run: the ranks cannot meet again"
    expect_true "ranks/$how: rank 0's report holds every case" test "$(grep -c '^    {"id": ' "$QST_TMP/d.json")" -eq "$(grep -c '^  - id: ' "$DIST")"
done

# a plugin that crashes in open
expect_usage "run: a plugin that crashes in open is exit 2" env QSTEST_HOSTILE_OPEN=segv "$QSPEC" run \
    --backend "$HOSTILE" "$CASES"
expect_err "it says how the worker ended" "^qspec run: backend .*libqspec-hostile\\.so: its worker crashed: signal 11 \\(.*\\) while opening the plugin$"
mkdir "$QST_TMP/path"
cp "$HOSTILE" "$EXAMPLE" "$QST_TMP/path/"
expect_status "backends: a plugin that crashes in open is listed" 0 env QSTEST_HOSTILE_OPEN=segv \
    QSPEC_BACKEND_PATH="$QST_TMP/path" "$QSPEC" backends
expect_out "with the reason" "^         error: the plugin crashed: signal 11 \\(.*\\) while loading or opening \\(probed in a child process\\)$"
expect_out "and the plugins after it still are" "^example  $QST_TMP/path/libqspec-example\\.so$"
expect_out "and the search path" "^search path: $QST_TMP/path:"
expect_usage "backends NAME: one that crashes in open is exit 2" env QSTEST_HOSTILE_OPEN=segv \
    QSPEC_BACKEND_PATH="$QST_TMP/path" "$QSPEC" backends hostile
expect_err "with the reason" "^qspec backends: backend .*: the plugin crashed: signal 11"

# a plugin may not call itself "ref" (the built-in reference); a NULL device reads "yes"
expect_usage "run: a plugin named ref is exit 2" env QSTEST_HOSTILE_NAME=ref "$QSPEC" run \
    --backend "$HOSTILE" "$CASES"
expect_err "it says why" "calls itself 'ref': a backend needs a name of its own"
expect_status "backends: a plugin whose device is NULL" 0 env QSTEST_HOSTILE_NODEVICE=1 \
    "$QSPEC" backends "$HOSTILE"
expect_out "is usable: yes, not (null)" "^ +usable: yes$"

# [CASE-PROGRESS] no progress line when stdout is not a terminal; one on a terminal (a pty)
cr=$(printf '\r') esc=$(printf '\033')
expect_status "a piped run" 0 "$QSPEC" run --backend "$EXAMPLE" "$CASES"
expect_true "writes no carriage return" sh -c "! grep -q '$cr' '$QST_TMP/out'"
expect_true "and no escape sequence" sh -c "! grep -q '$esc' '$QST_TMP/out'"
expect_true "only the summary line" test "$(cat "$QST_TMP/out")" = "2 passed, 0 failed, $((n - 2)) skipped"
if command -v script >/dev/null 2>&1 && script -qec true /dev/null </dev/null >/dev/null 2>&1; then
    rm -f "$QST_TMP/mark"
    QSTEST_HOSTILE=hang QSTEST_HOSTILE_MARK="$QST_TMP/mark" script -qec "'$QSPEC' run --timeout 2 \
        --backend '$HOSTILE' '$CASES'" /dev/null </dev/null >"$QST_TMP/tty" 2>&1 || true
    tr -d '\r' <"$QST_TMP/tty" | sed "s/$esc\[K/|/g" >"$QST_TMP/tty.txt"
    expect_true "on a terminal: cases done of the total, the case, the elapsed time" \
        grep -q "|\[0/$n\] $first  0:00:00|" "$QST_TMP/tty.txt"
    expect_true "the elapsed time moves on while the case runs" grep -q "|\[0/$n\] $first  0:00:01|" "$QST_TMP/tty.txt"
    expect_true "the line is erased before a failure line" grep -q "|FAIL $first seed=0 " "$QST_TMP/tty.txt"
    expect_true "and the count moves on" grep -q "|\[1/$n\] " "$QST_TMP/tty.txt"
    expect_true "and before the summary" grep -q "|1 passed, 1 failed, $((n - 2)) skipped$" "$QST_TMP/tty.txt"
    script -qec "'$QSPEC' run --quiet --backend '$EXAMPLE' '$CASES'" /dev/null </dev/null \
        >"$QST_TMP/q" 2>&1 || true
    expect_true "--quiet on a terminal: nothing but the summary" \
        test "$(tr -d '\r' <"$QST_TMP/q")" = "2 passed, 0 failed, $((n - 2)) skipped"
else
    echo "# script(1) cannot make a pty here: the terminal checks are not run"
fi

# [CASE-TIMEOUT] usage
expect_usage "--timeout 0" "$QSPEC" run --timeout 0 --backend "$EXAMPLE" "$CASES"
expect_err "it names the option" "^qspec run: --timeout '0' is not a number of seconds from 1 to 86400$"
expect_usage "--timeout without a value" "$QSPEC" run --timeout
qst_done
