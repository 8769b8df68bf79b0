#!/bin/bash
# The checks a session runs first when a GPU machine is lent (issue 23): one command, under 10 minutes.
#
#   bench/device_check.sh [all|tests|growth|procs]     (on the device machine, from the repository root)
#
# tests:  the GPU-marked tests (pytest -m gpu), verbose, with the skip reasons;
# growth: the CUDA rows of the training growth table at 10^6 and 10^7 staged rows, the CPU table's
#         modes (bench/results/training_growth.md): streamed training and the loader alone;
# procs:  1 vs 2 processes on the machine's CPU cores (16 on the H200 machine), default vs scaled vs
#         gradient accumulation with the test MSE (issue 23's 2 processes >= 1.7x one).
# Everything lands in $OUT (default /tmp/device_out): machine.txt names the device, the cores and the
# versions; commit the tables under bench/results/ with the device named in the file.
#
# The machine's image has torch, numpy, pyarrow, numba and pytest but not pydantic: carry it as wheels
# in the ignored folder .whl (name .whl in the run's carry). Here, from the repository root, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 annotated-types==0.8.0 \
#     python-dotenv==1.2.4 typing-inspection==0.4.5
# Each part has its own time limit, so one that runs long still leaves the others their results.
set -u
PART=${1:-all}
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 3
fi
export PYTHONPATH=/tmp/site:$PWD/shared:$PWD/services:$PWD/tools:$PWD/research:$PWD PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi -L 2>&1
    echo "cores: $(nproc)"
    python3 -c "import torch, numpy, pyarrow, pydantic; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no device', \
'numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'pydantic', pydantic.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

if [ "$PART" = all ] || [ "$PART" = tests ]; then
    # only the files with GPU-marked tests: the image lacks the services' packages the others import
    timeout 120 python3 -m pytest -p no:cacheprovider -m gpu $(grep -rl "pytest.mark.gpu" tests --include="*.py") \
        -rs -v --timeout 100 2>&1 | tee "$OUT/gpu_tests.log"
    echo "gpu tests rc ${PIPESTATUS[0]} $(date -u +%T)" | tee -a "$OUT/machine.txt"
fi
if [ "$PART" = all ] || [ "$PART" = growth ]; then
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
        timeout 270 python3 bench/bench_training.py --device cuda --sizes 1000000,10000000 --epochs 1,1 \
            --modes stream,loader --out "$OUT/training_growth_cuda.md" --work /tmp 2>&1 | tee "$OUT/growth.log"
        echo "growth rc ${PIPESTATUS[0]} $(date -u +%T)" | tee -a "$OUT/machine.txt"
    else
        echo "growth skipped: no CUDA device (torch sees none)" | tee -a "$OUT/machine.txt"
    fi
fi
if [ "$PART" = all ] || [ "$PART" = procs ]; then
    timeout 180 python3 bench/bench_training.py --procs 1,2 --sizes 1000000 --epochs 1 --scale 8 \
        --out "$OUT/training_procs_16core.md" --work /tmp 2>&1 | grep -v Warning | tee "$OUT/procs.log"
    echo "procs rc ${PIPESTATUS[0]} $(date -u +%T)" | tee -a "$OUT/machine.txt"
fi
