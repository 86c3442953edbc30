#!/usr/bin/env bash
# Creates the Python virtual environment the end-to-end SDK tests use (target/e2e-venv) and
# installs e2e/python/requirements.txt into it. Safe to run again: it only adds what is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/e2e-venv"
requirements="$root/e2e/python/requirements.txt"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$root/target"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
echo "python venv ready: $venv/bin/python"
