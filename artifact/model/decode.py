"""The beam decode of one path: R requests x W beams, T decode calls, all R*W beams batched in every layer.

One pipeline for every path; only the GDN recurrent state differs (the path's Stepper, one per GDN layer, from
`artifact.paths.make_stepper`), plus how the pipeline's own conv windows and decode KV follow the beam tree
(`beam_state`: through ancestry where the path declares `keeps_ancestry` (OneLA), else by per-beam copies). The
steppers of a path that declares `replays_prompt_tail` (vllm_prefix_replay) start from the last prompt-block
checkpoint and replay the prompt tail (paper §2.3).

`forward(t)` is decode call t's whole model forward (embedding -> 24 layers incl. state maintenance -> final
norm -> LM head logits) and is what a CUDA graph captures, one graph per t (static shapes); call 0 also resets
the steppers to the prompt state. Beam selection (log-softmax + global top-W) runs between calls, outside the
graphs and outside the timed region. Each call and each part of it runs inside a named profiler range
(`artifact.model.regions`; a no-op unless torch.profiler records), which the per-component breakdown of a call
(`artifact.model.breakdown`) reads.

Each GDN layer keeps one slot per step of its stepper's inputs and output (`gdn_io[i]`): the conv's q|k|v, g
and beta as the conv returned them (in a graph-replayed decode the graph's own output tensors, rewritten by each
replay) and o, a static [T, ...] buffer the stepper writes. The forward writes these values once either way;
keeping one slot per step means a finished decode -- graph-replayed or eager -- still holds every stepper's
inputs and outputs, which `artifact.model.stepper_gate` compares against the FP32 FullState reference and the
recurrent-share timer replays through the steppers alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from artifact.model.attention import select_prompt_attention, shared_prefix_attention
from artifact.model.beam import BeamResult, first_beams, forced_scores, select_beams
from artifact.model.beam_state import BeamTree, ConvHistory, KvHistory, beam_state_mode
from artifact.model.blocks import DecodeOps, residual_gemm
from artifact.model.layers import rotary_cos_sin
from artifact.model.network import HybridModel
from artifact.model.prefill import PromptState
from artifact.model.regions import CALL, region
from artifact.paths import get_path, make_stepper


class BeamDecoder:
    def __init__(self, model: HybridModel, path: str, R: int, W: int, T: int, prompt_len: int, *,
                 attention: str = "auto", state_mode: str | None = None, compile: bool = False):
        for name, val in (("R", R), ("W", W), ("T", T), ("prompt_len", prompt_len)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"BeamDecoder: {name} must be a positive int, got {val!r}")
        cfg, dev, dt = model.cfg, model.device, model.dtype
        if W > cfg.vocab_size:
            raise ValueError(f"BeamDecoder: W={W} beams exceed the vocabulary ({cfg.vocab_size})")
        self.model, self.path, self.R, self.W, self.T, self.prompt_len = model, path, R, W, T, prompt_len
        kind = get_path(path)
        self.tree = BeamTree(state_mode or beam_state_mode(kind), R, W, T, dev)
        self.uses_tail = kind.replays_prompt_tail
        geo = cfg.geometry
        self.steppers = [make_stepper(path, geo, R, W, T, dev) for _ in cfg.gdn_layers]
        self.conv = [ConvHistory(self.tree, cfg.conv_dim, cfg.linear_conv_kernel_dim, dt, dev)
                     for _ in cfg.gdn_layers]
        self.kv = [KvHistory(self.tree, cfg.num_key_value_heads, cfg.head_dim, dt, dev) for _ in cfg.attn_layers]
        # per step: the conv's q|k|v, g and beta as DecodeOps.conv_gates returned them (in a captured decode, the
        # graph's own output tensors), and the stepper's output buffer o [T, ...]
        self.gdn_io = [{"mixed": [None] * T, "g": [None] * T, "beta": [None] * T,
                        "out": torch.zeros(T, R, W, geo.hv, geo.v, dtype=dt, device=dev)} for _ in cfg.gdn_layers]
        self.tokens = torch.zeros(R, W, dtype=torch.long, device=dev)
        self.hidden = torch.zeros(T, R, W, cfg.hidden_size, dtype=dt, device=dev)
        self.logits = torch.empty(R, W, cfg.vocab_size, dtype=dt, device=dev)
        self.cos, self.sin = rotary_cos_sin(torch.arange(prompt_len, prompt_len + T, device=dev), cfg.rotary_dim,
                                            cfg.rope_theta)
        self.attn_impl = select_prompt_attention(dev, dt, cfg.head_dim, attention)
        self.ops = DecodeOps(compile, kernels=dev.type == "cuda")     # our kernels on a GPU, every path alike
        self.prompt: dict | None = None
        self.graphs: list | None = None

    # ---- prompt ----
    def load_prompt(self, ps: PromptState) -> None:
        """Copy a prefill's outputs into this decoder's static buffers (allocated on the first call)."""
        if ps.prompt_len != self.prompt_len:
            raise ValueError(f"prompt state has prompt_len={ps.prompt_len}, decoder expects {self.prompt_len}")
        if self.uses_tail and ps.replay_block is None:
            raise ValueError(f"path {self.path!r} replays the prompt tail: prefill with replay_block set")
        src = {"s_ctx": ps.s_ctx, "conv_tail": ps.conv_tail, "k_prompt": ps.k_prompt, "v_prompt": ps.v_prompt}
        if self.uses_tail:
            src.update(s_boundary=ps.s_boundary, tail=ps.tail)
        if self.prompt is None:
            clone = lambda x: {n: t.clone() for n, t in x.items()} if isinstance(x, dict) else x.clone()  # noqa: E731
            self.prompt = {name: [clone(x) for x in xs] for name, xs in src.items()}
        else:
            for name, xs in src.items():
                for dst, x in zip(self.prompt[name], xs):
                    for d, s in ((dst, x),) if not isinstance(x, dict) else ((dst[n], x[n]) for n in x):
                        if d.shape != s.shape:
                            raise ValueError(f"prompt state {name}: shape {tuple(s.shape)} != {tuple(d.shape)}")
                        d.copy_(s)
        for hist, tail in zip(self.conv, self.prompt["conv_tail"]):
            hist.prompt_tail.copy_(tail)
        self.first_tokens, self.first_scores = first_beams(ps.logits_last, self.W)

    # ---- one decode call ----
    @torch.no_grad()
    def forward(self, t: int) -> torch.Tensor:
        """Decode call t for all R*W beams; reads self.tokens / self.tree.parents, writes hidden[t] and logits."""
        if self.prompt is None:
            raise RuntimeError("BeamDecoder.forward before load_prompt")
        m, cfg = self.model, self.model.cfg
        if t == 0:
            with region("gdn_recurrent"):
                for i, st in enumerate(self.steppers):
                    if self.uses_tail:
                        st.reset(self.prompt["s_boundary"][i], tail=self.prompt["tail"][i])
                    else:
                        st.reset(self.prompt["s_ctx"][i])
        else:
            with region("ancestry"):
                self.tree.advance(t)
        with region("embed"):
            x = F.embedding(self.tokens, m.embed)            # the residual stream, updated in place (residual_gemm)
        gi = ai = 0
        for layer, kind in zip(m.layers, cfg.layer_types):
            if kind == "linear_attention":
                self._gdn(t, gi, layer, x)
                gi += 1
            else:
                self._attn(t, ai, layer, x)
                ai += 1
        with region("final_norm"):
            self.hidden[t].copy_(self.ops.final_norm(x, m.final_norm, cfg.rms_norm_eps))
        with region("lm_head"):
            return m.logits(self.hidden[t], out=self.logits)

    def _mlp(self, layer, x) -> None:
        """The MLP block of a layer for all beams: x += down(silu(gate) * up of rmsnorm(x))."""
        with region("mlp"):
            residual_gemm(x, self.ops.mlp_in(x, layer["ln2"], layer["gate_up"], self.model.cfg.rms_norm_eps),
                          layer["down"])

    def _gdn(self, t, i, layer, x) -> None:
        """One GDN layer + its MLP for all beams, adding both into the residual stream x."""
        m, cfg, ops = self.model, self.model.cfg, self.ops
        io, conv = self.gdn_io[i], self.conv[i]
        with region("gdn_norm_proj"):
            qkv, z, ba = m.split_gdn_proj(ops.norm_proj(x, layer["ln1"], layer["in_proj"], cfg.rms_norm_eps))
        with region("gdn_conv"):                    # the conv windows' upkeep is the conv pass's own stores
            mixed, (beta, g), kept = ops.conv_gates(qkv, conv.history(t), conv.carry, layer["conv"], ba,
                                                    layer["A_log"], layer["dt_bias"])
            conv.keep(t, kept)
        io["mixed"][t], io["g"][t], io["beta"][t] = mixed, g, beta      # kept for the check and the stepper timer
        q, k, v = self.split_qkv(mixed)
        with region("gdn_recurrent"):
            out = self.steppers[i].step(t, q, k, v, g, beta, self.tree.parents, io["out"][t])
        z = z.unflatten(-1, (cfg.linear_num_value_heads, cfg.linear_value_head_dim))
        with region("gdn_norm"):
            o = ops.gated_norm(out, z, layer["norm"], cfg.rms_norm_eps)
        with region("gdn_out_proj"):
            residual_gemm(x, o, layer["out_proj"])
        self._mlp(layer, x)

    def split_qkv(self, mixed: torch.Tensor):
        """Conv output [R, W, conv_dim] -> q, k [R, W, HK, K] and v [R, W, HV, V] (views sharing strides)."""
        cfg = self.model.cfg
        q, k, v = torch.split(mixed, [cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
        return (q.unflatten(-1, (cfg.linear_num_key_heads, cfg.linear_key_head_dim)),
                k.unflatten(-1, (cfg.linear_num_key_heads, cfg.linear_key_head_dim)),
                v.unflatten(-1, (cfg.linear_num_value_heads, cfg.linear_value_head_dim)))

    def _attn(self, t, i, layer, x) -> None:
        """One gated full-attention layer + its MLP for all beams, adding both into the residual stream x."""
        m, cfg, ops, kv = self.model, self.model.cfg, self.ops, self.kv[i]
        with region("attn_norm_proj"):
            q, gate, k, v = m.split_attn_proj(ops.norm_proj(x, layer["ln1"], layer["qkv_proj"], cfg.rms_norm_eps))
        with region("kv_state"):                    # copy mode's fork; the step's k, v are attn_pre's stores
            kv.fork(t)
        with region("attn_qk_norm_rope"):
            q = ops.attn_pre(q, k, v, layer["q_norm"], layer["k_norm"], self.cos[t], self.sin[t], cfg.rms_norm_eps,
                             *kv.slot(t))
        k_own, v_own = kv.own(t)
        qg = q.unflatten(2, (self.W, -1)).permute(0, 2, 1, 3, 4)            # prompt-major q as [R, W, Hkv, G, D]
        o = shared_prefix_attention(self.attn_impl, qg, self.prompt["k_prompt"][i], self.prompt["v_prompt"][i],
                                    k_own, v_own, cfg.head_dim ** -0.5, merge=ops.merge_own_kv, gate=gate)
        with region("attn_o_proj"):
            residual_gemm(x, o, layer["o_proj"])
        self._mlp(layer, x)

    # ---- the beam search ----
    @torch.no_grad()
    def run(self, forced: BeamResult | None = None, use_graphs: bool = False, events=None) -> BeamResult:
        """One beam search of T decode calls from the loaded prompt; `forced` replays another search's beams
        (its tokens and parents) instead of selecting, so two paths' logits can be compared call by call."""
        if forced is not None and (forced.T != self.T or tuple(forced.tokens.shape[1:]) != (self.R, self.W)):
            raise ValueError(f"forced beams have shape {tuple(forced.tokens.shape)}, expected "
                             f"{(self.T + 1, self.R, self.W)}")
        if use_graphs and self.graphs is None:
            raise RuntimeError("BeamDecoder.run(use_graphs=True) before capture()")
        tok = self.first_tokens if forced is None else forced.tokens[0].to(self.tokens.device)
        scores = self.first_scores.clone()
        toks, pars = [tok], [torch.zeros_like(self.tree.parents)]
        self.tokens.copy_(tok)
        self.tree.parents.zero_()
        for t in range(self.T):
            if events is not None:
                events[t][0].record()
            with region(CALL):
                self.graphs[t].replay() if use_graphs else self.forward(t)
            if events is not None:
                events[t][1].record()
            if forced is None:
                scores, par, tok = select_beams(self.logits, scores)
            else:
                par, tok = forced.parents[t + 1].to(self.tokens.device), forced.tokens[t + 1].to(self.tokens.device)
                scores = forced_scores(self.logits, scores, par, tok)
            toks.append(tok)
            pars.append(par)
            if t + 1 < self.T:
                self.tokens.copy_(tok)
                self.tree.parents.copy_(par)
        return BeamResult(torch.stack(toks), torch.stack(pars), scores, self.hidden.clone())

    def persistent_bytes(self) -> int:
        """Recurrent-state capacity of all GDN layers (what the paper's Fig. 8b counts), from the steppers."""
        return int(sum(st.persistent_bytes() for st in self.steppers))

    def written_bytes(self) -> int:
        return int(sum(st.written_bytes() for st in self.steppers))
