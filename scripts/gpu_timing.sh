#!/usr/bin/env bash
# The GPU timing run of the deployment's shapes, in one command (docs/real_shapes.md, "GPU timing"):
#
#     scripts/gpu_timing.sh [OUT.json] [more options of edge-spec-ros bench gpu-timing]
#
# times, on one GPU, the Qwen2-VL-2B-shape drafter (bfloat16, and int4-weight when torchao is there) and the
# full-depth Qwen2-VL-7B-shape verifier with its 27 exits in bfloat16, both with the published 32-block
# vision tower (random weights built here: nothing is downloaded, no network is needed):
# prefills, T_p and T_q at γ = 2, 4, 8, each exit's release time, batched verification at B = 1, 4, 16,
# 32; writes OUT.json (default artifacts/gpu_timing_profile.json), which `edge-spec-ros bench --profile
# OUT.json` reads, and prints a summary. Options after OUT override the defaults below (the tests run it
# on the CPU with --device cpu --dtype float32 and reduced depth). The run is stopped after
# GPU_TIMING_TIMEOUT_S seconds (default 480). PYTHON picks the interpreter (default: .venv/bin/python
# where there is one, else python3). It calls the command's function, edge_spec_ros.bench.gpu_timing.main,
# rather than the edge-spec-ros command line, whose bench needs ZeroMQ and rosbags (a GPU image may lack them).
set -euo pipefail
cd "$(dirname "$0")/.."

out=artifacts/gpu_timing_profile.json
if [[ $# -gt 0 && $1 != -* ]]; then
    out=$1
    shift
fi
python=${PYTHON:-}
if [[ -z $python ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
mkdir -p "$(dirname "$out")"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
limit=${GPU_TIMING_TIMEOUT_S:-480}
quant=(--drafter-quant int4-weight)
if ! "$python" -c "import torchao" >/dev/null 2>&1; then
    echo "gpu_timing.sh: no torchao for $python: timing the bfloat16 drafter only (docs/real_shapes.md)" >&2
    quant=()
fi

run='import sys; from edge_spec_ros.bench.gpu_timing import main; sys.exit(main(sys.argv[1:]))'
status=0
timeout "$limit" "$python" -c "$run" \
    --verifier qwen2-vl-7b-shape:vision_layers=32 --drafter qwen2-vl-2b-shape:vision_layers=32 \
    --dtype bfloat16 --device cuda \
    --gammas 2,4,8 --gamma 4 --batch-sizes 1,4,16,32 --repeats 10 --warmup 2 ${quant[@]+"${quant[@]}"} \
    --out "$out" "$@" || status=$?
if [[ $status -eq 124 ]]; then
    echo "gpu_timing.sh: stopped after ${limit} s (GPU_TIMING_TIMEOUT_S); fewer --repeats or --batch-sizes" >&2
fi
exit "$status"
