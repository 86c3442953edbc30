#!/usr/bin/env bash
# Installs the pinned Node-distributed real clients of the end-to-end tests under
# target/e2e-node: Claude Code (its native binary comes in the platform's optional npm
# package; the wrapper's postinstall, which only copies it in place, is not run). Safe to run
# again: it installs only when the pinned version is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/target/e2e-node"
claude_code="2.1.332"

if [ "$(cat "$prefix/claude-code.version" 2>/dev/null)" != "$claude_code" ]; then
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --ignore-scripts --silent \
        "@anthropic-ai/claude-code@$claude_code"
    binary="$(ls "$prefix"/node_modules/@anthropic-ai/claude-code-linux-*/claude | head -n 1)"
    ln -sf "$binary" "$prefix/claude"
    echo "$claude_code" > "$prefix/claude-code.version"
fi
echo "claude code ready: $("$prefix/claude" --version)"
