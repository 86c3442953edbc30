#!/usr/bin/env bash
# What building aisix needs beyond the Rust toolchain: `protoc` and protobuf's well-known types
# (`google/protobuf/descriptor.proto`, ...), because the etcd client's build script compiles
# etcd's protobuf definitions, which import them. Installs Debian's `protobuf-compiler` and
# `libprotobuf-dev` (the well-known types are only a recommendation of the first, so
# `--no-install-recommends` alone leaves them out) when either is missing, as root or through
# sudo; does nothing when both are there.
set -euo pipefail
missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
((${#missing[@]})) || exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
  || { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; }
command -v protoc >/dev/null
[ -f /usr/include/google/protobuf/descriptor.proto ]
