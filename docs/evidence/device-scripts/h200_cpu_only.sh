#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --force-reinstall .whl/*.whl 2>&1 | tail -2
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp .whl/stub_kernels.py "$SP/" && echo "import stub_kernels" > "$SP/zz_stub_kernels.pth"
export STUB_KERNELS=sgl_kernel
/usr/bin/time -f "%e s wall" python3 -m ci run --out "$OUT/cpu" --backend cpu --tests test/registered 2>&1 | tail -6
rm -rf "$OUT/cpu/pictures"; tar czf "$OUT/cpu.tgz" -C "$OUT" cpu && rm -rf "$OUT/cpu"
