# The call that measured results/experiments/hf_generate_fused_5913aad_h100/ (run from the repository root on the GPU host;
# .scratch/ held the two forms of kernels/onela/transformers.py: 5913aad's fused one and a5e3b33's unfused one).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fla/*.whl .whl/hydra/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 ONELA_GIT_COMMIT=$(cat .scratch/commit)
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pyc
nvidia-smi -L; T0=$(date +%s)
F(){ grep -v "Warning\|warn_once\|Loading weights\|causal_conv1d" ; }
# 1. fused integration (28155b4 re-applied), OneLA only, cold compiles: first-cell time in the console
cp .scratch/transformers_unfused.py /tmp/transformers_unfused.py
cp .scratch/transformers_fused.py /tmp/fused.py && cp /tmp/fused.py kernels/onela/transformers.py
timeout 200 python -m tools.hf_generate --out /tmp/hf_fused --systems hf_generate_onela --prompts 1024 --O 3 5 7 2>&1 | F | while IFS= read -r l; do echo "[$(( $(date +%s) - T0 ))s] $l"; done | tee $OUT/fused_console.log
# 2. unfused integration (HEAD), same cells
cp /tmp/transformers_unfused.py kernels/onela/transformers.py
ONELA_GIT_COMMIT=a5e3b33bb8d8 timeout 120 python -m tools.hf_generate --out /tmp/hf_unfused --systems hf_generate_onela --prompts 1024 --O 3 5 7 2>&1 | F | while IFS= read -r l; do echo "[$(( $(date +%s) - T0 ))s] $l"; done | tee $OUT/unfused_console.log
cp /tmp/fused.py kernels/onela/transformers.py
# 3. stock generate, chunked prefill (80 GB card), same cells
LEFT=$(( 540 - ($(date +%s) - T0) ))
timeout $LEFT python -m tools.hf_generate --out /tmp/hf_stock --systems hf_generate --prompts 1024 --O 3 5 7 --stock-prefill-chunk 256 2>&1 | F | while IFS= read -r l; do echo "[$(( $(date +%s) - T0 ))s] $l"; done | tee $OUT/stock_console.log
# 4. fused at 5K with what time is left
LEFT=$(( 580 - ($(date +%s) - T0) ))
[ $LEFT -gt 40 ] && timeout $LEFT python -m tools.hf_generate --out /tmp/hf_fused --systems hf_generate_onela --prompts 5120 --O 3 5 7 2>&1 | F | while IFS= read -r l; do echo "[$(( $(date +%s) - T0 ))s] $l"; done | tee -a $OUT/fused_console.log
echo "all $(( $(date +%s) - T0 )) s"
cd /tmp && tar czf $OUT/hf.tgz hf_fused hf_unfused hf_stock 2>/dev/null
