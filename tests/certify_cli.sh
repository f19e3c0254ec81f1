#!/bin/sh
# certify_cli.sh: certification runs and packages — `qspec run --certify` on the shipped suite
# and its must-pass list [CASE-CERTIFY-LIST], the package it writes [CASE-CERTIFY-PACKAGE],
# `qspec verify-package` accepting it and rejecting every kind of tampering with a line
# naming the problem [CASE-CERTIFY-VERIFY], and every usage error (exit 2, no package left).
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-planted.so"
PKG="$QST_TMP/pkg"
have_sha=0
command -v sha256sum >/dev/null 2>&1 && have_sha=1
version=$("$QSPEC" version | sed 's/qspec \([^ ]*\).*/\1/')

# no_leftovers DIR: neither DIR nor a temporary beside it exists
no_leftovers() {
    test ! -e "$1" && test -z "$(ls -d "$1".tmp-* 2>/dev/null)"
}
# first_id FILE: the id on the first result line of a results.json
first_id() {
    sed -n 's/^    {"id": "\([^"]*\)".*/\1/p' "$1" | head -n 1
}
# edit FILE AWK-PROGRAM: rewrites FILE through awk
edit() {
    awk "$2" "$1" >"$1.new" && mv "$1.new" "$1"
}
# resum PKG FILE: puts FILE's SHA-256 into the manifest and re-digests the manifest, as a
# forger would
resum() {
    old=$(grep "\"file\": \"$2\"" "$1/manifest.json" | sed 's/.*"sha256": "\([0-9a-f]*\)".*/\1/')
    new=$(sha256sum "$1/$2" | cut -d' ' -f1)
    sed "s/$old/$new/" "$1/manifest.json" >"$1/m.new" && mv "$1/m.new" "$1/manifest.json"
    (cd "$1" && sha256sum manifest.json >manifest.sha256)
}
# copy_pkg NAME: a fresh copy of the good package
copy_pkg() {
    rm -rf "$QST_TMP/$1"
    cp -R "$PKG" "$QST_TMP/$1"
}

# [CASE-CERTIFY-LIST] [CASE-CERTIFY-PACKAGE] a certification run on the reference
expect_status "run --certify on the reference certifies it" 0 "$QSPEC" run --quiet --jobs 2 --certify "$PKG" "$SUITE"
expect_out "it says the backend is certified" "^certification package .*/pkg: every must-pass case passed or is not supported$"
expect_out "it ends with the summary line" "^[0-9]+ passed, 0 failed, 0 skipped$"
for f in manifest.json manifest.sha256 results.json junit.xml report.html; do
    expect_true "the package holds $f" test -s "$PKG/$f"
