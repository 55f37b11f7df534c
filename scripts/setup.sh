#!/usr/bin/env bash
# Installs every titan dependency from Debian packages on a fresh machine.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config
  clang libomp-dev  # the fuzz harnesses (libFuzzer is clang's; OpenMP under clang)
  libeigen3-dev
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev
  libcli11-dev
  libhdf5-openmpi-dev hdf5-tools
  libgtest-dev googletest
  nlohmann-json3-dev libpcre2-dev libicu-dev zlib1g-dev xz-utils libssl-dev
  bible-kjv bible-kjv-text
  python3-matplotlib python3-h5py python3-numpy
  libopenblas-openmp-dev
  libdnnl-dev  # bf16 GEMMs (mixed precision): oneDNN picks AMX / AVX512-BF16 at run time
  ocl-icd-opencl-dev  # oneDNN's CMake config asks for OpenCL (its GPU runtime), which libdnnl-dev does not depend on
  iproute2 iptables  # scripts/cluster.sh: hosts as network namespaces, links shaped (tc) and lossy (iptables)
  libnetfilter-queue-dev  # scripts/netdelay.cpp: cluster.sh's added latency where the kernel has no netem
)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all Debian packages present"
fi
