#!/bin/bash
# x2 call A: FlashInfer CuTe part 1 to /tmp/ship; ncu of the v8 default (R=4 O=3 and R=4 O=7's last steps)
python3 baselines/ship_parts.py receive --from .whl/ship/call1
export ONELA_GIT_COMMIT=692c4973f11689c13bc53711a432cc69bdb31221 PYTHONPATH=$PWD
mkdir -p /tmp/o
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
(CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none -k regex:_onela --launch-skip 4 --launch-count 4 $SEC python3 scratch/ncu_v8.py 4 2 > /tmp/o/ncu_v8_r4o3.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 timeout 200 ncu --clock-control none -k regex:_onela --launch-skip 20 --launch-count 4 $SEC python3 scratch/ncu_v8.py 4 6 > /tmp/o/ncu_v8_r4o7_steps4_5.txt 2>&1) &
wait
tar czf $OUT/o.tgz -C /tmp o
grep -E "_onela|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy" /tmp/o/*.txt | head -80
