#!/usr/bin/env bash
# Installs the Debian packages wt builds with, when any is missing. Safe to run repeatedly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev             # Boost.DLL: plugin loading
  libyaml-cpp-dev          # YAML configs
  libspdlog-dev libfmt-dev # logging
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev       # wire JSON
  libcpp-httplib-dev       # HTTP control plane
  libcli11-dev             # command line
  libdlpack-dev            # tensor descriptor
  libgloo-dev              # collectives on host memory
  libxxhash-dev            # checksums
  libssl-dev               # the data plane's session MACs (OpenSSL's HMAC-SHA256)
  python3-dev pybind11-dev # the Python package (built for Debian's /usr/bin/python3)
  python3-torch python3-numpy python3-pytest python3-xxhash  # its tests
  python3-venv python3-pip python3-setuptools python3-wheel   # pip install ./python
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "wt: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