done
expect_true "the package holds nothing else" test "$(ls "$PKG" | wc -l)" -eq 5
expect_true "no temporary directory is left" no_leftovers "$QST_TMP/pkg.tmp"
m="$PKG/manifest.json"
expect_true "the manifest names the kit version and ABI" grep -q "^  \"version\": \"$version\",$" "$m"
expect_true "the manifest names the ABI" grep -q '^  "abi": 1,$' "$m"
expect_true "the manifest says certified" grep -q '^  "certified": true,$' "$m"
expect_true "the manifest names the backend" grep -q '^    "name": "ref",$' "$m"
expect_true "the manifest names the device" grep -q '^    "device": "host CPU (the reference)",$' "$m"
expect_true "the manifest gives the OS" grep -q "^    \"os\": \"$(uname -s)\",$" "$m"
expect_true "the manifest gives the machine" grep -q "^    \"machine\": \"$(uname -m)\",$" "$m"
expect_true "the manifest gives the compiler" grep -Eq '^    "compiler": "(gcc|clang) [0-9]' "$m"
expect_true "the manifest gives the date" grep -Eq '^  "date": "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z",$' "$m"
ncases=$("$QSPEC" list "$SUITE" | wc -l)
nfail=$(grep -c '"status": "fail"' "$PKG/results.json" || true)
expect_true "the results hold the must-pass cases, none failed" test "$nfail" -eq 0
nres=$(grep -c '^    {"id": ' "$PKG/results.json")
expect_true "the manifest counts the must-pass cases of the results" grep -q "\"cases\": $nres},$" "$m"
expect_true "the must-pass list selects every case of the shipped suite" test "$nres" -eq "$ncases"
uncovered=""
for f in "$SUITE"/*.yaml; do
    grep -q "^    {\"file\": \"$(basename "$f")\"" "$m" || uncovered="$uncovered $(basename "$f")"
done
QST_N=$((QST_N + 1))
if [ -z "$uncovered" ]; then
    echo "ok $QST_N - the manifest lists every shipped case file (each has must-pass cases)"
else
    qst_fail "the manifest lists every shipped case file" "no case of these files is on conformance/cases/certify.list:$uncovered"
fi
if [ "$have_sha" -eq 1 ]; then
    expect_true "manifest.sha256 checks with sha256sum -c" sh -c "cd '$PKG' && sha256sum -c manifest.sha256 >/dev/null"
    bad=0
    for f in "$SUITE"/*.yaml; do
        name=$(basename "$f")
        sum=$(sha256sum "$f" | cut -d' ' -f1)
        grep -q "{\"file\": \"$name\", \"sha256\": \"$sum\"" "$m" || bad=1
    done
    expect_true "the manifest holds each case file's SHA-256" test "$bad" -eq 0
    sum=$(sha256sum "$SUITE/certify.list" | cut -d' ' -f1)
    expect_true "the manifest holds the must-pass list's SHA-256" grep -q "\"file\": \"certify.list\", \"sha256\": \"$sum\"" "$m"
    for f in results.json junit.xml report.html; do
        sum=$(sha256sum "$PKG/$f" | cut -d' ' -f1)
        expect_true "the manifest holds the SHA-256 of $f" grep -q "{\"file\": \"$f\", \"sha256\": \"$sum\"}" "$m"
    done
fi
expect_true "the package's HTML report is a certification report" grep -q '<h1>qspec certification report</h1>' "$PKG/report.html"
expect_true "the package's JUnit counts the cases" grep -q "^<testsuites name=\"qspec\" tests=\"$nres\" failures=\"0\"" "$PKG/junit.xml"

# [CASE-CERTIFY-VERIFY] verify-package
expect_status "verify-package accepts the package" 0 "$QSPEC" verify-package "$PKG" "$SUITE"
expect_out "it prints the verdict" "^VALID .*/pkg: qspec $version certification of backend ref $version \(host CPU \(the reference\)\), [0-9T:-]+Z: $nres must-pass cases, $nres passed, 0 not supported by the backend$"
expect_out "it says plainly that digests are not a signature" "^not signed: the digests show that the package's files agree with each other and with the suite, not who made them \(anyone can recompute them\); check a signature with --key$"
expect_true "verify-package prints nothing else" test "$(wc -l <"$QST_TMP/out")" -eq 2
if [ "$have_sha" -eq 1 ]; then
    # an edited result
    copy_pkg t1
    id=$(first_id "$QST_TMP/t1/results.json")
    edit "$QST_TMP/t1/results.json" 'd==0 && /"status": "pass"/ {sub(/"status": "pass"/, "\"status\": \"fail\""); d=1} {print}'
    expect_status "an edited result is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t1" "$SUITE"
    expect_out "the problem names results.json" "^INVALID .*/t1: results.json: its SHA-256 differs from the manifest's"
    expect_out "the verdict counts the problems" "^.*/t1 is not a valid certification package \([0-9]+ problems\)$"
    resum "$QST_TMP/t1" results.json
    expect_status "an edited result with forged digests is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t1" "$SUITE"
    expect_out "the problem names the failed case" "^INVALID .*/t1: must-pass case $id failed"
    # a removed case
    copy_pkg t2
    id=$(first_id "$QST_TMP/t2/results.json")
    edit "$QST_TMP/t2/results.json" 'd==0 && /^    \{"id": / {d=1; next} {print}'
    resum "$QST_TMP/t2" results.json
    expect_status "a removed case is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t2" "$SUITE"
    expect_out "the problem names the missing case" "^INVALID .*/t2: must-pass case $id is missing from results.json$"
    # a changed case-file digest
    copy_pkg t3
    zeros=0000000000000000000000000000000000000000000000000000000000000000
    sed "s/\({\"file\": \"formats-e4m3.yaml\", \"sha256\": \"\)[0-9a-f]*/\1$zeros/" "$PKG/manifest.json" >"$QST_TMP/t3/manifest.json"
    expect_true "the case-file digest was changed" sh -c "! cmp -s '$QST_TMP/t3/manifest.json' '$PKG/manifest.json'"
    expect_status "a changed case-file digest is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t3" "$SUITE"
    expect_out "the manifest's own digest catches it" "^INVALID .*/t3: manifest.json: its SHA-256 \([0-9a-f]{64}\) differs from manifest.sha256's"
    (cd "$QST_TMP/t3" && sha256sum manifest.json >manifest.sha256)
    expect_status "a changed case-file digest with a forged manifest digest is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t3" "$SUITE"
    expect_out "the problem names the case file" "^INVALID .*/t3: case file formats-e4m3.yaml: its SHA-256 in the manifest differs from the suite's"
    expect_true "it is the only problem" test "$(grep -c '^INVALID' "$QST_TMP/out")" -eq 1
    # a case file left out of the manifest
    copy_pkg t4
    grep -v '{"file": "formats-e5m2.yaml"' "$PKG/manifest.json" >"$QST_TMP/t4/manifest.json"
    (cd "$QST_TMP/t4" && sha256sum manifest.json >manifest.sha256)
    expect_status "a case file left out is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t4" "$SUITE"
    expect_out "the problem names the file" "^INVALID .*/t4: case file formats-e5m2.yaml holds must-pass cases but is missing from the manifest$"
    # a package from another kit version
    copy_pkg t5
    sed "s/^  \"version\": \"$version\",/  \"version\": \"0.0.0\",/" "$PKG/manifest.json" >"$QST_TMP/t5/manifest.json"
    (cd "$QST_TMP/t5" && sha256sum manifest.json >manifest.sha256)
    expect_status "a package of another kit version is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t5" "$SUITE"
    expect_out "the problem names both versions" "^INVALID .*/t5: manifest.json: made by qspec 0.0.0, but this is qspec $version"
