#!/bin/sh
# report_cli.sh: the reports of `qspec run` — the HTML report with its error histograms
# [CASE-REPORT-HTML] and the JUnit XML CI dashboards read [CASE-REPORT]: both well formed,
# counting what ran, naming the failing cases, written atomically (no file after an error).
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
FIX="$QS_SRCDIR/tests/fixtures/cases"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-planted.so"
have_xmllint=0
command -v xmllint >/dev/null 2>&1 && have_xmllint=1

# well_formed FILE: parses as XML (xmllint), or at least opens and closes its root element
well_formed() {
    if [ "$have_xmllint" -eq 1 ]; then
        xmllint --noout "$1"
    else
        head -n 3 "$1" | grep -q '^<' && tail -n 1 "$1" | grep -q '^</[a-z]*>$'
    fi
}
# count FILE PATTERN: the number of lines of FILE matching PATTERN
count() {
    grep -c -- "$2" "$1" || true
}

# a run with nothing failing: a report without histograms
expect_status "an HTML report of a passing run" 0 "$QSPEC" run --quiet --html "$QST_TMP/ok.html" "$SUITE/formats-e4m3.yaml"
expect_true "the HTML report is written" test -s "$QST_TMP/ok.html"
expect_true "the HTML report is well formed" well_formed "$QST_TMP/ok.html"
expect_true "it starts with the HTML doctype" sh -c "head -n 1 '$QST_TMP/ok.html' | grep -q '^<!DOCTYPE html>$'"
expect_true "it gives the summary" grep -q '36 passed, 0 failed, 0 skipped' "$QST_TMP/ok.html"
expect_true "it names the backend and the kit version" grep -q "<th>kit</th><td>qspec $("$QSPEC" version | sed 's/qspec \([^ ]*\).*/\1/'), backend ABI" "$QST_TMP/ok.html"
expect_true "it has a row per case" test "$(count "$QST_TMP/ok.html" '^<tr class="pass"><td>fmt\.e4m3\.')" -eq 36
expect_true "a passing run draws no histogram" test "$(count "$QST_TMP/ok.html" '<svg')" -eq 0
expect_true "it needs nothing outside the file" sh -c "! grep -Eq '<script|<link|src=\"http|href=\"http' '$QST_TMP/ok.html'"

