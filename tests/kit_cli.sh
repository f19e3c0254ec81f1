#!/bin/sh
# kit_cli.sh: qspec run / list / show / coverage — the schema errors of broken case files
# (file:line:col, exit 2, the other files still run), golden digests and --update-digests,
# reports, and the example plugin: it passes the cases it claims, reports the rest as not
# supported, and a copy with a planted one-ulp error fails exactly the cases covering it.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
FIX="$QS_SRCDIR/tests/fixtures/cases"
SUITE="$QS_SRCDIR/conformance/cases"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-planted.so"

# [CASE-SCHEMA-ERRORS] each broken file gets one file:line:col line and exit 2
check_bad() {
    file=$1 pattern=$2
    expect_usage "list rejects $file" "$QSPEC" list "$FIX/bad/$file"
    expect_err "$file: the message is file:line:col: reason" "^$FIX/bad/$file:[0-9]+:[0-9]+: $pattern"
}
check_bad unknown-key.yaml "unknown key 'colour'"
check_bad wrong-type.yaml "'rules' must be a sequence"
check_bad bad-shape.yaml "impossible shape"
check_bad values-mismatch.yaml "impossible shape"
check_bad bad-digest.yaml "malformed digest"
check_bad missing-field.yaml "missing required field 'op'"
check_bad unknown-rule.yaml "unknown rule ID 'FMT-NO-SUCH-RULE'"
check_bad syntax.yaml "YAML syntax error"
check_bad unknown-op.yaml "unknown op 'frobnicate'"
check_bad bad-param.yaml "'clamp' is not a valid overflow"

# [CASE-RUN] [CASE-DIGEST] [CASE-REPORT] [CASE-OP-CAST] [CASE-OP-QUANTIZE] [CASE-OP-GEMM]
# [CASE-OP-SDPA] [CASE-OP-GDN] (the default suite below runs every op)
# the other files of a run still run and are reported
cp "$FIX/good.yaml" "$QST_TMP/good.yaml"
expect_status "run with pending digests fails the cases" 1 "$QSPEC" run --quiet "$QST_TMP/good.yaml"
expect_out "a pending digest is named" "FAIL kit-test.e4m3-boundaries seed=0 output=y: no golden digest"
expect_status "update-digests fills them in" 0 "$QSPEC" run --quiet --update-digests "$QST_TMP/good.yaml"
expect_true "the file now holds sha256 digests" grep -q "digest: sha256:[0-9a-f]\{64\}" "$QST_TMP/good.yaml"
expect_status "the updated file passes" 0 "$QSPEC" run --quiet "$QST_TMP/good.yaml"
expect_out "summary line" "^2 passed, 0 failed, 0 skipped$"
mkdir "$QST_TMP/mixed"
cp "$QST_TMP/good.yaml" "$QST_TMP/mixed/a.yaml"
cp "$FIX/bad/unknown-key.yaml" "$QST_TMP/mixed/b.yaml"
expect_status "a run over a broken file exits 2" 2 "$QSPEC" run --quiet "$QST_TMP/mixed"
expect_err "the broken file is named with line and column" "mixed/b.yaml:8:52: unknown key 'colour'"
expect_out "the good file's cases still ran" "^2 passed, 0 failed, 0 skipped$"
# a regression of the reference: a digest that does not match
sed 's/digest: sha256:[0-9a-f]/digest: sha256:f/' "$QST_TMP/good.yaml" | sed 's/sha256:ff/sha256:fe/' >"$QST_TMP/regress.yaml"
if ! cmp -s "$QST_TMP/good.yaml" "$QST_TMP/regress.yaml"; then
    expect_status "a changed golden digest fails" 1 "$QSPEC" run --quiet "$QST_TMP/regress.yaml"
    expect_out "it is reported as a reference regression" "reference regression"
fi
expect_status "update-digests is for the reference only" 2 "$QSPEC" run --backend cuda --update-digests "$QST_TMP/good.yaml"

