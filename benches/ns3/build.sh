#!/bin/sh
# Builds and runs benches/ns3/dumbbell.cc against ns-3 from PyPI (the `ns3` wheel ships its
# headers and shared libraries); nothing of ns-3 is kept in the repository.
#
#   benches/ns3/build.sh                         # venv + ns3 wheel + compile → benches/ns3/build/dumbbell
#   benches/ns3/build.sh run --config=resolved.json --out=result.json
#   benches/ns3/build.sh prefix                  # prints where the wheel's include/ and lib64/ are
#
# Needs python3 (≥ 3.11: the wheel is cp311 or newer) with venv, g++ with C++20 (GCC ≥ 10),
# and network access to PyPI the first time. NS3_PYTHON picks the interpreter,
# NS3_VERSION the wheel's version.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
VENV="$HERE/.venv"
BUILD="$HERE/build"
NS3_VERSION=${NS3_VERSION:-3.44.post0}
NS3_PYTHON=${NS3_PYTHON:-python3}

prefix() {
    # The wheel installs a plain `ns3/` folder (include/, lib64/) into site-packages.
    "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"] + "/ns3")'
}

install_ns3() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$NS3_PYTHON" -m venv "$VENV"
    fi
    # --no-deps: only the headers and libraries are used, not the Python bindings (cppyy).
    if ! "$VENV/bin/python" -m pip show -q ns3 >/dev/null 2>&1 ||
        [ "$("$VENV/bin/python" -m pip show ns3 | sed -n 's/^Version: //p')" != "$NS3_VERSION" ]; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "ns3==$NS3_VERSION"
    fi
}

compile() {
    P=$(prefix)
    [ -d "$P/include/ns3" ] || { echo "build.sh: no ns-3 headers under $P/include" >&2; exit 1; }
    # Library names carry the release, e.g. libns3.44-core.so.
    REL=$(ls "$P/lib64" | sed -n 's/^libns\([0-9.]*\)-core\.so$/\1/p' | head -n 1)
    [ -n "$REL" ] || { echo "build.sh: no libns*-core.so under $P/lib64" >&2; exit 1; }
    LIBS=""
    for m in applications internet point-to-point traffic-control network bridge stats core; do
        LIBS="$LIBS -lns$REL-$m"
    done
    mkdir -p "$BUILD"
    if [ ! -x "$BUILD/dumbbell" ] || [ "$HERE/dumbbell.cc" -nt "$BUILD/dumbbell" ] || [ "$0" -nt "$BUILD/dumbbell" ]; then
        # shellcheck disable=SC2086
        g++ -std=c++20 -O2 -DNS3_VERSION="\"$NS3_VERSION\"" -I"$P/include" \
            "$HERE/dumbbell.cc" -o "$BUILD/dumbbell" \
            -L"$P/lib64" $LIBS -Wl,-rpath,"$P/lib64"
    fi
}

case "${1:-build}" in
build)
    install_ns3
    compile
    echo "$BUILD/dumbbell (ns-3 $NS3_VERSION)"
    ;;
run)
    shift
    install_ns3
    compile
    LD_LIBRARY_PATH="$(prefix)/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$BUILD/dumbbell" "$@"
    ;;
prefix)
    prefix
    ;;
*)
    echo "usage: $0 [build | run ARGS... | prefix]" >&2
    exit 2
    ;;
esac
