#!/usr/bin/env bash
# Device run with the final code: ci run's A/B on CUDA (evidence), where ci run's time goes
# beyond the two test processes, and the proof benchmark with 5 repeats.
. "$(dirname "$0")/preamble.sh"
stub_kernels
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
echo "== nvidia-smi query"; /usr/bin/time -f "%e s" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== ci run"; /usr/bin/time -f "%e s wall" python3 -m ci run --out $OUT/ab --backend cuda 2>&1 | tail -12
echo "== pictures alone"; python3 -c "
import time; t=time.time()
from evidence.model import load; from report import pictures
r=load('$OUT/ab/results.json'); import tempfile; d=tempfile.mkdtemp()
print(len(pictures.draw_all(r, d)), 'pictures in', round(time.time()-t,2), 's')"
echo "== proof benchmark"; python3 -m benchmark --parts proof --device cuda 2>&1 | tail -3
cp benchmark/results/nvidia-h200.json $OUT/ 2>/dev/null
rm -rf $OUT/ab/logs $OUT/ab/pictures