fi
# a missing report and a missing manifest digest
copy_pkg t6
rm "$QST_TMP/t6/junit.xml" "$QST_TMP/t6/manifest.sha256"
expect_status "a package missing files is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t6" "$SUITE"
expect_out "the missing report is named" "^INVALID .*/t6: junit.xml is missing or unreadable$"
expect_out "the missing manifest digest is named" "^INVALID .*/t6: manifest.sha256 is missing or unreadable$"
expect_out "the verdict counts both" "is not a valid certification package \(2 problems\)$"
copy_pkg t7
echo '{"kit": ' >"$QST_TMP/t7/manifest.json"
expect_status "a malformed manifest is rejected" 1 "$QSPEC" verify-package "$QST_TMP/t7" "$SUITE"
expect_out "the problem says the manifest is not JSON" "^INVALID .*/t7: manifest.json is not valid JSON: "
# a suite whose case file differs from the one the package was made with
mkdir "$QST_TMP/suite2"
cp "$SUITE"/*.yaml "$SUITE/certify.list" "$QST_TMP/suite2/"
echo "# a comment added later" >>"$QST_TMP/suite2/gemm.yaml"
expect_status "a package checked against another version of a case file is rejected" 1 "$QSPEC" verify-package "$PKG" "$QST_TMP/suite2"
expect_out "the problem names the case file" "^INVALID .*/pkg: case file gemm.yaml: its SHA-256 in the manifest differs from the suite's"
echo "# another comment" >>"$QST_TMP/suite2/certify.list"
expect_status "a package checked against another must-pass list is rejected" 1 "$QSPEC" verify-package "$PKG" "$QST_TMP/suite2"
expect_out "the problem names the list" "^INVALID .*/pkg: manifest.json: the run used a must-pass list other than .*/suite2/certify.list$"

