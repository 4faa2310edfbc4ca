#!/usr/bin/env bash
# The one place that installs flexflow for deployment: docker/Dockerfile runs it to build the
# image, and .ci/run runs it on the host, so CI proves the image's install path without Docker.
#
#   docker/install.sh wheel OUTDIR [SOURCE]
#       Build flexflow's wheel from SOURCE (default: this repository) into OUTDIR. It compiles
#       native/ with cffi and setuptools, so it needs C and C++ compilers and the Python headers.
#       The wheel is checked to hold every flexflow subpackage, flexflow.ops, the three native
#       modules and the C++ Legate tasks' library.
#   docker/install.sh venv PREFIX WHEEL|SOURCE
#       Create (or reuse) a virtual environment at PREFIX and install flexflow into it, not
#       editable, with its extras and the pinned versions of docker/constraints.txt, from a wheel
#       (no compiler needed) or a source directory (built with `wheel` first). Wheels only: pip
#       never builds a dependency from source. With the `cluster` extra (MPICH), it then links
#       MPICH's UCX and libmpi.so into PREFIX/lib/legate-network (docker/link-network-libraries.sh).
#       Then a smoke check: `flexflow models`, importing flexflow.runtime, one training step under
#       the `legate` launcher (docker/smoke.py), and with MPICH the same step on two ranks
#       (`legate --launcher mpirun`, with the environment docker/Dockerfile sets).
#
# Settings (environment):
#   PYTHON                 interpreter that creates the environments (default: python3)
#   FLEXFLOW_EXTRAS        extras to install (default: examples,gpu,cluster)
#   FLEXFLOW_CONSTRAINTS   pip constraints file (default: docker/constraints.txt; /dev/null
#                          resolves unpinned, which is how that file is refreshed)
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
EXTRAS=${FLEXFLOW_EXTRAS:-examples,gpu,cluster}
CONSTRAINTS=${FLEXFLOW_CONSTRAINTS:-$HERE/constraints.txt}

say() { echo "docker/install.sh: $*" >&2; }
die() { say "$*"; exit 2; }

# Copies the files the wheel is built from into an empty directory, so stale build/, *.egg-info
# or in-place native modules of a developer checkout cannot leak into the wheel.
copy_sources() {
    local source=$1 dest=$2
    for path in setup.py pyproject.toml flexflow ops native; do
        [ -e "$source/$path" ] || die "$source has no $path: not a flexflow source directory"
    done
    tar -C "$source" -cf - --exclude=__pycache__ --exclude='*.so' --exclude='*.o' \
        --exclude='*.egg-info' --exclude='flexflow/_*.c' \
        setup.py pyproject.toml flexflow ops native | tar -C "$dest" -xf -
}

# Fails unless the wheel holds every package of the source tree and the native modules.
check_wheel() {
    local wheel=$1 source=$2
    "$PYTHON" - "$wheel" "$source" <<'EOF'
import sys
import zipfile
from pathlib import Path

wheel, source = sys.argv[1], Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
expected = {f"flexflow/{p.relative_to(source / 'flexflow')}" for p in (source / "flexflow").rglob("*.py")}
expected |= {f"flexflow/ops/{p.name}" for p in (source / "ops").glob("*.py")}
missing = sorted(n for n in expected if "__pycache__" not in n and n not in names)
for module in ("_cuda_stub", "_simulator", "_kernels"):
    if not any(n.startswith(f"flexflow/{module}.") and n.endswith(".so") for n in names):
        missing.append(f"flexflow/{module}.*.so (native module)")
if "flexflow/lib/libflexflow_legate_tasks.so" not in names:
    missing.append("flexflow/lib/libflexflow_legate_tasks.so (the C++ Legate tasks)")
if missing:
    sys.exit(f"{wheel} lacks {len(missing)} files: " + ", ".join(missing))
print(f"docker/install.sh: {Path(wheel).name}: {len(expected)} modules, 3 native modules and the C++ tasks", file=sys.stderr)
EOF
}

