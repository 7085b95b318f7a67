#!/bin/bash
# K = 256 regression A/B in one process per geometry: v8 default (pdl 1, replay loop) vs pdl 0 / unrolled replay
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/sweeps/*.whl
export ONELA_GIT_COMMIT=692c4973f11689c13bc53711a432cc69bdb31221 PYTHONPATH=$PWD:/tmp/hsite
mkdir -p /tmp/o/g /tmp/o/r
C='--config {"pdl":0} --config {"replay_stages":0} --config {"pdl":0,"replay_stages":0}'
timeout 130 python3 -m kernels.bench --no-fullstate --geometry gdn_1_3b --R 16 --out /tmp/o/g $C > /tmp/o/g/bench.log 2>&1
timeout 100 python3 -m kernels.bench --no-fullstate --geometry range_k256_v256 --R 16 --out /tmp/o/r $C > /tmp/o/r/bench.log 2>&1
tar czf $OUT/o.tgz -C /tmp o
grep -h "R=" /tmp/o/*/bench.log
