#!/bin/sh
# program_cli.sh: the program scenario suites through the qspec CLI — every case passes on
# the reference, its golden digests are reproduced exactly by --update-digests, a broken
# program file is one file:line:col line and exit 2, a false claim fails the case with a
# line naming the variant, and a plugin reports every program case as not supported.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
FILES="scenarios-island.yaml scenarios-nesting.yaml scenarios-delayed.yaml scenarios-mla.yaml scenarios-distributed.yaml"

# [CASE-PROG] [CASE-PROG-RUN] [CASE-RUN] every scenario case passes on the reference
for f in $FILES; do
    n=$(grep -c '^  - id: ' "$SUITE/$f")
    expect_status "$f runs on the reference" 0 "$QSPEC" run --quiet "$SUITE/$f"
    expect_out "$f: all $n cases pass" "^$n passed, 0 failed, 0 skipped$"
done
# the suites are as large as the scoping scenarios need
expect_true "at least 8 island cases" test "$(grep -c '^  - id: island\.' "$SUITE/scenarios-island.yaml")" -ge 8
expect_true "each island recipe has its case" sh -c "for r in delayed current mxfp8 block nvfp4; do grep -q \"^  - id: island.\$r.bf16\$\" '$SUITE/scenarios-island.yaml' || exit 1; done"
# [RCP-MLA-UP-PROJ] every recipe x layout x K/V form x MLA form has its recompute case
expect_true "each MLA recompute combination has its case" sh -c "for f in plain absorbed; do for r in delayed current mxfp8 block nvfp4; do for l in sbhd thd; do for k in combined split; do grep -q \"^  - id: mla.\$f.\$r.\$l.\$k\$\" '$SUITE/scenarios-mla.yaml' || exit 1; done; done; done; done"

# [CASE-DIGEST] [CASE-PROG-OUTPUT] the golden digests are the reference's: pending digests
# are filled in with exactly the committed ones
for f in $FILES; do
    sed 's/digest: sha256:[0-9a-f]*/digest: pending/' "$SUITE/$f" >"$QST_TMP/$f"
    expect_status "$f with pending digests fails" 1 "$QSPEC" run --quiet "$QST_TMP/$f"
    expect_status "$f: --update-digests" 0 "$QSPEC" run --quiet --update-digests "$QST_TMP/$f"
    expect_true "$f: the digests reproduce the committed ones" cmp -s "$SUITE/$f" "$QST_TMP/$f"
done

# [CASE-SCHEMA-ERRORS] [CASE-PROG-OP] a broken program is one file:line:col line, exit 2
sed 's/- linear: {name: lin1, w: w1}/- linear: {name: lin1, w: w1, bias: b1}/' \
    "$SUITE/scenarios-nesting.yaml" >"$QST_TMP/broken.yaml"
line=$(grep -n 'bias: b1' "$QST_TMP/broken.yaml" | head -n 1 | cut -d: -f1)
expect_usage "a broken program file is rejected" "$QSPEC" list "$QST_TMP/broken.yaml"
expect_err "the message names file, line and column" "^$QST_TMP/broken.yaml:$line:[0-9]+: unknown key 'bias' in linear$"
# [CASE-PROG-ISLAND-CHECK] the static island check, with the remedy: without the island,
# the variant that does not expect the rejection is a load error at the gdn
sed 's/- island: {when: isl, body: \[{gdn: {name: gdn, g: g, beta: beta}}\]}/- gdn: {name: gdn, g: g, beta: beta}/' \
    "$SUITE/scenarios-island.yaml" >"$QST_TMP/noisland.yaml"
line=$(grep -n '^            - gdn: {name: gdn, g: g, beta: beta}$' "$QST_TMP/noisland.yaml" | head -n 1 | cut -d: -f1)
expect_usage "a GDN in an enabled region without an island is a load error" "$QSPEC" list "$QST_TMP/noisland.yaml"
expect_err "it names the gdn, the region, the variant and the remedy" "noisland.yaml:$line:15: gdn 'gdn' sits in an enabled region \(recipe mxfp8\) without an island, in variant 'island'.*wrap it in an 'island' region"

# [CASE-PROG-COMPARE] [CASE-REPORT] a false claim fails the case, naming the variant
sed 's/        same_as: \[eager, {variant: around, outputs: \[trace\]}\]/        same_as: hp/' \
    "$SUITE/scenarios-island.yaml" >"$QST_TMP/false.yaml"