build_wheel() {
    local outdir=$1 source=${2:-$HERE/..}
    local work
    work=$(mktemp -d)
    mkdir -p "$work/src" "$outdir"
    copy_sources "$source" "$work/src"
    say "building the wheel (pinned setuptools, wheel, cffi and native/build-requirements.txt)"
    "$PYTHON" -m venv "$work/venv"
    "$work/venv/bin/python" -m pip install --quiet --only-binary=:all: -c "$CONSTRAINTS" \
        pip setuptools wheel cffi >&2
    # headers only (the C++ Legate tasks): their packages without their dependencies
    "$work/venv/bin/python" -m pip install --quiet --only-binary=:all: --no-deps \
        -c "$CONSTRAINTS" -r "$work/src/native/build-requirements.txt" >&2
    "$work/venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation \
        --wheel-dir "$work/dist" "$work/src" >&2
    local wheel
    wheel=$(echo "$work"/dist/flexflow_legate-*.whl)
    [ -f "$wheel" ] || die "pip wheel made no flexflow_legate wheel in $work/dist"
    check_wheel "$wheel" "$work/src" >&2
    cp "$wheel" "$outdir/"
    rm -rf "$work"
    echo "$outdir/$(basename "$wheel")"
}

install_venv() {
    local prefix=$1 what=$2 wheel work=""
    if [ -d "$what" ]; then
        work=$(mktemp -d)
        wheel=$(build_wheel "$work" "$what")
    else
        [ -f "$what" ] || die "no wheel or source directory at $what"
        wheel=$what
    fi
    if [ ! -x "$prefix/bin/python" ]; then
        say "creating the environment $prefix"
        "$PYTHON" -m venv "$prefix"
    fi
    local pip=("$prefix/bin/python" -m pip)
    "${pip[@]}" install --quiet --only-binary=:all: -c "$CONSTRAINTS" pip
    # The same version of a new wheel counts as installed already: remove the old one first.
    "${pip[@]}" uninstall --quiet --yes flexflow-legate 2>/dev/null || true
    say "installing $(basename "$wheel")[$EXTRAS] and its pinned dependencies into $prefix"
    "${pip[@]}" install --quiet --only-binary=:all: -c "$CONSTRAINTS" "$wheel[$EXTRAS]"
    "${pip[@]}" check
    [ -z "$work" ] || rm -rf "$work"
    if [ -x "$prefix/bin/mpirun" ]; then
        say "linking MPICH's UCX and libmpi.so into $prefix/lib/legate-network"
        bash "$HERE/link-network-libraries.sh" "$prefix"
        [ -e "$prefix/lib/legate-network/libucp.so" ] || die "no $prefix/lib/legate-network/libucp.so"
    fi
    smoke_check "$prefix"
}

smoke_check() {
    local prefix
    prefix=$(cd "$1" && pwd)
    # From an empty directory, so a source checkout in the working directory cannot shadow the
    # installed package; `legate` starts the `python` on PATH, the environment's.
    local scratch
    scratch=$(mktemp -d)
    (
        cd "$scratch"
        export PATH="$prefix/bin:$PATH"
        say "smoke check: flexflow models"
        "$prefix/bin/flexflow" models >/dev/null
        say "smoke check: import flexflow.runtime"
        LEGATE_CONFIG="--cpus 1 --gpus 0" "$prefix/bin/python" -c "import flexflow.runtime"
        say "smoke check: a training step under legate --cpus 1 --gpus 0"
        "$prefix/bin/legate" --cpus 1 --gpus 0 "$HERE/smoke.py" "$prefix"
        if [ ! -e "$prefix/lib/legate-network/libucp.so" ]; then
            say "no MPICH (the cluster extra): no multi-rank smoke check"
        elif ! ldconfig -p | grep -q 'libibverbs\.so\.1 '; then
            say "no libibverbs.so.1, which MPICH's UCX needs: no multi-rank smoke check"
        else
            # As in the image (docker/Dockerfile's ENV): MPICH's UCX, which has the InfiniBand
            # module Realm's UCX_IB_SEG_SIZE needs, and its libmpi.so, which Legate detects as MPICH.
            say "smoke check: the training step on 2 ranks under legate --launcher mpirun"
            LD_LIBRARY_PATH="$prefix/lib/legate-network" RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true \
                UCX_WARN_UNUSED_ENV_VARS=n "$prefix/bin/legate" --launcher mpirun \
                --ranks-per-node 2 --cpus 1 --gpus 0 "$HERE/smoke.py" "$prefix" 2
        fi
    )
    rm -rf "$scratch"
}

case "${1:-}" in
    wheel) [ $# -ge 2 ] || die "usage: $0 wheel OUTDIR [SOURCE]"; build_wheel "$2" "${3:-}" ;;
    venv) [ $# -eq 3 ] || die "usage: $0 venv PREFIX WHEEL|SOURCE"; install_venv "$2" "$3" ;;
    *) die "usage: $0 wheel OUTDIR [SOURCE] | $0 venv PREFIX WHEEL|SOURCE" ;;
esac