# --jobs: the same report, line for line, from worker processes
"$QSPEC" run --quiet "$SUITE" >"$QST_TMP/seq.txt" || true
expect_status "run --jobs 2 over the suite" 0 "$QSPEC" run --quiet --jobs 2 "$SUITE"
expect_true "--jobs gives the same output as one process" cmp -s "$QST_TMP/seq.txt" "$QST_TMP/out"
if [ -f "$QST_TMP/regress.yaml" ]; then
    "$QSPEC" run --quiet "$QST_TMP/regress.yaml" >"$QST_TMP/seq2.txt" || true
    expect_status "run --jobs 3 with failures" 1 "$QSPEC" run --quiet -j 3 "$QST_TMP/regress.yaml"
    expect_true "failure lines come in case order under --jobs" cmp -s "$QST_TMP/seq2.txt" "$QST_TMP/out"
fi
expect_usage "--jobs needs a number" "$QSPEC" run --jobs 0 "$SUITE"
expect_usage "--jobs does not combine with --update-digests" "$QSPEC" run --jobs 2 --update-digests "$SUITE"

# report JSON
expect_status "run writes a JSON report" 0 "$QSPEC" run --quiet --report-json "$QST_TMP/r.json" "$QST_TMP/good.yaml"
expect_true "the report holds the summary" grep -q '"summary": {"passed": 2, "failed": 0, "skipped": 0' "$QST_TMP/r.json"
expect_status "an unwritable report path is an error" 2 "$QSPEC" run --quiet --report-json "$QST_TMP/nodir/r.json" "$QST_TMP/good.yaml"
expect_true "no partial report is left" test ! -e "$QST_TMP/nodir"

# list, show, filter, coverage
expect_status "list" 0 "$QSPEC" list "$QST_TMP/good.yaml"
expect_out "list prints ids" "^kit-test.e5m2-random$"
expect_status "list --filter" 0 "$QSPEC" list --filter '*e4m3*' "$QST_TMP/good.yaml"
expect_true "filter keeps only matching ids" test "$(cat "$QST_TMP/out")" = kit-test.e4m3-boundaries
expect_status "show" 0 "$QSPEC" show kit-test.e5m2-random "$QST_TMP/good.yaml"
expect_out "show gives the rules" "^rules: FMT-E5M2-OVF$"
expect_out "show summarises the inputs" "x: fp32 \[4, 8\], normal\(0, 1000\) seed 3 offset 0, 2 injected values"
expect_usage "show of an unknown id" "$QSPEC" show nosuch "$QST_TMP/good.yaml"
expect_usage "show needs an id" "$QSPEC" show
expect_usage "run of a missing path" "$QSPEC" run /nonexistent/cases
expect_usage "run with an unknown option" "$QSPEC" run --frob
expect_usage "run --filter needs a value" "$QSPEC" run --filter
expect_usage "run with an unknown backend" "$QSPEC" run --backend nosuch "$QST_TMP/good.yaml"
expect_usage "list with an unknown option" "$QSPEC" list --frob
expect_status "coverage" 0 "$QSPEC" coverage "$QST_TMP/good.yaml"
expect_out "coverage counts a cited rule" "^FMT-E4M3-OVF +1$"

# the default suite on the reference
expect_status "the default suite passes on the reference" 0 "$QSPEC" run --quiet "$SUITE"
expect_out "the suite reports its summary" "^[0-9]+ passed, 0 failed, 0 skipped$"

