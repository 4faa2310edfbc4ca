#!/usr/bin/env bash
# Creates .venv and installs flexflow into it (editable, with test extras); does nothing when
# the install is already up to date with setup.py, pyproject.toml and native/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${FLEXFLOW_VENV:-.venv}

stamp_of() {
    cat setup.py pyproject.toml native/*.c native/*.h native/*.py 2>/dev/null | sha256sum | cut -d' ' -f1
}

if [ ! -x "$VENV/bin/python" ]; then
    echo "flexflow setup: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
want=$(stamp_of)
have=$(cat "$VENV/.flexflow-install-stamp" 2>/dev/null || true)
if [ "$want" != "$have" ] || ! "$VENV/bin/python" -c "import flexflow" >/dev/null 2>&1; then
    echo "flexflow setup: installing flexflow and its dependencies into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel cffi
    "$VENV/bin/python" -m pip install --quiet --no-build-isolation -e ".[test,examples,cluster]"
    echo "$want" > "$VENV/.flexflow-install-stamp"
fi

# Several Legate ranks on one host or many (tests/runtime/test_multirank.py). Legate 25.11's
# Realm sets UCX_IB_SEG_SIZE, which only a UCX with its InfiniBand module accepts: the
# libucx-cu12 wheel has no such module, the mpich wheel's UCX has one (it needs libibverbs.so.1,
# present on any InfiniBand host). Legate loads a "system" UCX by the unversioned names
# (libucs.so ...) when RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true, and finds MPICH by dlopen("libmpi.so"),
# which the wheel ships as a linker script; so $VENV/lib/legate-network holds those names as
# links into the mpich wheel. A run puts it first on LD_LIBRARY_PATH (see test_multirank.py).
link_network_libraries() {
    local lib="$VENV/lib" dir="$VENV/lib/legate-network" file name
    [ -f "$lib/libmpi.so.12" ] && [ -d "$lib/mpich/ucx" ] || return 0
    mkdir -p "$dir/ucx"
    for file in "$lib"/mpich/lib*.so.* "$lib/libmpi.so.12"; do
        name=$(basename "$file")
        ln -sfn "$(realpath --relative-to="$dir" "$file")" "$dir/$name"
        ln -sfn "$name" "$dir/${name%%.so*}.so"
    done
    for file in "$lib"/mpich/ucx/*.so.*; do
        name=$(basename "$file")
        ln -sfn "$(realpath --relative-to="$dir/ucx" "$file")" "$dir/ucx/$name"
        ln -sfn "$name" "$dir/ucx/${name%%.so*}.so"
    done
    if ! ldconfig -p | grep -q 'libibverbs\.so\.1 '; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "flexflow setup: installing libibverbs1 (UCX's InfiniBand module needs it)" >&2
            apt-get install -y -qq --no-install-recommends libibverbs1 >/dev/null 2>&1 ||
                { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends libibverbs1 >/dev/null; }
        else
            echo "flexflow setup: multi-rank runs need libibverbs.so.1 (Debian/Ubuntu: libibverbs1, RHEL: libibverbs)" >&2
        fi
    fi
}
link_network_libraries