# the example plugin: certified for what it implements; the planted copy is not
if [ -f "$EXAMPLE" ] && [ -f "$PLANTED" ]; then
    expect_status "run --certify on the example plugin certifies it" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" --certify "$QST_TMP/ex" "$SUITE"
    expect_true "the manifest holds the plugin's SHA-256" grep -Eq '^    "file_sha256": "[0-9a-f]{64}"$' "$QST_TMP/ex/manifest.json"
    expect_status "verify-package accepts it" 0 "$QSPEC" verify-package "$QST_TMP/ex" "$SUITE"
    expect_out "the verdict counts what is not supported" "^VALID .*/ex: .* backend example 1.0 \(host CPU \(example plugin\)\), .*, [1-9][0-9]* passed, [1-9][0-9]* not supported by the backend$"
    expect_status "run --certify on the planted copy does not certify it" 1 "$QSPEC" run --quiet --backend "$PLANTED" --certify "$QST_TMP/pl" "$SUITE"
    expect_out "it says so" "^certification package .*/pl: NOT certified: must-pass cases failed$"
    expect_true "the package is written all the same" test -s "$QST_TMP/pl/manifest.json"
    expect_true "its manifest says not certified" grep -q '^  "certified": false,$' "$QST_TMP/pl/manifest.json"
    expect_status "verify-package rejects it" 1 "$QSPEC" verify-package "$QST_TMP/pl" "$SUITE"
    expect_out "a problem names a failed current-scaling case" "^INVALID .*/pl: must-pass case rec\.current\.[^ ]+ failed: output=[a-z_]+ index=0 expected=0x"
fi

