#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): CUDA tests, the benchmarks' CUDA rows into
# benchmarks/results/cuda.md, chapters 2, 4 and 7 run on the GPU against their committed
# outputs. At most 10 minutes; without CUDA it says so and exits 0.
#   scripts/gpu_check.sh [--time-limit 570] [--log-dir DIR]
#   scripts/gpu_check.sh --dry-run        # the same logic on the CPU, tiny sizes
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# the Python that holds torch: $PYTHON, else .venv/bin/python, else python3
PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$@"
