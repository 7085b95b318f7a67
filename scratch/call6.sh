#!/bin/bash
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/sweeps/*.whl
export ONELA_GIT_COMMIT=e21a4bf1da3511315da44c2797e9068c3ba8e9cd PYTHONPATH=$PWD:/tmp/hsite
mkdir -p /tmp/o/g /tmp/o/r /tmp/o/q
C='--config {"beam_loop_always":true}'
timeout 60 python3 -m kernels.bench --no-fullstate --geometry gdn_1_3b --R 16 --out /tmp/o/g $C > /tmp/o/g/bench.log 2>&1
timeout 50 python3 -m kernels.bench --no-fullstate --geometry range_k256_v256 --R 16 --out /tmp/o/r $C > /tmp/o/r/bench.log 2>&1
timeout 45 python3 -m kernels.bench --no-fullstate --geometry qwen3_5_0_8b --R 4 --W 128 --out /tmp/o/q $C > /tmp/o/q/bench.log 2>&1
tar czf $OUT/o.tgz -C /tmp o
grep -h "R=" /tmp/o/*/bench.log
