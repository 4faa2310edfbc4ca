#!/usr/bin/env bash
# Prepares a virtual environment with the `mpich` wheel (flexflow's `cluster` extra) for
# multi-rank Legate runs; scripts/setup.sh runs it on .venv, docker/install.sh on the venv it
# creates (and so the Docker image). Idempotent; does nothing where the mpich wheel is missing.
#
#   docker/link-network-libraries.sh VENV
#
# Legate 25.11's Realm sets UCX_IB_SEG_SIZE, which only a UCX with its InfiniBand module accepts:
# the libucx-cu12 wheel has no such module ("ucp_config_modify failed UCX_IB_SEG_SIZE 8192"), the
# mpich wheel's UCX has one (it needs libibverbs.so.1, present on any InfiniBand host). Legate
# loads a "system" UCX by the unversioned names (libucs.so ...) when
# RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true, and finds MPICH by dlopen("libmpi.so"), which the
# wheel ships as a linker script; so VENV/lib/legate-network holds those names as links into the
# mpich wheel. A run puts it first on LD_LIBRARY_PATH (tests/runtime/test_multirank.py).
# Last, libibverbs.so.1 is installed with apt-get when run as root, or its package named.
set -euo pipefail

say() { echo "docker/link-network-libraries.sh: $*" >&2; }
[ $# -eq 1 ] || { say "usage: $0 VENV"; exit 2; }

lib="$1/lib"
dir="$lib/legate-network"
[ -f "$lib/libmpi.so.12" ] && [ -d "$lib/mpich/ucx" ] || exit 0

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
        say "installing libibverbs1 (UCX's InfiniBand module needs it)"
        apt-get install -y -qq --no-install-recommends libibverbs1 >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends libibverbs1 >/dev/null; }
    else
        say "multi-rank runs need libibverbs.so.1 (Debian/Ubuntu: libibverbs1, RHEL: libibverbs)"
    fi
fi
