#!/usr/bin/env bash
# Installs every Debian package the project needs, the toolchain included, then makes the
# project's one Python virtual environment at <repo>/.venv: the pinned packages of
# scripts/requirements.txt, LibTorch among them (the PyPI torch wheel, which every C++ target
# links and every Python peer imports: cmake/torch.cmake), the reference environments of the
# conformance tests, EnvPool for the benchmarks, TensorBoard, the gRPC peers. It is made from
# Debian's python3 with --system-site-packages, so that scripts also see python3-numpy.
# Idempotent: when every Debian package is present apt is not touched, and when .venv holds
# the stamp of the same requirements file pip is not run. The torch wheel and the nvidia-*
# wheels it pulls are 3 GB to fetch, 5.3 GB on disk; a first install takes a few minutes.
#
# The CUDA toolkit is not installed here: the torch wheel's CMake files look for one (any
# version from 12.6; /usr/local/cuda), and the GPU targets build with it where it is there.
#
# libopenblas0-pthread: Debian's numpy (the environments' Python references) does its matrix
# products through libblas.so.3, which without it is Debian's reference BLAS, a plain loop.
# LibTorch brings its own BLAS (MKL in the x86-64 wheel).
# libmujoco-dev: MuJoCo 2.2.2, the physics of the continuous-control tasks (half_cheetah);
# their models are gymnasium's XML files, from the venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake pkg-config git python3 python3-venv python3-pip python3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libgloo-dev libhiredis-dev redis-server iproute2
  zlib1g-dev libpng-dev dataset-fashion-mnist python3-numpy
  libplplot-dev plplot-driver-cairo fonts-dejavu-core
  libopenblas0-pthread
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libjemalloc2 libmujoco-dev
  clang-format clang-tidy time ccache
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -ne 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install_deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${packages[@]}"
fi

# ---- the virtual environment ------------------------------------------------------------
# The stamp holds the hash of the requirements it was made from; a changed file reinstalls.
venv="$ROOT/.venv"
requirements="$ROOT/scripts/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "install_deps: making $venv from $requirements" >&2
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
echo "$want" >"$stamp"