# [CASE-REPORT-HTML] a planted failure: the failing cases, their lines and histograms
if [ -f "$PLANTED" ]; then
    expect_status "the planted copy writes an HTML report" 1 "$QSPEC" run --quiet --backend "$PLANTED" --html "$QST_TMP/pl.html" --junit "$QST_TMP/pl.xml" --report-json "$QST_TMP/pl.json" "$SUITE/recipes-current.yaml"
    nfail=$(count "$QST_TMP/pl.json" '"status": "fail"')
    expect_true "the planted copy fails some cases" test "$nfail" -gt 0
    expect_true "the failing run's HTML is well formed" well_formed "$QST_TMP/pl.html"
    expect_true "the HTML names a failing case in a failed row" grep -q '^<tr class="fail"><td><a href="#case-[0-9]*">rec\.current\.fp32\.32x64\.pow2-0\.input</a></td>' "$QST_TMP/pl.html"
    expect_true "a failed row gives file:line, status and the message" grep -q 'recipes-current\.yaml:5</td><td class="status">fail</td>.*output=row_scale index=0 expected=0x4016e837' "$QST_TMP/pl.html"
    expect_true "the failed cases are listed twice (failures, all cases)" test "$(count "$QST_TMP/pl.html" '^<tr class="fail">')" -eq $((2 * nfail))
    expect_true "each failed case has its details section" test "$(count "$QST_TMP/pl.html" '^<section class="case" id="case-')" -eq "$nfail"
    expect_true "the failure lines are shown" grep -Eq '^(<pre>)?FAIL rec\.current\.fp32\.32x64\.pow2-0\.input seed=1001 output=row_scale' "$QST_TMP/pl.html"
    expect_true "the HTML holds inline SVG histograms" grep -q '<svg xmlns="http://www.w3.org/2000/svg"' "$QST_TMP/pl.html"
    expect_true "one histogram per failed output" test "$(count "$QST_TMP/pl.html" '<svg ')" -eq "$(count "$QST_TMP/pl.html" '^<figcaption>')"
    # the planted error is one ulp: each histogram has exactly one bar, in the bin (1/2, 1]
    expect_true "the bar counts the one-ulp element in the bin (2^-1, 2^0]" grep -q '<title>1 element with 2^-1 &lt; error &#8804; 2^0</title>' "$QST_TMP/pl.html"
    expect_true "no bar lies outside that bin" sh -c "! grep 'class=\"bar\"' '$QST_TMP/pl.html' | grep -v '2^-1 &lt; error &#8804; 2^0'"
    expect_true "the histogram has axis labels" grep -q '>log2 of the distance in ulp (steps between codes)<' "$QST_TMP/pl.html"
    expect_true "the histogram has a y axis label" grep -q '>elements</text>' "$QST_TMP/pl.html"
    expect_true "the histogram marks the tolerance" grep -q 'tolerance 0 (bitwise): every difference fails' "$QST_TMP/pl.html"
    expect_true "the caption counts the failing elements" grep -q 'output <b>row_scale</b>, compared bitwise (nan: canonical): 1 of 1 elements fail' "$QST_TMP/pl.html"

    # a tolerance comparison: the same error under ulp: 0 and allclose, with the tolerance at 2^0
    expect_status "tolerance cases fail on the planted copy" 1 "$QSPEC" run --quiet --backend "$PLANTED" --html "$QST_TMP/tol.html" "$FIX/report-tolerance.yaml"
    expect_out "both tolerance cases fail" "^0 passed, 2 failed, 0 skipped$"
    expect_true "the tolerance report is well formed" well_formed "$QST_TMP/tol.html"
    expect_true "an allclose histogram measures the error against the allowed error" grep -q 'log2 of |observed − expected| / (atol + rtol · |expected|)' "$QST_TMP/tol.html"
    expect_true "the allclose tolerance is drawn as a line" grep -q 'tolerance (allclose atol 0 rtol 1e-08)' "$QST_TMP/tol.html"
    # the error is 1 ulp of 2.3579 (2^-22) against an allowed 2.3579e-8: a ratio in (8, 16]
    expect_true "the allclose bar is the bin (2^3, 2^4]" grep -q '1 element with 2^3 &lt; error &#8804; 2^4' "$QST_TMP/tol.html"
    expect_true "an ulp tolerance of 0 fails every difference" grep -q 'tolerance 0 (ulp 0): every difference fails' "$QST_TMP/tol.html"

    # [CASE-REPORT] JUnit: the structure dashboards read
    expect_true "the JUnit report is well formed" well_formed "$QST_TMP/pl.xml"
    ntests=$(count "$QST_TMP/pl.json" '"id": ')
    expect_true "JUnit's root is testsuites with the totals" grep -q "^<testsuites name=\"qspec\" tests=\"$ntests\" failures=\"$nfail\" errors=\"0\" skipped=\"0\"" "$QST_TMP/pl.xml"
    expect_true "one testcase element per case" test "$(count "$QST_TMP/pl.xml" '^  <testcase ')" -eq "$ntests"
    expect_true "one failure element per failed case" test "$(count "$QST_TMP/pl.xml" '<failure message=')" -eq "$nfail"
    expect_true "a testcase names its file stem as classname and the id as name" grep -q '<testcase classname="qspec.recipes-current" name="rec.current.fp32.32x64.pow2-0.input" file=".*recipes-current.yaml" line="5" time="[0-9.]*">' "$QST_TMP/pl.xml"
    expect_true "the testsuite has a timestamp" grep -q 'timestamp="[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"' "$QST_TMP/pl.xml"
    expect_true "the backend is a property" grep -q '<property name="backend_version" value="1.0"/>' "$QST_TMP/pl.xml"
    if [ "$have_xmllint" -eq 1 ]; then
        n=$(xmllint --xpath 'count(/testsuites/testsuite/testcase)' "$QST_TMP/pl.xml")
        expect_true "xpath: the testcases are children of the testsuite" test "$n" -eq "$ntests"
        n=$(xmllint --xpath 'count(/testsuites/testsuite/testcase/failure)' "$QST_TMP/pl.xml")
        expect_true "xpath: each failure is the child of its testcase" test "$n" -eq "$nfail"
        n=$(xmllint --xpath 'string(/testsuites/testsuite/@tests)' "$QST_TMP/pl.xml")
        expect_true "xpath: the testsuite's tests attribute counts its testcases" test "$n" -eq "$ntests"
    fi
