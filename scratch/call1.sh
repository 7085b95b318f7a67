#!/bin/bash
# one x2 call: GPU0 qwen bench (fp16 projection variants), GPU1 GPU tests + K=256 / small-grid fp16
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/sweeps/*.whl
export ONELA_GIT_COMMIT=fe9a8d403b5fb04ac4a8432c4a509763deeb4ee8 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD:/tmp/hsite
mkdir -p /tmp/o/q /tmp/o/k256 /tmp/o/small
(CUDA_VISIBLE_DEVICES=0 timeout 540 python3 -m kernels.bench --no-fullstate --out /tmp/o/q --R 4 16 \
  --config '{"proj": "fp16"}' --config '{"pdl_next_step": false}' --config '{"proj": "fp16", "maxnreg": 168}' \
  --config '{"proj": "fp16", "BB": 128, "num_warps": 8}' --config '{"proj": "fp16", "replay_stages": 2}' \
  > /tmp/o/q/bench.log 2>&1) &
(CUDA_VISIBLE_DEVICES=1 timeout 250 python3 -m pytest -q -m gpu tests/test_kernels.py > /tmp/o/gpu_tests.log 2>&1;
 CUDA_VISIBLE_DEVICES=1 timeout 150 python3 -m kernels.bench --no-fullstate --geometry range_k256_v256 --R 4 \
  --out /tmp/o/k256 --config '{"proj": "fp16"}' > /tmp/o/k256/bench.log 2>&1;
 CUDA_VISIBLE_DEVICES=1 timeout 120 python3 -m kernels.bench --no-fullstate --geometry gdn_small --W 128 --R 4 \
  --out /tmp/o/small --config '{"proj": "fp16"}' > /tmp/o/small/bench.log 2>&1) &
wait
tar czf $OUT/o.tgz -C /tmp o
tail -3 /tmp/o/gpu_tests.log; grep -h "R=" /tmp/o/*/bench.log
