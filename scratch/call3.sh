#!/bin/bash
# x2 call B: FlashInfer CuTe part 2 + install; operator re-runs at v8 (692c4973f11689c13bc53711a432cc69bdb31221)
python3 baselines/ship_parts.py receive --from .whl/ship/call2 --install /tmp/site || echo "CUTE INSTALL FAILED"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/sweeps/*.whl
export ONELA_GIT_COMMIT=692c4973f11689c13bc53711a432cc69bdb31221 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD:/tmp/hsite:/tmp/site:$PWD/.baseline_pack/site
mkdir -p /tmp/o
op() { local gpu=$1 name=$2; shift 2; CUDA_VISIBLE_DEVICES=$gpu python3 -m sweeps.run progress=false results_dir=/tmp/o/$name "$@" > /tmp/o/$name.log 2>&1; }
(timeout 540 bash -c "$(declare -f op); op 0 op_qwen3_5_0_8b suite=operator geometry=qwen3_5_0_8b; op 0 rp suite=recurrent_path; op 0 op_27b_r16 suite=operator geometry=qwen3_5_27b 'shape.R=[16]' 'shape.W=[128,256]'; op 0 op_kimi_r16 suite=operator geometry=kimi_linear 'shape.R=[16]' 'shape.W=[128,256]'") &
(timeout 540 bash -c "$(declare -f op); op 1 op_397b_r8r16 suite=operator geometry=qwen3_5_397b 'shape.R=[8,16]' 'shape.W=[128,256]'; op 1 op_qwen3_5_9b suite=operator geometry=qwen3_5_9b; op 1 op_range_hk4_hv16 suite=operator geometry=range_hk4_hv16") &
wait
tar czf $OUT/o.tgz -C /tmp o
for f in /tmp/o/*.log; do echo "== $f"; grep -E "cells in|ok [0-9]+, skipped|Error|error" $f | head -5; done
