#!/usr/bin/env bash
# Installs every Debian package scaletrain's build, run and tests need.
# Idempotent: packages already present are skipped by apt. One list, here.
# Usage: scripts/install-deps.sh [--no-slurm] [--demo]   (run as root or with sudo)
#   --demo: only what scripts/demo.sh builds and runs (no test, Slurm or
#   reference packages: PyTorch alone is most of the download)
set -euo pipefail

# What the trainer, the tokenizer and the analysis need to build and run
# (scripts/demo.sh); configure finds every library the build looks for, so
# the tests' GoogleTest is here too.
DEMO_PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libyaml-cpp-dev nlohmann-json3-dev
  libboost-program-options-dev
  libopenblas-dev libopenblas-openmp-dev
  # bf16 GEMM on CPU ranks (oneDNN 2.6-2.7 or 3.x, the library PyTorch's CPU path uses)
  libdnnl-dev
  libgtest-dev googletest
  # the default run's real text: the King James Bible (public domain), see scripts/prepare-corpus.sh
  bible-kjv
  # TensorBoard event files (lib/tensorboard: the Event/Summary messages; the
  # read-back test parses them with python3-protobuf)
  libprotobuf-dev protobuf-compiler python3-protobuf
  # analysis plots (gnuplot runs on the written .gp scripts; no plotting library is linked)
  gnuplot-nox
)
PACKAGES=(
  "${DEMO_PACKAGES[@]}"
  # reference tests (independent implementation, checkpoint inspection)
  python3 python3-numpy python3-torch python3-h5py
  # slurm tests (a real single-node Slurm)
  slurmctld slurmd slurm-client munge
  # multinode tests (scripts/emucluster.sh: veth, bridge, netns and tc)
  iproute2
  # campaign drivers: the MFU-sweep campaign YAML (slurm/campaigns/expand_sweep.py)
  python3-yaml
  # scripts/gpu-bundle.sh: a build carried to a GPU machine (xz archive)
  xz-utils
  # scripts/long-functions.sh (test_function_length): function extents
  universal-ctags
)

for arg in "$@"; do
  case $arg in
    --no-slurm)
      PACKAGES=("${PACKAGES[@]/slurmctld/}"); PACKAGES=("${PACKAGES[@]/slurmd/}")
      PACKAGES=("${PACKAGES[@]/slurm-client/}"); PACKAGES=("${PACKAGES[@]/munge/}") ;;
    --demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
    *) echo "install-deps: unknown option '$arg' (--no-slurm, --demo)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  [[ -z "$p" ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} package(s) and what they need: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get update"
$SUDO apt-get update -qq
# Do not start daemons at install time: the tests start their own Slurm.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
# Without -qq apt prints each package as it fetches, unpacks and sets it up:
# the progress of what is the longest wait on a fresh machine.
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