fi

# not supported cases are skipped elements; a case file that fails to load is an error element
mkdir "$QST_TMP/mixed"
cp "$SUITE/formats-e4m3.yaml" "$QST_TMP/mixed/a.yaml"
cp "$FIX/bad/unknown-key.yaml" "$QST_TMP/mixed/b.yaml"
expect_status "a run with a broken file writes JUnit" 2 "$QSPEC" run --quiet --junit "$QST_TMP/mixed.xml" --html "$QST_TMP/mixed.html" "$QST_TMP/mixed"
expect_true "the JUnit report with a load error is well formed" well_formed "$QST_TMP/mixed.xml"
expect_true "a load error counts as a test with an error" grep -q '^<testsuites name="qspec" tests="37" failures="0" errors="1" skipped="0"' "$QST_TMP/mixed.xml"
expect_true "the load error names the file" grep -q '<error message=".*mixed/b.yaml:8:52: unknown key' "$QST_TMP/mixed.xml"
expect_true "the HTML report lists the file that did not load" grep -q '<li><code>.*mixed/b.yaml:8:52: unknown key' "$QST_TMP/mixed.html"
if [ -f "$QS_BUILDDIR/tests/.libs/libqspec-example.so" ]; then
    expect_status "a run with not-supported cases writes JUnit" 0 "$QSPEC" run --quiet --backend "$QS_BUILDDIR/tests/.libs/libqspec-example.so" --junit "$QST_TMP/skip.xml" "$SUITE/formats-e4m3.yaml"
    nskip=$(count "$QST_TMP/skip.xml" '<skipped message="not supported by backend example: no cast of FP32 to e4m3[^"]*"/>')
    expect_true "not-supported cases are skipped elements" test "$nskip" -gt 0
    expect_true "the skipped attribute counts them" grep -q "skipped=\"$nskip\"" "$QST_TMP/skip.xml"
fi

# usage errors, and no partial report after an error
expect_usage "--html needs a value" "$QSPEC" run --html
expect_status "an unwritable HTML path is an error" 2 "$QSPEC" run --quiet --html "$QST_TMP/nodir/r.html" "$SUITE/formats-e4m3.yaml"
expect_err "the error names the file" "nodir/r.html: cannot (create|write into)"
expect_true "no partial HTML report is left" test ! -e "$QST_TMP/nodir"
echo "old" >"$QST_TMP/keep.html"
chmod 555 "$QST_TMP" 2>/dev/null || true
if ! touch "$QST_TMP/probe" 2>/dev/null; then
    expect_status "a report that cannot be replaced is an error" 2 "$QSPEC" run --quiet --html "$QST_TMP/keep.html" "$SUITE/formats-e4m3.yaml"
    chmod 755 "$QST_TMP"
    expect_true "the old report keeps its content" test "$(cat "$QST_TMP/keep.html")" = old
    expect_true "no temporary file is left beside it" test -z "$(ls "$QST_TMP" | grep 'keep.html.tmp')"
fi
chmod 755 "$QST_TMP"
rm -f "$QST_TMP/probe"
qst_done
