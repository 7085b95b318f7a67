#!/bin/bash
# x2 call C (machine still warm: /tmp/site, /tmp/hsite, /tmp/o kept): K = 256 geometries, full model, leftovers of B
export ONELA_GIT_COMMIT=692c4973f11689c13bc53711a432cc69bdb31221 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD:/tmp/hsite:/tmp/site:$PWD/.baseline_pack/site
rm -rf /tmp/o2; mkdir -p /tmp/o2
op() { local gpu=$1 name=$2; shift 2; CUDA_VISIBLE_DEVICES=$gpu python3 -m sweeps.run progress=false results_dir=/tmp/o/$name "$@" >> /tmp/o/$name.log 2>&1; }
(timeout 530 bash -c "$(declare -f op); op 0 op_range_k256_v256 suite=operator geometry=range_k256_v256; op 0 op_range_hk4_hv16 suite=operator geometry=range_hk4_hv16; op 0 op_qwen3_5_9b suite=operator geometry=qwen3_5_9b") &
(timeout 530 bash -c "$(declare -f op); op 1 op_gdn_1_3b suite=operator geometry=gdn_1_3b; op 1 fm suite=full_model") &
wait
tar czf $OUT/o.tgz -C /tmp o
for f in /tmp/o/*.log; do echo "== $f"; grep -E "cells in|ok [0-9]+, skipped|Error|error" $f | tail -3; done
