# Sourced first by each device script that installs the .whl/ set (`. "$(dirname "$0")/preamble.sh"`,
# the script copied into .whl/ with this file, README.md): from the repository root, the wheels
# installed offline ($WHEELS, by default all of .whl/), unbuffered output, $PY the interpreter,
# $SP its site-packages. `stub_kernels`, for the scripts that import sgl_kernel's ops, installs
# stub_kernels.py there as a start-up hook (STUB_KERNELS=sgl_kernel).
set -u
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
PY=$(python3 -c "import sys; print(sys.executable)")
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# shellcheck disable=SC2086  # a glob, expanded here
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir ${WHEELS:-.whl/*.whl} || exit 1

stub_kernels() {
  # set in the .pth itself: ci run gives test processes an allowlisted environment
  cp .whl/stub_kernels.py "$SP/" \
    && echo "import os; os.environ.setdefault('STUB_KERNELS', 'sgl_kernel'); import stub_kernels" > "$SP/zz_stub_kernels.pth"
  export STUB_KERNELS=sgl_kernel
}
