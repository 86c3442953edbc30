#!/usr/bin/env bash
# Installs the Codex CLI the end-to-end client tests drive (e2e/tests/responses_clients.rs),
# pinned, under target/codex. Safe to run again: it installs only when the pinned version is
# missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="0.169.0"
prefix="$root/target/codex"
installed="$prefix/node_modules/@openai/codex/package.json"

if [ ! -f "$installed" ] || ! grep -q "\"version\": \"$version\"" "$installed"; then
    mkdir -p "$prefix"
    npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" "@openai/codex@$version"
fi
echo "codex ready: $prefix/node_modules/.bin/codex"
