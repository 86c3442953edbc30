#!/usr/bin/env bash
# What building aisix needs beyond the Rust toolchain: `protoc`, because the etcd client's build
# script compiles etcd's protobuf definitions. Installs Debian's `protobuf-compiler` when protoc
# is missing (as root, or through sudo); does nothing when it is there.
set -euo pipefail
command -v protoc >/dev/null 2>&1 && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq --no-install-recommends protobuf-compiler >/dev/null 2>&1 \
  || { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends protobuf-compiler; }
command -v protoc >/dev/null
