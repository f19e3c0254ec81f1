#!/bin/sh
# autogen.sh: generate the build system (configure, Makefile.in) from configure.ac and Makefile.am.
# With --install-deps, first install the Debian packages the build and the tests need
# (as root), or print the apt-get line that would, then ml_dtypes (and the numpy it needs) from
# PyPI into the virtual environment interop-venv/ for tests/interop_casts.sh.
set -e
DEPS="build-essential autoconf automake libtool autoconf-archive pkg-config check libyaml-dev libmpfr-dev clang python3-numpy python3-venv"
MLDTYPES=ml_dtypes==0.7.0
usage() {
    echo "usage: ./autogen.sh [--install-deps] [--help]"
    echo "  --install-deps  install the Debian packages qspec needs: $DEPS"
}
install_deps=no
for arg in "$@"; do
    case "$arg" in
    --install-deps) install_deps=yes ;;
    -h|--help) usage; exit 0 ;;
    *) echo "autogen.sh: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ "$install_deps" = yes ]; then
    missing=""
    for p in $DEPS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ]; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends $missing
        else
            echo "autogen.sh: missing Debian packages; run as root:" >&2
            echo "  apt-get update && apt-get install -y$missing" >&2
            exit 1
        fi
    fi
fi
cd "$(dirname "$0")"
if [ "$install_deps" = yes ] && ! interop-venv/bin/python -c 'import ml_dtypes' 2>/dev/null; then
    # a failure here only makes tests/interop_casts.sh skip
    if python3 -m venv --system-site-packages interop-venv &&
        interop-venv/bin/pip install -q "$MLDTYPES"; then
        echo "autogen.sh: $MLDTYPES installed in interop-venv/"
    else
        echo "autogen.sh: could not install $MLDTYPES into interop-venv/; tests/interop_casts.sh will skip" >&2
    fi
fi
mkdir -p m4 build-aux
autoreconf --install --force --warnings=all,no-portability
