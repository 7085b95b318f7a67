"""Full-model decode (paper §4.2, Fig. 6): the Qwen3.5-0.8B hybrid GDN / gated-attention geometry with seeded
random weights (or a local Hugging Face checkpoint), prompt prefill, and GR's large-beam SID search with the
GDN recurrent state delegated to a registered path's Stepper.

config      ModelConfig, QWEN3_5_0_8B, TINY          weights     random init, HF-layout load / save
network     HybridModel (device weights, fused)      layers      norms, rotary, SwiGLU, conv, gates
gdn_chunk   chunked GDN over a prompt                prefill     PromptState (S_ctx, conv tail, prompt KV, tail)
attention   shared-prompt decode attention           beam_state  conv windows / decode KV: ancestry or copies
beam        top-W selection, BeamResult              decode      BeamDecoder (one path's pipeline)
blocks      the non-recurrent ops (eager / compiled) stepper_gate  GDN outputs vs FP32 FullState
graphs      CUDA-graph capture and GPU timing        cell        one Fig 6 cell: model, prompts, gated decode
safetensors_io  minimal safetensors reader / writer
cost        the decode's floor, per component         regions     profiler ranges of a call's parts -> components
breakdown   a call's device time per component (profiler attribution, graph replay through eager twins)
"""
