#!/bin/sh
# cli.sh: the qspec CLI's general behaviour — help, version, backends and every usage error
# of those commands. Subcommand-specific tests live in their own scripts.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"

expect_status "no arguments is a usage error" 2 "$QSPEC"
expect_err "no arguments prints the overview" "usage: qspec"
expect_status "--help succeeds" 0 "$QSPEC" --help
expect_out "--help lists commands" "^  backends"
expect_status "help succeeds" 0 "$QSPEC" help
expect_out "help lists version" "^  version"
for cmd in $("$QSPEC" help | sed -n 's/^  \([a-z-]*\) .*/\1/p'); do
    expect_status "help $cmd succeeds" 0 "$QSPEC" help "$cmd"
    expect_out "help $cmd prints its usage" "^usage: qspec $cmd"
    expect_status "$cmd --help succeeds" 0 "$QSPEC" "$cmd" --help
    expect_out "$cmd --help prints its usage" "^usage: qspec $cmd"
done
expect_usage "help of an unknown command" "$QSPEC" help frobnicate
expect_err "names the unknown command" "unknown command 'frobnicate'"
expect_usage "help takes one name" "$QSPEC" help version backends
expect_usage "unknown command" "$QSPEC" frobnicate
expect_err "unknown command is named" "frobnicate"
expect_usage "unknown top-level option" "$QSPEC" --frobnicate
expect_status "version succeeds" 0 "$QSPEC" version
expect_out "version prints the version and ABI" "^qspec [0-9]+\.[0-9]+\.[0-9]+ \(backend ABI 1\)$"
expect_status "--version succeeds" 0 "$QSPEC" --version
expect_usage "version takes no arguments" "$QSPEC" version extra

# backends
expect_status "backends succeeds" 0 "$QSPEC" backends
expect_out "backends lists the reference" "^ref +\(built in\)"
expect_out "backends shows the search path" "^search path: "
if [ -n "$HAVE_CUDA" ]; then
    expect_out "backends finds the CUDA plugin" "^cuda +.*libqspec-cuda\.so"
    expect_out "the CUDA plugin reports ABI 1" "ABI 1"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        expect_out "the CUDA plugin reports the GPU" "usable: .*sm_"
    else
        expect_out "the CUDA plugin reports that no GPU is present" "not usable: no CUDA GPU is present"
    fi
    expect_status "backends cuda succeeds" 0 "$QSPEC" backends cuda
    expect_out "backends cuda shows only the plugin" "^cuda "
fi
expect_status "backends ref succeeds" 0 "$QSPEC" backends ref
expect_usage "backends of an unknown name" "$QSPEC" backends nosuch
expect_err "names the unknown backend" "unknown backend 'nosuch'"
expect_usage "backends of a missing path" "$QSPEC" backends ./nosuch.so
expect_usage "backends with a bad name" "$QSPEC" backends 'a b'
expect_usage "backends with an unknown option" "$QSPEC" backends --frob
expect_usage "backends takes one backend" "$QSPEC" backends ref cuda
# a shared object that is not a plugin: a missing entry point
if [ -n "$QS_BUILDDIR" ] && [ -f "$QS_BUILDDIR/.libs/libqspec.so" ]; then
    expect_usage "a library without the entry point is rejected" "$QSPEC" backends "$QS_BUILDDIR/.libs/libqspec.so"
    expect_err "names the missing entry point" "missing entry point qs_backend_entry_v1"
fi
if [ -n "$QS_BUILDDIR" ] && [ -f "$QS_BUILDDIR/tests/.libs/libqstest-badabi.so" ]; then
    expect_usage "a plugin with a wrong ABI is rejected" "$QSPEC" backends "$QS_BUILDDIR/tests/.libs/libqstest-badabi.so"
    expect_err "names the ABI mismatch" "ABI version 99, but this kit needs 1"
fi
qst_done