# [CASE-CERTIFY-VERIFY] contradictions inside a package whose digests were all recomputed
if [ "$have_sha" -eq 1 ] && [ -d "$QST_TMP/pl" ]; then
    nf=$(grep -c '"status": "fail"' "$QST_TMP/pl/results.json")
    # every fail flipped to pass in results.json
    rm -rf "$QST_TMP/c1" && cp -R "$QST_TMP/pl" "$QST_TMP/c1"
    sed -i 's/"status": "fail"/"status": "pass"/' "$QST_TMP/c1/results.json"
    resum "$QST_TMP/c1" results.json
    expect_status "results flipped to pass are rejected" 1 "$QSPEC" verify-package "$QST_TMP/c1" "$SUITE"
    expect_out "results.json's own summary disagrees" "^INVALID .*/c1: results.json: its summary does not count its own results"
    expect_out "the manifest's summary disagrees" "^INVALID .*/c1: manifest.json: its summary differs from the results"
    expect_out "the manifest's certified flag disagrees" "^INVALID .*/c1: manifest.json: \"certified\": false, but the results make it true$"
    expect_out "junit.xml still counts the failures" "^INVALID .*/c1: junit.xml: $nf cases failed, but results.json has 0$"
    expect_out "junit.xml names a case that failed" "^INVALID .*/c1: junit.xml: case rec\.current\.[^ ]+ is fail, but results.json says pass$"
    expect_out "report.html still counts the failures" "^INVALID .*/c1: report.html: $nf cases failed, but results.json has 0$"
    # the summary of results.json made to agree as well: JUnit, HTML and the manifest still say no
    np=$(grep -c '"status": "pass"' "$QST_TMP/c1/results.json")
    sed -i "s/\"summary\": {\"passed\": [0-9]*, \"failed\": [0-9]*,/\"summary\": {\"passed\": $np, \"failed\": 0,/" "$QST_TMP/c1/results.json"
    resum "$QST_TMP/c1" results.json
    expect_status "with its summary forged too, still rejected" 1 "$QSPEC" verify-package "$QST_TMP/c1" "$SUITE"
    expect_true "results.json's summary now agrees with itself" sh -c "! grep -q 'results.json: its summary' '$QST_TMP/out'"
    expect_out "junit.xml still disagrees" "^INVALID .*/c1: junit.xml: $nf cases failed"
    # a manifest that says certified
    rm -rf "$QST_TMP/c2" && cp -R "$QST_TMP/pl" "$QST_TMP/c2"
    sed -i 's/^  "certified": false,/  "certified": true,/' "$QST_TMP/c2/manifest.json"
    (cd "$QST_TMP/c2" && sha256sum manifest.json >manifest.sha256)
    expect_status "a manifest that says certified is rejected" 1 "$QSPEC" verify-package "$QST_TMP/c2" "$SUITE"
    expect_out "the flag is named" "^INVALID .*/c2: manifest.json: \"certified\": true, but the results make it false$"
    # a changed backend name, in the manifest or in the results
    copy_pkg c3
    sed -i 's/^    "name": "ref",/    "name": "fast",/' "$QST_TMP/c3/manifest.json"
    (cd "$QST_TMP/c3" && sha256sum manifest.json >manifest.sha256)
    expect_status "a backend renamed in the manifest is rejected" 1 "$QSPEC" verify-package "$QST_TMP/c3" "$SUITE"
    expect_out "the identity is named" "^INVALID .*/c3: results.json: the backend's name, version or device differs from the manifest's$"
    copy_pkg c4
    sed -i 's/^  "device": "host CPU (the reference)",/  "device": "a faster one",/' "$QST_TMP/c4/results.json"
    resum "$QST_TMP/c4" results.json
    expect_status "a device changed in the results is rejected" 1 "$QSPEC" verify-package "$QST_TMP/c4" "$SUITE"
    expect_out "the identity is named" "^INVALID .*/c4: results.json: the backend's name, version or device differs"
    copy_pkg c5
    sed -i 's/<property name="device" value="[^"]*"/<property name="device" value="elsewhere"/' "$QST_TMP/c5/junit.xml"
    resum "$QST_TMP/c5" junit.xml
    expect_status "a device changed in junit.xml is rejected" 1 "$QSPEC" verify-package "$QST_TMP/c5" "$SUITE"
    expect_out "junit.xml's identity is named" "^INVALID .*/c5: junit.xml: the backend, its version or device differs from the manifest's$"
    # an emptied junit.xml, a garbage report.html
    copy_pkg c6
    : >"$QST_TMP/c6/junit.xml"
    resum "$QST_TMP/c6" junit.xml
    printf '<html>all passed</html>\n' >"$QST_TMP/c6/report.html"
    resum "$QST_TMP/c6" report.html
    expect_status "an empty junit.xml and a garbage report.html are rejected" 1 "$QSPEC" verify-package "$QST_TMP/c6" "$SUITE"
    expect_out "junit.xml is named" "^INVALID .*/c6: junit.xml: no summary where this kit writes one: not a report of this kit$"
    expect_out "report.html is named" "^INVALID .*/c6: report.html: no summary where this kit writes one: not a report of this kit$"
    # a row of the HTML report changed
    copy_pkg c7
    id=$(first_id "$PKG/results.json")
    sed -i "s|<tr class=\"pass\"><td>$id</td>|<tr class=\"skip\"><td>$id</td>|" "$QST_TMP/c7/report.html"
    expect_true "a row was changed" sh -c "! cmp -s '$QST_TMP/c7/report.html' '$PKG/report.html'"
    resum "$QST_TMP/c7" report.html
    expect_status "a case's row changed in report.html is rejected" 1 "$QSPEC" verify-package "$QST_TMP/c7" "$SUITE"
    expect_out "the case is named" "^INVALID .*/c7: report.html: case $id is not_supported, but results.json says pass$"
    # entries a package should not hold
    copy_pkg c8
    echo extra >"$QST_TMP/c8/notes.txt"
    mkdir "$QST_TMP/c8/more"
    mv "$QST_TMP/c8/report.html" "$QST_TMP/report-copy.html"
    ln -s "$QST_TMP/report-copy.html" "$QST_TMP/c8/report.html"
    expect_status "extra entries and links are rejected" 1 "$QSPEC" verify-package "$QST_TMP/c8" "$SUITE"
    expect_out "an extra file is named" "^INVALID .*/c8: 'notes.txt' does not belong in a package"
    expect_out "an extra folder is named" "^INVALID .*/c8: 'more' does not belong in a package"
    expect_out "a link is named" "^INVALID .*/c8: report.html is a symbolic link: a package holds regular files only$"
    expect_true "the link's target has the right digest: only the link is wrong" test "$(grep -c '^INVALID' "$QST_TMP/out")" -eq 3