expect_status "a false same_as fails" 1 "$QSPEC" run --quiet "$QST_TMP/false.yaml"
expect_out "the failure names the variants and the output" "^FAIL island\.delayed\.bf16 seed=[0-9]+ .*variant 'inside' same_as 'hp': output=y differs: index=[0-9]+ expected=0x[0-9a-f]+ \([^)]*\) observed=0x[0-9a-f]+"
expect_out "only the cases with the false claim fail" "^[0-9]+ passed, 5 failed, 0 skipped$"
# [CASE-PROG-REPLAYS] a false replay count fails the case, naming the variant and the step
sed 's/^        replays: 1$/        replays: 2/' "$SUITE/scenarios-mla.yaml" >"$QST_TMP/replays.yaml"
expect_status "a false replay count fails" 1 "$QSPEC" run --quiet "$QST_TMP/replays.yaml"
expect_out "the failure names the variant and the counts" "^FAIL mla\.absorbed\.delayed\.sbhd\.combined seed=[0-9]+ .*variant 'rc' step 1: replays: expected 2, the run has 1"
# [CASE-PROG-RANKS] [DIST-COUNT] a false reduction count fails the case on a rank
awk '/^        reductions: \{1: 3, 2: 3\}$/ && ++n == 2 {sub(/2: 3\}/, "2: 4}")} {print}' \
    "$SUITE/scenarios-distributed.yaml" >"$QST_TMP/red.yaml"
expect_status "a false reduction count fails" 1 "$QSPEC" run --quiet "$QST_TMP/red.yaml"
expect_out "the failure names the rank, the group and the counts" "^FAIL dist\.nested\.pairs seed=[0-9]+ .*rank 0: variant 'world' step 1: reductions on group 2: expected 4, the run has 3 \[DIST-COUNT\]"
# [CASE-PROG-RANKS] what a variant on several ranks may not hold is a load error
sed 's/^        groups: {1: \[0, 1, 2, 3\]}$/        groups: {1: [0, 1]}/' "$SUITE/scenarios-distributed.yaml" >"$QST_TMP/colors.yaml"
expect_usage "a group with a color count other than the ranks" "$QSPEC" list "$QST_TMP/colors.yaml"
expect_err "it says how many colors" "colors.yaml:[0-9]+:[0-9]+: group 1 has 2 colors for 4 ranks \(one color per rank\)$"
sed '0,/^        ranks: 2$/s//        ranks: 2\n        parallel: tensor/' "$SUITE/scenarios-distributed.yaml" >"$QST_TMP/tp2.yaml"
expect_usage "a tensor-parallel variant with two linears" "$QSPEC" list "$QST_TMP/tp2.yaml"
expect_err "it names the variant and the count" "tp2.yaml:[0-9]+:[0-9]+: variant 'r2': a tensor-parallel variant holds exactly one linear op \(it has 2\)"
sed 's/^      - name: island$/      - name: island\n        ranks: 2/' "$SUITE/scenarios-island.yaml" >"$QST_TMP/gdnranks.yaml"
expect_usage "a gdn op on several ranks" "$QSPEC" list "$QST_TMP/gdnranks.yaml"
expect_err "it says why" "gdnranks.yaml:[0-9]+:[0-9]+: variant 'island': on several ranks a program holds linear ops only"
# [CASE-PROG-OP] [RCP-MLA-OP] a weight of another shape is a load error at the weight
sed 's/w_uq: w_uq/w_uq: w_dq/' "$SUITE/scenarios-mla.yaml" >"$QST_TMP/mlashape.yaml"
line=$(grep -n 'w_uq: w_dq' "$QST_TMP/mlashape.yaml" | head -n 1 | cut -d: -f1)
expect_usage "an mla weight of another shape is rejected" "$QSPEC" list "$QST_TMP/mlashape.yaml"
expect_err "it names the op, the weight and its shape" "^$QST_TMP/mlashape.yaml:$line:[0-9]+: impossible shape: mla 'm': the weight 'w_uq' \(w_dq\) must be \[32, 16\]"

# [CASE-PROG-BACKEND] [CASE-BACKEND-UNSUPPORTED] on the example plugin only the programs
# whose slots it has run (one: tests/program_plugin.sh checks which); the others are skipped
if [ -f "$EXAMPLE" ]; then
    total=0
    for f in $FILES; do total=$((total + $(grep -c '^  - id: ' "$SUITE/$f"))); done
    expect_status "program cases on the example plugin" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" \
        "$SUITE/scenarios-island.yaml" "$SUITE/scenarios-nesting.yaml" "$SUITE/scenarios-delayed.yaml" \
        "$SUITE/scenarios-mla.yaml" "$SUITE/scenarios-distributed.yaml"
    expect_out "none fails, every one passes or is not supported" "^[0-9]+ passed, 0 failed, [0-9]+ skipped$"
fi
qst_done
