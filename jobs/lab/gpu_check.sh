#!/usr/bin/env bash
# One short GPU check (at most about 7 minutes on 1-8 H100/H200), every experiment on nccl
# with W = every visible GPU:
#   1. the correctness gate (bf16 tolerances) and timing of every strategy that fits W
#      (zero as people train: bf16 compute, fp32 master weights, AdamW),
#   2. the collective benchmark (nccl busbw up to 1 GiB), when there are at least two GPUs,
#   3. a bf16 GEMM roofline, and the single-GPU throughput and MFU of GPT-2 124M (tied
#      head) in bf16 against the dense bf16 datasheet peak (goal: >= 45%),
# then one table: experiment, strategy, measured, predicted, ratio, MFU [peak], busbw.
#
# Usage: jobs/lab/gpu_check.sh [OUT_DIR]
#   PYTHON=...             interpreter (default: python)
#   GPU_CHECK_GPUS=N       pretend N GPUs are visible (with GPU_CHECK_DRY_RUN)
#   GPU_CHECK_DRY_RUN=1    only validate every parameter set (python -m jobs.lab check),
#                          writing each, resolved, to OUT_DIR/NAME.params.json
#   GPU_CHECK_BUDGET_S=420 the whole check's time; each run gets what is left (<= 90 s)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}
mkdir -p "$OUT"
NGPU=${GPU_CHECK_GPUS:-$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)}
if [ "$NGPU" -lt 1 ]; then
  echo "gpu_check: no CUDA device visible; nothing to check (the CPU path is tests/jobs/lab)" >&2
  exit 1
fi
W=$(( NGPU > 8 ? 8 : NGPU ))          # every GPU, up to the lab's 8 ranks
# heads a multiple of W (tensor parallelism gives each rank whole heads), 64 wide each;
# 8 layers so that a pipeline has a stage per GPU
HEADS=$(( W * ((8 + W - 1) / W) ))
MODEL="\"hidden\":$(( 64 * HEADS )),\"heads\":$HEADS,\"layers\":8,\"seq_len\":256,\"vocab\":8192,\"steps\":10,\"warmup\":3"
GATED="\"device\":\"cuda\",\"gate_tolerance\":\"bfloat16\""
BUDGET=${GPU_CHECK_BUDGET_S:-420}
FAILED=0
dirs=()

lab() {  # lab NAME EXPERIMENT PARAMS
  local name=$1 exp=$2 params=$3
  dirs+=("$OUT/$name")
  if [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then
    "$PY" -m jobs.lab check "$exp" --params "$params" > "$OUT/$name.params.json" || FAILED=1
    return
  fi
  local left=$(( BUDGET - SECONDS ))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, the ${BUDGET} s budget is spent"; FAILED=1; return
  fi
  echo "== $name: $exp $params"
  "$PY" -m jobs.lab run "$exp" --params "$params" --out "$OUT/$name" \
    --timeout $(( left > 90 ? 90 : left )) > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "   $name exited $rc: $(tail -n 1 "$OUT/$name.log")"; FAILED=1; }
}

B=$(( 8 * W ))
lab dp data_parallel "{\"world_size\":$W,$GATED,\"batch_size\":$B,\"micro_batches\":2,\"bucket_cap_mb\":25,$MODEL}"
lab tp tensor_parallel "{\"world_size\":$W,$GATED,\"batch_size\":$B,$MODEL}"
lab zero zero "{\"world_size\":$W,$GATED,\"precision\":\"bf16_adamw\",\"batch_size\":$B,\"bucket_cap_mb\":25,$MODEL}"
if [ "$W" -ge 2 ]; then
  lab pp pipeline "{\"world_size\":$W,$GATED,\"batch_size\":$B,\"micro_batches\":$(( 2 * W )),$MODEL,\"strategies\":[\"single\",\"naive_mp\",\"gpipe\",\"1f1b\",\"torch_gpipe\",\"torch_1f1b\"]}"
  lab coll collectives "{\"world_size\":$W,\"device\":\"cuda\",\"min_bytes\":1024,\"max_bytes\":1073741824,\"iters\":10,\"warmup\":3}"
else
  echo "gpu_check: one GPU - pipeline and collectives need two ranks (NCCL refuses two on one GPU)"
fi
# the strategies practitioners combine: recomputation, sequence/context parallelism and
# experts at every W (one rank is the reference path); interleaved and zero-bubble
# schedules from two GPUs (2 chunks a rank: layers = 2W); the dp x pp x tp mesh from four
lab rc recompute "{\"world_size\":$W,$GATED,\"batch_size\":$B,$MODEL}"
lab seq sequence "{\"world_size\":$W,$GATED,\"batch_size\":$B,$MODEL}"
lab moe experts "{\"world_size\":$W,$GATED,\"batch_size\":$B,\"experts\":$(( 2 * W )),$MODEL}"
if [ "$W" -ge 2 ]; then
  lab ppi pipeline "{\"world_size\":$W,$GATED,\"batch_size\":$B,$MODEL,\"layers\":$(( 2 * W )),\"micro_batches\":$(( 2 * W )),\"virtual_stages\":2,\"strategies\":[\"1f1b\",\"interleaved_1f1b\",\"torch_interleaved_1f1b\",\"torch_zero_bubble\"]}"
fi
if [ "$W" -ge 4 ] && [ $(( W % 4 )) -eq 0 ]; then
  lab mesh mesh "{\"world_size\":$W,$GATED,\"batch_size\":$B,$MODEL,\"tp\":2,\"pp\":2,\"micro_batches\":4,\"ranks_per_node\":$W,\"strategies\":[\"dp_tp\",\"torch_dp_tp\",\"dp_pp\",\"dp_pp_tp\",\"torch_dp_pp\"]}"
fi
lab roofline gemm_roofline '{"device":"cuda","dtype":"bfloat16","sizes":["1024","2048","4096","8192"],"iters":10}'
lab mfu gpt_mfu '{"device":"cuda","dtype":"bfloat16","tie_head":true,"layers":12,"hidden":768,"heads":12,"seq_len":1024,"vocab":50304,"batch_size":16,"steps":10,"warmup":3}'

if [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then
  echo "gpu_check: dry run, W=$W, ${#dirs[@]} parameter sets valid=$(( 1 - FAILED ))"
  exit $FAILED
fi
echo
"$PY" -m jobs.lab table "${dirs[@]}"
# every CUDA run's ranks must start by forkserver, never forked from torchrun's agent
grep -ho "phase=starting .*" "$OUT"/*.log | sort | uniq -c
if grep -l "phase=starting .*start_method=fork " "$OUT"/*.log; then
  echo "gpu_check: the runs above forked CUDA ranks from the agent"; FAILED=1
fi
echo "W=$W GPU(s), ${SECONDS} s of a ${BUDGET} s budget; GPT-2 124M bf16 MFU goal: >= 45% of the dense bf16 peak"
echo "results in $OUT"
exit $FAILED
