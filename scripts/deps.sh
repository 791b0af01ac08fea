#!/usr/bin/env bash
# deps.sh — install, with apt-get, whatever shoal needs that this Debian machine lacks.
#   scripts/deps.sh          build + test needs (compiler, OpenBLAS, zlib, libcrypto, JPEG, PNG, MPI, iproute2,
#                            data; python3-protobuf: Google's decoder checks the TensorBoard files;
#                            protobuf-c: .caffemodel weights, protoc: the tests' Caffe files;
#                            python3-pil writes the image tests' fixtures;
#                            python3-dev, -numpy, -pytest, -torch: the Python module and its tests)
#   scripts/deps.sh --bench  also the peers the benchmarks compare against (torchvision, scikit-learn, Darknet,
#                            hyperfine, fortunes: English text; mpi4py: bench/python)
set -eu
need=(build-essential libopenblas-dev zlib1g-dev libssl-dev libjpeg62-turbo-dev libpng-dev python3-pil
      openmpi-bin libopenmpi-dev mpich libmpich-dev iproute2 dataset-fashion-mnist procps
      slurmd slurmctld slurm-client munge python3-protobuf libprotobuf-c-dev protobuf-c-compiler
      protobuf-compiler python3-dev python3-numpy python3-pytest python3-torch)
if [ "${1:-}" = "--bench" ]; then need+=(python3-torchvision python3-sklearn darknet hyperfine fortunes python3-mpi4py); fi
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "deps: all present"; exit 0; fi
echo "deps: installing ${missing[*]}"
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
