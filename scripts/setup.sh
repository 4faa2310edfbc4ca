#!/usr/bin/env bash
# Creates .venv and installs flexflow into it (editable, with test extras); does nothing when
# the install is already up to date with setup.py, pyproject.toml and native/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${FLEXFLOW_VENV:-.venv}

stamp_of() {
    cat setup.py pyproject.toml native/*.c native/*.cc native/*.h native/*.py native/*.txt \
        2>/dev/null | sha256sum | cut -d' ' -f1
}

if [ ! -x "$VENV/bin/python" ]; then
    echo "flexflow setup: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
want=$(stamp_of)
have=$(cat "$VENV/.flexflow-install-stamp" 2>/dev/null || true)
if [ "$want" != "$have" ] || ! "$VENV/bin/python" -c "import flexflow" >/dev/null 2>&1; then
    for compiler in gcc g++; do  # native/: cffi's C modules and the C++ Legate tasks
        if ! command -v "$compiler" >/dev/null 2>&1; then
            echo "flexflow setup: $compiler not found; building flexflow needs C and C++" \
                "compilers (Debian/Ubuntu: apt-get install gcc g++)" >&2
            exit 1
        fi
    done
    echo "flexflow setup: installing flexflow and its dependencies into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel cffi
    # the C++ Legate tasks' headers (native/build-requirements.txt), at the versions CI pins
    "$VENV/bin/python" -m pip install --quiet -c docker/constraints.txt \
        -r native/build-requirements.txt
    "$VENV/bin/python" -m pip install --quiet --no-build-isolation -e ".[test,examples,cluster]"
    echo "$want" > "$VENV/.flexflow-install-stamp"
fi

# Several Legate ranks on one host or many (tests/runtime/test_multirank.py): links the mpich
# wheel's UCX and libmpi.so into $VENV/lib/legate-network (why: the script's header).
bash docker/link-network-libraries.sh "$VENV"
