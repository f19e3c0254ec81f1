#!/bin/bash
# gpu-report.sh OUTDIR [SECONDS]: everything the CUDA backend is judged by on a GPU machine,
# in one run of at most SECONDS (default 3000), from a build tree where `make` and
# `make gpu-tools` ran (run it from that tree, or set QSPEC_BUILD). It writes OUTDIR/:
#   summary.txt     one line per step: what ran, its exit status and wall time, and the
#                   last line it printed
#   suite.txt/.json the default suite on the plugin (reference-order kernels), --timing
#   suite-fast.*    the same with QSPEC_CUDA_SDPA=flash QSPEC_CUDA_GDN=chunk
#   suite-mma.*     and with the mma.sync flash kernels instead of the wgmma ones (the path of
#                   other devices and head dims: QSPEC_CUDA_FLASH_WGMMA=0)
#   large.txt       the large tier (fast kernels), one `qspec run --timing` per case, LARGE_JOBS
#                   at a time, so a case cut by the budget costs only its own verdict;
#                   large/ID.txt and large/ID.json each case's output and report
#   torch-large/    the production-size framework cases through the PyTorch adapter
#                   (make check-torch-large), when PYTHON has torch and torchao: the summary
#                   and each case's log (the answers, about 300 MB a case, are removed)
#   checks.txt      attn_bench --wgmma-selftest (the wgmma kernels layer by layer),
#                   cuda/attn_check (the reference-order slots bitwise, the chunked GDN
#                   slots against the reference), cuda/check_arith (with a GPU present, its
#                   device half: format encoders, and the axiswise kernels against
#                   qs_quantize) and gemm_bench's agreement rows
#   block/          gemm_bench --block-experiment: the block-scaled GEMM outputs beside the
#                   candidate promotion models (gemm_bench --block-analyze reads it back)
#   bench.txt       attn_bench, gdn_bench and their peers (attn_peer.py, gdn_peer.py),
#                   quantizer bench and peer.py, gemm_bench's throughput
# Correctness steps share the machine (several processes, one GPU); the timed steps run
# alone, last. A step that would pass the budget is cut (timeout) and says so.
# Environment: PARTS (default "checks bench"; "flash": only the flash attention kernels'
# self-test, suite and timings, a few minutes): which parts to run; JOBS (default: the number
# of CPUs, at most 8) processes for the suites; LARGE_JOBS (default 4) large cases at a time;
# PYTHON (default python3) for the peers and the adapter.
set -u
OUT=${1:?usage: gpu-report.sh OUTDIR [SECONDS]}
BUDGET=${2:-3000}
B=${QSPEC_BUILD:-$PWD}
S=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(n=$(nproc 2>/dev/null || echo 2); [ "$n" -gt 8 ] && n=8; echo "$n")}
LARGE_JOBS=${LARGE_JOBS:-4}
PARTS=${PARTS:-checks bench}
Q=$B/qspec
[ -x "$Q" ] || { echo "gpu-report.sh: no $Q: run it from a build tree (or set QSPEC_BUILD)" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
export QSPEC_BACKEND_PATH="$B/cuda${QSPEC_BACKEND_PATH:+:$QSPEC_BACKEND_PATH}"
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
# step NAME FILE SHARE CMD...: runs CMD with stdout and stderr appended to OUTDIR/FILE, for at
# most SHARE percent of the whole budget and never past its end
step() {
    local name=$1 file=$2 share=$3 s rc lim
    shift 3
    lim=$((BUDGET * share / 100))
    [ "$lim" -gt "$(left)" ] && lim=$(left)
    if [ "$(left)" -lt 5 ]; then
        echo "$name: not run (the budget of $BUDGET s is spent)" >>"$OUT/summary.txt"
        return
    elif [ "$lim" -lt 5 ]; then
        echo "$name: not run (its share of the budget, $lim s, is too short)" >>"$OUT/summary.txt"
        return
    fi
    echo "== $name" >>"$OUT/$file"
    s=$(date +%s)
    timeout "$lim" "$@" >>"$OUT/$file" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "(cut after $lim s)" >>"$OUT/$file"
    echo "$name: exit $rc in $(($(date +%s) - s)) s: $(grep -v '^$' "$OUT/$file" | tail -n 1)" >>"$OUT/summary.txt"
}
{
    echo "gpu-report.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), budget $BUDGET s, $JOBS processes"
    nvidia-smi -L 2>&1
    "$Q" version
    "$Q" backends cuda 2>&1
} >"$OUT/summary.txt"
fast=(QSPEC_CUDA_SDPA=flash QSPEC_CUDA_GDN=chunk)

# correctness, side by side: the suites (their reference runs are CPU work), the large tier,
# the framework cases, the slot checks
checks() {
    (
        step "suite (reference-order kernels)" suite.txt 30 "$Q" run --backend cuda --jobs "$JOBS" \
            --timing --quiet --report-json "$OUT/suite.json" "$S/conformance/cases"
        step "suite (${fast[*]})" suite-fast.txt 20 env "${fast[@]}" "$Q" run --backend cuda \
            --jobs "$JOBS" --timing --quiet --report-json "$OUT/suite-fast.json" "$S/conformance/cases"
        step "suite (${fast[*]} QSPEC_CUDA_FLASH_WGMMA=0)" suite-mma.txt 10 env "${fast[@]}" \
            QSPEC_CUDA_FLASH_WGMMA=0 "$Q" run --backend cuda --jobs "$JOBS" --quiet \
            --report-json "$OUT/suite-mma.json" "$S/conformance/cases"
    ) &
    if "$PY" -c 'import torch, torchao' >/dev/null 2>&1; then
        step "framework cases, large (PyTorch adapter)" torch-large.txt 40 \
            env QSPEC="$Q" QS_SRCDIR="$S" QS_TORCH_PYTHON="$PY" \
            QS_TORCH_SUITES="$S/conformance/framework/large" QS_TORCH_OUT="$OUT/torch-large" \
            sh "$S/tests/framework_torch.sh" &
    else
        echo "framework cases, large: not run ($PY has no torch and torchao)" >>"$OUT/summary.txt"
    fi
    # the large tier: island cases first (short), then MLA; one run per case
    mkdir -p "$OUT/large"
    "$Q" list --tier large "$S/conformance/cases/large" 2>/dev/null | awk '{print $1}' |
        grep '^large\.' | sort >"$OUT/large/ids.txt"
    export -f step left
    export Q S OUT BUDGET t0
    xargs -P "$LARGE_JOBS" -I{} bash -c 'step "large {}" "large/{}.txt" 60 env QSPEC_CUDA_SDPA=flash \
        QSPEC_CUDA_GDN=chunk "$Q" run --backend cuda --tier large --timeout 1800 --timing \
        --quiet --report-json "$OUT/large/{}.json" --filter "{}" "$S/conformance/cases/large"' \
        <"$OUT/large/ids.txt"
    wait
    rm -rf "$OUT/torch-large/answers"
    while read -r id; do cat "$OUT/large/$id.txt"; done <"$OUT/large/ids.txt" >"$OUT/large.txt"
    step "attn_bench --wgmma-selftest" checks.txt 5 "$B/cuda/bench/attn_bench" --wgmma-selftest
    step "attn_check" checks.txt 10 "$B/cuda/attn_check" --no-timing
    step "attn_check (QSPEC_CUDA_GDN=chunk)" checks.txt 5 env QSPEC_CUDA_GDN=chunk \
        "$B/cuda/attn_check" --no-timing
    step "check_arith" checks.txt 5 "$B/cuda/check_arith"
    step "gemm_bench agreement" checks.txt 5 "$B/cuda/bench/gemm_bench" 256 256 256 --agreement-block
    mkdir -p "$OUT/block"
    step "gemm_bench --block-experiment" checks.txt 5 "$B/cuda/bench/gemm_bench" 256 256 256 \
        --no-agreement --block-experiment "$OUT/block"
}

# timings, alone on the GPU
bench() {
    step "attn_bench" bench.txt 5 "$B/cuda/bench/attn_bench"
    step "attn_peer.py" bench.txt 3 "$PY" "$S/cuda/bench/attn_peer.py"
    step "gdn_bench" bench.txt 5 "$B/cuda/bench/gdn_bench"
    step "gdn_peer.py" bench.txt 3 "$PY" "$S/cuda/bench/gdn_peer.py"
    step "bench (quantizers)" bench.txt 4 "$B/cuda/bench/bench"
    step "peer.py (quantizers)" bench.txt 4 "$PY" "$S/cuda/bench/peer.py"
    step "gemm_bench --block" bench.txt 4 "$B/cuda/bench/gemm_bench" --block --no-agreement
}

# the flash attention kernels alone (PARTS=flash): their self-test, the suite through them,
# attn_bench and its peers
flash() {
    step "attn_bench --wgmma-selftest" checks.txt 10 "$B/cuda/bench/attn_bench" --wgmma-selftest
    step "suite (${fast[*]})" suite-fast.txt 30 env "${fast[@]}" "$Q" run --backend cuda \
        --jobs "$JOBS" --quiet --report-json "$OUT/suite-fast.json" "$S/conformance/cases"
    step "attn_bench" bench.txt 30 "$B/cuda/bench/attn_bench"
    step "attn_peer.py" bench.txt 20 "$PY" "$S/cuda/bench/attn_peer.py"
}

case " $PARTS " in *" checks "*) checks ;; esac
case " $PARTS " in *" bench "*) bench ;; esac
case " $PARTS " in *" flash "*) flash ;; esac
echo "done in $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