fi

# [CASE-CERTIFY-SIGN] an optional detached signature over manifest.sha256 (ssh-keygen -Y)
if command -v ssh-keygen >/dev/null 2>&1 && ssh-keygen -t ed25519 -N '' -q -C qspec-test -f "$QST_TMP/key" </dev/null &&
    ssh-keygen -t ed25519 -N '' -q -C other -f "$QST_TMP/other" </dev/null; then
    copy_pkg g1
    expect_status "ssh-keygen signs manifest.sha256" 0 ssh-keygen -Y sign -f "$QST_TMP/key" -n qspec-package "$QST_TMP/g1/manifest.sha256"
    expect_status "a signed package verifies with the key" 0 "$QSPEC" verify-package --key "$QST_TMP/key.pub" "$QST_TMP/g1" "$SUITE"
    expect_out "the verdict says it is signed" "^signed: manifest.sha256 carries a good signature by the key .*/key.pub \(ssh-keygen -Y verify, namespace qspec-package\)$"
    expect_status "without --key the signature is allowed but not checked" 0 "$QSPEC" verify-package "$QST_TMP/g1" "$SUITE"
    expect_out "and the verdict says not signed" "^not signed: "
    expect_status "another key is rejected" 1 "$QSPEC" verify-package --key "$QST_TMP/other.pub" "$QST_TMP/g1" "$SUITE"
    expect_out "the signature is named" "^INVALID .*/g1: manifest.sha256.sig: not a good signature of manifest.sha256 by the key .*/other.pub"
    expect_status "--key with an unsigned package is rejected" 1 "$QSPEC" verify-package --key "$QST_TMP/key.pub" "$PKG" "$SUITE"
    expect_out "the missing signature is named" "^INVALID .*/pkg: manifest.sha256.sig is missing: the package is not signed"
    expect_status "--key with a file that is not a public key is rejected" 1 "$QSPEC" verify-package --key "$QST_TMP/g1/results.json" "$QST_TMP/g1" "$SUITE"
    expect_out "the key is named" "^INVALID .*/g1: --key .*results.json: not an SSH public key"
    if [ "$have_sha" -eq 1 ]; then
        # re-signing by a forger needs the key: an edited, re-digested package fails the signature
        copy_pkg g2
        cp "$QST_TMP/g1/manifest.sha256.sig" "$QST_TMP/g2/"
        sed -i 's/^  "date": "[^"]*",/  "date": "2020-01-01T00:00:00Z",/' "$QST_TMP/g2/manifest.json"
        (cd "$QST_TMP/g2" && sha256sum manifest.json >manifest.sha256)
        expect_status "a re-digested package fails the signature" 1 "$QSPEC" verify-package --key "$QST_TMP/key.pub" "$QST_TMP/g2" "$SUITE"
        expect_out "the signature is named" "^INVALID .*/g2: manifest.sha256.sig: not a good signature"
    fi
    expect_usage "--key needs a value" "$QSPEC" verify-package "$PKG" --key
else
    echo "# ssh-keygen cannot make keys here: the signature checks are not run"
fi

# [CASE-CERTIFY-LIST] usage errors: one line, exit 2, no package
mkdir "$QST_TMP/small"
cp "$SUITE/formats-e4m3.yaml" "$QST_TMP/small/"
printf '# a small suite\nfmt.e4m3.rne.*   # the rne cases\n\nfmt.e4m3.rz.*\n' >"$QST_TMP/small/certify.list"
expect_status "a certification run of a small suite" 0 "$QSPEC" run --quiet --certify "$QST_TMP/s1" "$QST_TMP/small"
expect_out "it runs exactly the cases on the list" "^12 passed, 0 failed, 0 skipped$"
for opt in "--filter fmt" "--update-digests" "--report-json $QST_TMP/r.json" "--junit $QST_TMP/j.xml" "--html $QST_TMP/r.html"; do
    name=${opt%% *}
    # shellcheck disable=SC2086
    expect_usage "--certify rejects $name" "$QSPEC" run --certify "$QST_TMP/u" $opt "$QST_TMP/small"
    expect_err "the message names $name" "^qspec run: --certify runs the fixed must-pass list and writes its own reports: $name is not allowed with it$"
    expect_true "no package after $name" no_leftovers "$QST_TMP/u"