# [CASE-BACKEND-UNSUPPORTED] the example plugin
if [ -f "$EXAMPLE" ] && [ -f "$PLANTED" ]; then
    expect_status "the example plugin passes what it claims" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" "$SUITE"
    pass=$(sed -n 's/^\([0-9]*\) passed, 0 failed, \([0-9]*\) skipped$/\1/p' "$QST_TMP/out")
    skip=$(sed -n 's/^\([0-9]*\) passed, 0 failed, \([0-9]*\) skipped$/\2/p' "$QST_TMP/out")
    expect_true "it passes some cases and skips the rest as not supported" test "${pass:-0}" -gt 0 -a "${skip:-0}" -gt 0
    "$QSPEC" list "$SUITE" >"$QST_TMP/all"
    # [CASE-OP-CAST] [FMT-ROUND-SR] the BF16 and FP16 casts, stochastic rounding included, run
    # through the example's cast16 slot and pass bit for bit
    expect_status "the 16-bit casts run through cast16" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" \
        "$SUITE/formats-bf16.yaml" "$SUITE/formats-fp16.yaml"
    expect_out "every one passes" "^72 passed, 0 failed, 0 skipped$"
    # the cases covering the planted error: the current-scaling quantizer's (the recipe's
    # cases, the distributed ones of one rank, which a one-rank run runs, and the MLP blocks
    # under current scaling, whose 256-wide GEMMs resolve the planted ulp)
    "$QSPEC" run --quiet --backend "$EXAMPLE" --report-json "$QST_TMP/ex.json" "$SUITE" >/dev/null || true
    grep '"status": "pass"' "$QST_TMP/ex.json" | sed 's/.*"id": "\([^"]*\)".*/\1/' | grep -E '^((rec|dist\.q)\.current\.|mlp\.current\.ckpt$|mlp\.inject\.current$)' | sort >"$QST_TMP/expected_fail"
    expect_status "the planted copy fails" 1 "$QSPEC" run --quiet --backend "$PLANTED" --report-json "$QST_TMP/pl.json" "$SUITE"
    grep '"status": "fail"' "$QST_TMP/pl.json" | sed 's/.*"id": "\([^"]*\)".*/\1/' | sort >"$QST_TMP/failed"
    expect_true "there are current-scaling cases it must fail" test -s "$QST_TMP/expected_fail"
    expect_true "it fails exactly the cases covering the planted quantizer" cmp -s "$QST_TMP/expected_fail" "$QST_TMP/failed"
    # --jobs with a plugin: each process its own worker; the same lines and results
    "$QSPEC" run --quiet --backend "$PLANTED" "$SUITE" >"$QST_TMP/pl_seq.txt" || true
    expect_status "the planted copy under --jobs 3" 1 "$QSPEC" run --quiet --jobs 3 --backend "$PLANTED" \
        --report-json "$QST_TMP/pl3.json" --html "$QST_TMP/pl3.html" "$SUITE"
    expect_true "--jobs 3 prints what one worker prints, line for line" cmp -s "$QST_TMP/pl_seq.txt" "$QST_TMP/out"
    grep '"status": "fail"' "$QST_TMP/pl3.json" | sed 's/.*"id": "\([^"]*\)".*/\1/' | sort >"$QST_TMP/failed3"
    expect_true "--jobs 3 fails the same cases" cmp -s "$QST_TMP/failed" "$QST_TMP/failed3"
    expect_true "--jobs 3: the failed outputs' histograms reach the HTML report" \
        test "$(grep -c 'class="hist"' "$QST_TMP/pl3.html")" -gt 0
    expect_status "the planted copy writes JUnit XML" 1 "$QSPEC" run --quiet --backend "$PLANTED" --junit "$QST_TMP/j.xml" --filter 'rec.current.*' "$SUITE"
    nfail=$(grep -c '^rec\.current\.' "$QST_TMP/failed")
    expect_true "JUnit counts the failures" grep -q "failures=\"$nfail\" errors=\"0\" skipped=\"0\"" "$QST_TMP/j.xml"
    expect_true "JUnit holds a failure element per failed case" test "$(grep -c '<failure message=' "$QST_TMP/j.xml")" -eq "$nfail"
    "$QSPEC" run --quiet --backend "$PLANTED" --filter 'rec.current.*' "$SUITE" >"$QST_TMP/out" || true
    expect_out "a failure line shows expected and observed in hex and decimal" "^FAIL rec\.current\.[^ ]+ seed=[0-9]+ output=[a-z_]+ index=[0-9]+ expected=0x[0-9a-f]+ \([^)]*\) observed=0x[0-9a-f]+ \([^)]*\) mismatches=[0-9]+/[0-9]+"
fi
qst_done
