#!/bin/sh
# ./build.sh        builds {name}.wasm, a component Berth loads
# ./build.sh test   runs cases.toml natively, without building a component
#
# componentize-py comes from PyPI into .venv here, unless COMPONENTIZE_PY
# names one already installed.
set -eu
cd "$(dirname "$0")"
tool=${COMPONENTIZE_PY:-}
if [ -z "$tool" ]; then
    tool=.venv/bin/componentize-py
    if [ ! -x "$tool" ]; then
        python3 -m venv .venv
        .venv/bin/pip install --quiet componentize-py=={componentize_py}
    fi
fi
case "${1:-build}" in
build)
    # --stub-wasi: every WASI import traps, so the component imports only
    # Berth's types (Berth grants a policy nothing else anyway).
    "$tool" -d wit -w module componentize app --stub-wasi -p . -p sdk -o {name}.wasm
    echo "built {name}.wasm"
    ;;
test)
    rm -rf .bindings
    "$tool" -d wit -w module bindings .bindings
    python=$(dirname "$tool")/python
    [ -x "$python" ] || python=python3
    PYTHONPATH=.bindings:sdk "$python" -m berth_policy.cases . cases.toml
    ;;
*)
    echo "usage: ./build.sh [build|test]" >&2
    exit 2
    ;;
esac