done
expect_true "no report was written" test ! -e "$QST_TMP/r.json" -a ! -e "$QST_TMP/j.xml" -a ! -e "$QST_TMP/r.html"
expect_usage "--certify needs a value" "$QSPEC" run --certify
expect_usage "--certify takes one suite folder" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/small" "$SUITE"
expect_usage "--certify runs a folder, not a file" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/small/formats-e4m3.yaml"
expect_err "the message names the file" "is not a folder"
expect_usage "an existing package directory" "$QSPEC" run --quiet --certify "$QST_TMP/s1" "$QST_TMP/small"
expect_err "the message names the directory" "s1: already exists"
expect_true "the existing package is untouched" sh -c "cd '$QST_TMP/s1' && test \"\$(ls | wc -l)\" -eq 5"
mkdir "$QST_TMP/nolist"
cp "$SUITE/formats-e4m3.yaml" "$QST_TMP/nolist/"
expect_usage "a suite without a must-pass list" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/nolist"
expect_err "the message names the list" "must-pass list: .*nolist/certify.list: cannot open"
printf 'fmt.e4m3.*\nfmt.nosuch.*\n' >"$QST_TMP/nolist/certify.list"
expect_usage "a stale line of the list" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/nolist"
expect_err "the message is file:line" "nolist/certify.list:2: 'fmt.nosuch.\*' matches no case of the suite"
printf 'fmt.E4M3.*\n' >"$QST_TMP/nolist/certify.list"
expect_usage "a line that is not a glob of ids" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/nolist"
expect_err "the message names the line" "nolist/certify.list:1: 'fmt.E4M3.\*' is not a case-id glob"
printf 'fmt.e4m3.* fmt.e5m2.*\n' >"$QST_TMP/nolist/certify.list"
expect_usage "two globs on a line" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/nolist"
printf '# nothing\n' >"$QST_TMP/nolist/certify.list"
expect_usage "an empty list" "$QSPEC" run --certify "$QST_TMP/u" "$QST_TMP/nolist"
expect_err "the message says it is empty" "the must-pass list is empty"
cp "$QS_SRCDIR/tests/fixtures/cases/bad/unknown-key.yaml" "$QST_TMP/small/broken.yaml"
expect_status "a suite with a broken file does not certify" 2 "$QSPEC" run --quiet --certify "$QST_TMP/u" "$QST_TMP/small"
expect_err "the broken file is named" "small/broken.yaml:8:52: unknown key 'colour'"
expect_true "no package after any usage error" no_leftovers "$QST_TMP/u"

# verify-package usage errors
expect_usage "verify-package needs a directory" "$QSPEC" verify-package
expect_usage "verify-package takes at most two paths" "$QSPEC" verify-package "$PKG" "$SUITE" extra
expect_usage "verify-package of a missing directory" "$QSPEC" verify-package "$QST_TMP/nosuch" "$SUITE"
expect_err "the message names it" "'.*/nosuch' is not a package directory"
expect_usage "verify-package with a missing suite" "$QSPEC" verify-package "$PKG" "$QST_TMP/nosuch"
expect_usage "verify-package with an unknown option" "$QSPEC" verify-package --frob "$PKG"
mkdir "$QST_TMP/small2"
cp "$SUITE/formats-e4m3.yaml" "$QST_TMP/small2/"
expect_usage "verify-package against a suite without a list" "$QSPEC" verify-package "$PKG" "$QST_TMP/small2"
expect_err "the message names the list" "must-pass list: .*small2/certify.list: cannot open"
qst_done
