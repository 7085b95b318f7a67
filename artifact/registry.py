"""The one registry of paths (docs/design.md §4): each path's name and the class that runs it. Plain data, no
torch, so the reporting stage (plots/) and the merge read it without loading a kernel; artifact.paths.get_path
imports a path's module on first use."""
import importlib

# name -> "module:Class". The only place a path is registered; modules are imported on first use, so a
# path whose framework is missing still lists, and reports the reason through supports().
PATHS: dict[str, str] = {
    "reference_fullstate": "artifact.reference:ReferenceFullStatePath",
    "reference_replay": "artifact.reference:ReferenceReplayPath",
    "onela": "kernels.onela:OneLAPath",
    "controlled_fullstate": "kernels.fullstate:ControlledFullStatePath",
    "vllm_fullstate": "baselines.vllm_fullstate:VllmFullStatePath",
    "vllm_prefix_replay": "baselines.vllm_prefix_replay:VllmPrefixReplayPath",
    "sglang_fullstate": "baselines.sglang_fullstate:SglangFullStatePath",
    "sglang_replayssm": "baselines.sglang_replayssm:SglangReplaySSMPath",
    "flashinfer_fullstate": "baselines.flashinfer_fullstate:FlashInferFullStatePath",
    "trtllm_fullstate": "baselines.trtllm_fullstate:TrtllmFullStatePath",
    "fla_fullstate": "baselines.fla_fullstate:FlaFullStatePath",
    # the paper's FullState maintenance (one persistent pool, explicit per-step reorder of the parents' states
    # through a transient workspace) beside the index mode above, in the same adapter modules
    "controlled_fullstate_paper": "kernels.fullstate:ControlledFullStatePaperPath",
    "vllm_fullstate_paper": "baselines.vllm_fullstate:VllmFullStatePaperPath",
    "sglang_fullstate_paper": "baselines.sglang_fullstate:SglangFullStatePaperPath",
    "flashinfer_fullstate_paper": "baselines.flashinfer_fullstate:FlashInferFullStatePaperPath",
    "trtllm_fullstate_paper": "baselines.trtllm_fullstate:TrtllmFullStatePaperPath",
    "fla_fullstate_paper": "baselines.fla_fullstate:FlaFullStatePaperPath",
}

# name -> "module:function": our kernels that stand in for a block of the full model's decode pipeline
# (artifact.model.blocks.FUNCTIONS, same name, arguments and outputs) on a CUDA device, for every path alike;
# artifact.model.blocks.DecodeOps imports them on first use, as get_path imports a path's module.
DECODE_KERNELS: dict[str, str] = {
    "conv_gates": "kernels.model_ops:conv_gates",
    "attn_pre": "kernels.model_ops:attn_pre",
    "merge_own_kv": "kernels.model_ops:merge_own_kv",
    "gated_norm": "kernels.model_ops:gated_norm",
}


def load_object(target: str):
    """The object a "module:name" entry of these tables (and of sweeps.runners') names, its module imported now."""
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
