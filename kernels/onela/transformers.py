"""OneLA inside transformers' beam search: `onela_generate(model, input_ids, num_beams=W, max_new_tokens=N)`.

Stock `Qwen3_5ForCausalLM.generate(num_beams=W)` copies each request's prompt W times before prefill, keeps a
full GDN state, conv window and KV cache per beam, and after every selection re-gathers all of them by the chosen
beams (`Cache.reorder_cache`). `onela_generate` runs the same `generate` -- its beam search, logits processors,
stopping criteria and outputs untouched -- with the model's forward replaced, for the duration of the call, by
`OneLABeamCache.forward`:

- The first forward (generate's prefill of R x W rows, W copies per request) runs the model's own forward once
  per request, on the R distinct prompts, with a stock transformers cache; from that cache it keeps per GDN layer
  S_ctx (the post-prompt state) and the conv window's last width - 1 inputs, and per full-attention layer the
  prompt's keys and values. It returns the last position's logits repeated W times, the rows generate expects.
- Every later forward is one decode call for all R x W beams, run through the model's own modules (norms,
  projections, MLPs, rotary, LM head) except where a beam's history is read: each GDN layer's recurrence is the
  public `kernels.onela.OneLA` op (S_ctx shared by the request's beams, the append-only record store, the
  ancestry), the conv reads each beam's previous inputs through the ancestry, and each attention layer attends to
  the prompt's KV, stored once per request, plus the beam's own decode KV, merged exactly through the
  log-sum-exp (`artifact.model.attention.shared_prefix_attention`, `artifact.model.beam_state`).
- generate's reorder, `reorder_cache(beam_idx)` on the cache object the forward returns, only records the
  parents: selection moves indices, never a state, a record or a KV row.

The forward is replaced on the model instance and restored when generate returns or raises; the model's weights
are read in place, never copied. generate is called with `do_sample=False`, `use_cache=True` and the beam width
and length given here; other keyword arguments go to generate as they are (a `generation_config`, logits
processors, `eos_token_id`, `num_return_sequences`, `output_scores`, `return_dict_in_generate`, ...).

What it refuses, each with an error naming the value: sampling (`do_sample=True`), `num_beams` < 2, a batch
that is not [R, L] token ids, padding (an attention mask with a zero: prompts must have one length),
`inputs_embeds`, `max_length` in place of `max_new_tokens`, `use_cache=False`, `output_attentions` /
`output_hidden_states`, a model that is not a text Qwen3.5-style hybrid (`layer_types` of linear_attention and
full_attention with these module names), a model dtype other than bf16 / fp32, head sizes the OneLA kernels do
not take, a CPU without `TRITON_INTERPRET=1`, and transformers versions other than the tested ones
(`TESTED_TRANSFORMERS`; `allow_untested_transformers=True` runs another at the caller's risk).

The cache lives on the model (one decode shape at a time: R, W, max_new_tokens, prompt length) and is taken up
again by the next `onela_generate` of the same shape: its state buffers keep their addresses, so on a CUDA device
(`cuda_graphs=True`, the default) the first search of a shape runs eagerly -- Triton compiles, cuBLAS picks its
kernels -- and the next one captures each of its T decode calls into a CUDA graph (one memory pool, captured in
step order when its prefill is done), which that search and every later one of the shape replay: the decode's
some 1,800 eager launches per call cost the host once, not per call. Only generate's own beam search between the
calls stays on the host. A new shape drops the previous one's buffers and graphs (`release(model)` drops them
explicitly). No torch.compile: the graphs hold the same kernels an eager call runs. Its GEMMs,
norms and MLP are the model's; only the GDN recurrence, the conv window's gather and the attention's KV reads
differ from stock, so a beam's logits differ from stock generate's by OneLA's bf16 records and projections plus
the order of floating-point operations: relative to the largest logit about 1e-3 on the tests' tiny model, up to
4.5e-3 with six GDN layers of Qwen3.5-0.8B's 128-wide heads (`tests/test_onela_transformers.py`). Where two
candidates' scores lie closer than that -- wide beams over a large vocabulary -- the two searches can keep
different beams from that step on; `tools.hf_generate.first_divergence` finds the step and the gap.

The module's name is the package's: imports here are absolute, so `import transformers` inside it is the
library, and `kernels.onela` does not import this module (transformers stays an optional dependency).
"""
from __future__ import annotations

import functools
import inspect
import os

import torch

from artifact.model.attention import select_prompt_attention, shared_prefix_attention
from artifact.model.beam_state import BeamTree, ConvHistory, KvHistory
from artifact.model.blocks import DecodeOps
from artifact.workload import Geometry
from kernels.checks import kernel_supports
from kernels.onela.op import OneLA

CACHE_ATTR = "_onela_beam_cache"        # the model's attribute that keeps the cache between generate calls

# transformers releases (major.minor) this integration's CPU tests pass with: 5.24 (the project's test environment)
# and 5.17 (the H200 host's release). Their generate and Qwen3.5 modules differ in the cache's API and in the
# names of the layers' cache arguments, which is why the integration touches neither.
TESTED_TRANSFORMERS = ("5.17", "5.24")
GDN, ATTN = "linear_attention", "full_attention"
MODEL_DTYPES = (torch.bfloat16, torch.float32)
# generate arguments this integration sets itself or cannot honour, with why.
REFUSED_KWARGS = {
    "do_sample": "sampling is not covered (the search is deterministic beam search)",
    "use_cache": "the OneLA cache is the decode's only state",
    "max_length": "give max_new_tokens (the decode's steps are allocated up front)",
    "inputs_embeds": "prompts are token ids [R, L]",
    "output_attentions": "the decode returns no attention weights",
    "output_hidden_states": "the decode returns no hidden states",
    "past_key_values": "the OneLA cache is made here",
    "cache": "the OneLA cache is made here",
    "assistant_model": "assisted decoding is not covered",
    "prefill_chunk_size": "the prompt is prefilled once per request, unchunked",
    "num_beam_groups": "diverse beam search is not covered",
    "streamer": "streaming is not covered",
}
# values of those arguments that change nothing (None for every one of them)
HARMLESS = {"do_sample": (False, None), "use_cache": (True, None), "num_beam_groups": (1, None),
            "output_attentions": (False, None), "output_hidden_states": (False, None)}


def transformers_version() -> str:
    import transformers
    return transformers.__version__


def check_transformers(allow_untested: bool = False) -> str:
    """The installed transformers version; ValueError naming it when it is not one of TESTED_TRANSFORMERS."""
    ver = transformers_version()
    if not allow_untested and ".".join(ver.split(".")[:2]) not in TESTED_TRANSFORMERS:
        raise ValueError(f"kernels.onela.transformers: transformers {ver} is untested (tested: "
                         f"{', '.join(TESTED_TRANSFORMERS)}); pass allow_untested_transformers=True to run it anyway")
    return ver


def _text_config(model):
    cfg = model.config
    return getattr(cfg, "text_config", None) or cfg


def check_model(model) -> None:
    """ValueError naming what this integration cannot run: a layer kind, a missing module, a dtype, a bias, an
    activation. The GDN layers' head sizes are checked where the OneLA ops are made."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not all(hasattr(inner, n) for n in ("embed_tokens", "norm", "rotary_emb")) \
            or not hasattr(model, "lm_head"):
        raise ValueError(f"kernels.onela.transformers: {type(model).__name__} is not a text Qwen3.5-style causal LM "
                         "(model.model.layers / embed_tokens / norm / rotary_emb and lm_head)")
    cfg = _text_config(model)
    kinds = tuple(getattr(cfg, "layer_types", ()) or ())
    if len(kinds) != len(layers) or any(k not in (GDN, ATTN) for k in kinds):
        raise ValueError(f"kernels.onela.transformers: layer_types {kinds!r} are not {GDN!r} / {ATTN!r} per layer")
    if GDN not in kinds:
        raise ValueError("kernels.onela.transformers: the model has no linear_attention (GDN) layer")
    dtype = model.lm_head.weight.dtype
    if dtype not in MODEL_DTYPES:
        raise ValueError(f"kernels.onela.transformers: model dtype {dtype} is not covered (bf16 or fp32)")
    for i, (layer, kind) in enumerate(zip(layers, kinds)):
        need = (("linear_attn", ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "A_log",
                                 "dt_bias", "norm", "out_proj")) if kind == GDN else
                ("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")))
        mixer = getattr(layer, need[0], None)
        missing = [n for n in need[1] if mixer is None or not hasattr(mixer, n)]
        if missing or not all(hasattr(layer, n) for n in ("input_layernorm", "post_attention_layernorm", "mlp")):
            raise ValueError(f"kernels.onela.transformers: layer {i} ({kind}) lacks {missing or 'its norms / mlp'}")
        if kind == GDN:
            if mixer.conv1d.bias is not None:
                raise ValueError(f"kernels.onela.transformers: layer {i}'s conv1d has a bias (Qwen3.5's has none)")
            if not all(hasattr(mixer.norm, n) for n in ("weight", "variance_epsilon")):
                raise ValueError(f"kernels.onela.transformers: layer {i}'s GDN norm {type(mixer.norm).__name__} has no "
                                 "weight / variance_epsilon (Qwen3.5's gated RMSNorm)")
            if getattr(mixer, "activation", "silu") != "silu":
                raise ValueError(f"kernels.onela.transformers: layer {i}'s conv activation {mixer.activation!r} "
                                 "is not silu")


def check_prompts(input_ids, attention_mask=None) -> tuple[int, int]:
    """(R, L) of a batch of equal-length prompts; ValueError naming a bad shape, dtype or padding."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] < 1 \
            or input_ids.shape[1] < 1 or input_ids.dtype not in (torch.int64, torch.int32):
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"kernels.onela.transformers: input_ids must be integer token ids [R, L] with R, L >= 1, "
                         f"got {shape}")
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"kernels.onela.transformers: attention_mask has shape {tuple(attention_mask.shape)}, "
                             f"input_ids {tuple(input_ids.shape)}")
        zeros = int((attention_mask == 0).sum())
        if zeros:
            raise ValueError(f"kernels.onela.transformers: attention_mask has {zeros} zero(s): padded prompts are "
                             "not covered; give prompts of one length (or generate each length separately)")
    return int(input_ids.shape[0]), int(input_ids.shape[1])


def _cache_layers(cache):
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ValueError(f"kernels.onela.transformers: the prefill returned {type(cache).__name__}, which has no "
                         "per-layer states (.layers) to start the decode from")
    return layers


class OneLABeamCache:
    """The decode state of R requests x W beams for a transformers Qwen3.5 model, and its forward.

    Per GDN layer a `OneLA` op (S_ctx, the record store, the ancestry) and the conv window's history; per
    attention layer the prompt's K/V [R, Hkv, L, D], stored once per request, and each step's decode K/V; one
    `BeamTree` (ancestry mode) whose parents `reorder_cache` sets. `forward` is what generate calls: the prefill
    first, then one decode call per step, at most `max_steps` (= max_new_tokens - 1) of them.
    """

    def __init__(self, model, num_requests: int, beam_width: int, max_steps: int, prompt_len: int, *,
                 attention: str = "auto"):
        check_model(model)
        for name, x in (("num_requests", num_requests), ("beam_width", beam_width), ("max_steps", max_steps),
                        ("prompt_len", prompt_len)):
            if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                raise ValueError(f"OneLABeamCache: {name} must be a positive int, got {x!r}")
        cfg = _text_config(model)
        self.model, self.R, self.W, self.T, self.L = model, num_requests, beam_width, max_steps, prompt_len
        self.kinds = tuple(cfg.layer_types)
        dev, dt = model.lm_head.weight.device, model.lm_head.weight.dtype
        self.device, self.dtype = dev, dt
        gdn = next(layer.linear_attn for layer, k in zip(model.model.layers, self.kinds) if k == GDN)
        self.geometry = Geometry(gdn.num_k_heads, gdn.num_v_heads, gdn.head_k_dim, gdn.head_v_dim)
        reason = kernel_supports("onela", self.geometry, dev)
        if reason:
            raise ValueError(f"kernels.onela.transformers: {reason}")
        g = self.geometry
        self.tree = BeamTree("ancestry", num_requests, beam_width, max_steps, dev)
        self.ops, self.conv, self.kv, self.prompt_kv = {}, {}, {}, {}
        # per GDN layer, what the decode's fused GDN ops read of its weights in fp32: the conv taps [C, width],
        # A_log, dt_bias and the output norm's weight
        self.conv_taps, self.gdn_params, self.norm_w = {}, {}, {}
        # conv + gates, the gated output norm and the attention's own-KV merge with the output gate: our kernels
        # (artifact.registry.DECODE_KERNELS), as the project's decoder runs them on a GPU; on a CPU under the
        # Triton interpreter, which the OneLA ops need there anyway
        self.fused = DecodeOps(kernels=True)
        for i, (layer, kind) in enumerate(zip(model.model.layers, self.kinds)):
            if kind == GDN:
                m = layer.linear_attn
                self.ops[i] = OneLA(num_requests, beam_width, max_steps, num_k_heads=g.hk, num_v_heads=g.hv,
                                    head_k_dim=g.k, head_v_dim=g.v, device=dev, check_parents=False)
                self.conv[i] = ConvHistory(self.tree, m.conv_dim, m.conv_kernel_size, dt, dev)
                self.conv_taps[i] = m.conv1d.weight[:, 0, :].float().contiguous()
                self.gdn_params[i] = (m.A_log.float().contiguous(), m.dt_bias.float().contiguous())
                self.norm_w[i] = m.norm.weight.float().contiguous()
            else:
                a = layer.self_attn
                self.kv[i] = KvHistory(self.tree, a.config.num_key_value_heads, a.head_dim, dt, dev)
        attn = next((layer.self_attn for layer, k in zip(model.model.layers, self.kinds) if k == ATTN), None)
        self.attention = attention
        self.attn_impl = select_prompt_attention(dev, dt, attn.head_dim, attention) if attn is not None else None
        # the model's own rotary application (transformers' modelling module of its attention class)
        self.rope = getattr(inspect.getmodule(type(attn)), "apply_rotary_pos_emb", None) if attn is not None else None
        if attn is not None and self.rope is None:
            raise ValueError(f"kernels.onela.transformers: {type(attn).__module__} has no apply_rotary_pos_emb")
        self.t: int | None = None            # None before the prefill; then the next decode call's index
        self.forward_calls = 0
        # kept between searches of this shape, at fixed addresses (what captured decode calls read): the step's
        # token ids, S_ctx per GDN layer, the prompt's K / V per attention layer (made at the first prefill)
        self.ids = torch.zeros(num_requests * beam_width, 1, dtype=torch.long, device=dev)
        self.s_ctx = {i: torch.zeros(num_requests, g.hv, g.v, g.k, dtype=torch.float32, device=dev) for i in self.ops}
        # CUDA graphs: one per decode call once a whole eager search of this shape has run (`begin`)
        self.cuda_graphs = False
        self.eager_searches = 0             # whole searches run eagerly: every step's kernels compiled
        self.graphs: list | None = None     # [T] graphs, their logits outputs, captured at a search's first call
        self.graph_logits: list | None = None

    @property
    def shape(self) -> tuple:
        return self.R, self.W, self.T, self.L

    def begin(self, cuda_graphs: bool) -> None:
        """A new search of this cache's shape: the next forward is its prefill. `cuda_graphs`: replay the
        decode calls' graphs, captured at this search's first decode call if an earlier search of the shape
        ran every call eagerly (CUDA only)."""
        self.t, self.forward_calls = None, 0
        self.cuda_graphs = bool(cuda_graphs) and self.device.type == "cuda"

    # ---- what generate calls ----
    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """generate's selection: beam_idx [R * W] names each new beam's parent as a row of the flattened batch
        (request r's rows are r W .. r W + W - 1). Only the parents are kept; nothing is gathered."""
        R, W = self.R, self.W
        if tuple(beam_idx.shape) != (R * W,):
            raise ValueError(f"OneLABeamCache.reorder_cache: beam_idx has shape {tuple(beam_idx.shape)}, "
                             f"expected ({R * W},)")
        par = beam_idx.to(self.device).view(R, W) - torch.arange(R, device=self.device)[:, None] * W
        # one device sync per decode call: the OneLA ops skip their own per-layer check (check_parents=False)
        lo, hi = torch.stack(torch.aminmax(par)).tolist()
        if lo < 0 or hi >= W:
            raise ValueError(f"OneLABeamCache.reorder_cache: a beam's parent lies in another request "
                             f"(offsets within a request in [{lo}, {hi}], must be in [0, {W - 1}])")
        self.tree.parents.copy_(par)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens behind the next decode call, in every layer alike: the prompt plus the calls done."""
        return self.L + (self.t or 0)

    @torch.no_grad()
    def forward(self, original_forward, input_ids=None, **kwargs):
        """generate's model call: the prefill on its first call, one decode call after that. Returns the model's
        output type with logits [R W, 1, vocab] and this object as the cache."""
        if input_ids is None:
            raise ValueError("kernels.onela.transformers: the forward needs input_ids (inputs_embeds not covered)")
        logits = self._prefill(original_forward, input_ids) if self.t is None else self._decode(input_ids)
        self.forward_calls += 1
        return self._output(original_forward, logits)

    # ---- prefill: each request's prompt once ----
    def _prefill(self, original_forward, input_ids):
        R, W, L = self.R, self.W, self.L
        if tuple(input_ids.shape) != (R * W, L):
            raise ValueError(f"kernels.onela.transformers: generate's prefill has input_ids "
                             f"{tuple(input_ids.shape)}, expected {(R * W, L)}")
        prompts = input_ids[::W]
        if not torch.equal(input_ids.view(R, W, L), prompts[:, None].expand(R, W, L)):
            raise ValueError("kernels.onela.transformers: generate's prefill rows are not W copies of each prompt")
        out = original_forward(input_ids=prompts, use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None)
        cache = out.past_key_values if cache is None else cache
        layers = _cache_layers(cache)
        g = self.geometry
        for i, kind in enumerate(self.kinds):
            lay = layers[i]
            if kind == GDN:
                s = lay.recurrent_states[0]                                  # [R, HV, K, V], transformers' layout
                if tuple(s.shape) != (R, g.hv, g.k, g.v):
                    raise ValueError(f"kernels.onela.transformers: layer {i}'s prefill state has shape "
                                     f"{tuple(s.shape)}, expected {(R, g.hv, g.k, g.v)}")
                self.s_ctx[i].copy_(s.transpose(-1, -2))                     # S_ctx [R, HV, V, K] fp32
                self.ops[i].reset(self.s_ctx[i])
                conv = lay.conv_states[0]                                   # [R, C, width]: the last inputs
                P = self.conv[i].P
                self.conv[i].prompt_tail.copy_(conv[..., -P:].transpose(1, 2))
            else:
                if i in self.prompt_kv:                                     # [R, Hkv, L, D]
                    self.prompt_kv[i][0].copy_(lay.keys)
                    self.prompt_kv[i][1].copy_(lay.values)
                else:
                    self.prompt_kv[i] = tuple(x.clone(memory_format=torch.contiguous_format) for x in (lay.keys, lay.values))
        self.t = 0
        return out.logits[:, -1:].repeat_interleave(W, dim=0)

    # ---- one decode call for every beam ----
    def _decode(self, input_ids):
        R, W, t = self.R, self.W, self.t
        if t >= self.T:
            raise RuntimeError(f"kernels.onela.transformers: decode call {t + 1} past max_steps={self.T}")
        if input_ids.shape[0] != R * W or input_ids.dim() != 2:
            raise ValueError(f"kernels.onela.transformers: a decode call's input_ids have shape "
                             f"{tuple(input_ids.shape)}, expected ({R * W}, 1)")
        self.ids.copy_(input_ids[:, -1:])
        if self.cuda_graphs and self.graphs is None and self.eager_searches and t == 0:
            self._capture()
        if self.cuda_graphs and self.graphs is not None:
            self.graphs[t].replay()
            logits = self.graph_logits[t].clone()       # the graph's output buffer is rewritten next search
        else:
            logits = self._decode_step(t)
            if t == self.T - 1:
                self.eager_searches += 1
        self.t = t + 1
        return logits

    def _capture(self) -> None:
        """Capture decode calls 0..T-1 into one memory pool, in step order (how they are replayed). Nothing
        runs while capturing: each call's kernels read the buffers the previous call's graph writes."""
        from artifact.timing import capture_graph
        pool = torch.cuda.graph_pool_handle()
        graphs, logits = [], []
        for t in range(self.T):
            g, out = capture_graph(lambda t=t: self._decode_step(t), warmup=0, pool=pool)
            graphs.append(g)
            logits.append(out)
        self.graphs, self.graph_logits = graphs, logits

    def _decode_step(self, t):
        """Decode call t for every beam from the token ids in `self.ids`; returns the logits [R W, 1, vocab]."""
        model = self.model
        inner = model.model
        self.tree.advance(t)
        x = inner.embed_tokens(self.ids)                                    # [R W, 1, H]
        pos = torch.full((3, 1, 1), self.L + t, dtype=torch.long, device=self.device)
        cos, sin = inner.rotary_emb(x, pos)                                 # [1, 1, rotary dim], the model's rope
        for i, (layer, kind) in enumerate(zip(inner.layers, self.kinds)):
            h = layer.input_layernorm(x)
            h = self._gdn(i, layer.linear_attn, h, t) if kind == GDN else \
                self._attn(i, layer.self_attn, h, cos, sin, t)
            x = x + h
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return model.lm_head(inner.norm(x))

    def _gdn(self, i, m, h, t):
        """Qwen3_5GatedDeltaNet's single-token decode: the model's projections, then the conv (its window read
        through the ancestry) and the gates in one pass, the recurrence through OneLA, the gated output norm, the
        model's out_proj."""
        R, W, g = self.R, self.W, self.geometry
        N = R * W
        qkv = m.in_proj_qkv(h).view(R, W, -1)
        z = m.in_proj_z(h).view(R, W, g.hv, g.v)
        ba = torch.cat([m.in_proj_b(h), m.in_proj_a(h)], dim=-1).view(R, W, -1)        # [b | a]
        conv = self.conv[i]
        mixed, (beta, gate), kept = self.fused.conv_gates(qkv, conv.history(t), conv.carry, self.conv_taps[i], ba,
                                                          *self.gdn_params[i])
        conv.keep(t, kept)
        q, k, v = torch.split(mixed, [m.key_dim, m.key_dim, m.value_dim], dim=-1)
        q, k = q.unflatten(-1, (g.hk, g.k)), k.unflatten(-1, (g.hk, g.k))
        v = v.unflatten(-1, (g.hv, g.v))
        o = self.ops[i].step(q, k, v, gate, beta, self.tree.parents)        # [R, W, HV, V]
        o = self.fused.gated_norm(o, z, self.norm_w[i], m.norm.variance_epsilon)    # [R, W, HV V]
        return m.out_proj(o.view(N, 1, -1))

    def _attn(self, i, m, h, cos, sin, t):
        """Qwen3_5Attention's single-token decode against the prompt KV shared by the request's beams plus the
        beam's own decode KV."""
        R, W = self.R, self.W
        N, D = R * W, m.head_dim
        rope = self.rope
        query, gate = torch.chunk(m.q_proj(h).view(N, 1, -1, 2 * D), 2, dim=-1)      # [N, 1, nq, D] each
        q = m.q_norm(query).transpose(1, 2)                                 # [N, nq, 1, D]
        k = m.k_norm(m.k_proj(h).view(N, 1, -1, D)).transpose(1, 2)        # [N, nkv, 1, D]
        v = m.v_proj(h).view(R, W, -1, D)
        q, k = rope(q, k, cos, sin)
        q, k = q.reshape(R, W, -1, D), k.reshape(R, W, -1, D)
        k_own, v_own = self.kv[i].step(t, k, v)
        k_prompt, v_prompt = self.prompt_kv[i]
        o = shared_prefix_attention(self.attn_impl, q, k_prompt, v_prompt, k_own, v_own, m.scaling,
                                    merge=self.fused.merge_own_kv, gate=gate.view(R, W, -1, D))   # gated, [R, W, nq, D]
        return m.o_proj(o.reshape(N, 1, -1))

    def _output(self, original_forward, logits):
        from transformers.modeling_outputs import CausalLMOutputWithPast
        field = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
        return CausalLMOutputWithPast(logits=logits, **{field: self})

    @property
    def capacity_bytes(self) -> int:
        """Recurrent-state bytes of every GDN layer (S_ctx, records, ancestry), as `OneLA.capacity_bytes`."""
        return int(sum(op.capacity_bytes for op in self.ops.values()))


def onela_generate(model, input_ids: torch.Tensor, *, num_beams: int, max_new_tokens: int,
                   attention_mask: torch.Tensor | None = None, attention: str = "auto", cuda_graphs: bool = True,
                   allow_untested_transformers: bool = False, return_cache: bool = False, **generate_kwargs):
    """`model.generate(input_ids, num_beams=num_beams, max_new_tokens=max_new_tokens, do_sample=False, ...)` with
    the GDN decode through OneLA, the prompt prefilled once per request and its KV shared by the request's beams
    (module docstring). Returns what generate returns (and the `OneLABeamCache` too with `return_cache=True`).
    `cuda_graphs`: from the second search of a shape on, its decode calls replay CUDA graphs (module docstring);
    False runs every call eagerly.

    Example (CPU: set TRITON_INTERPRET=1 before anything imports triton)::

        from transformers import Qwen3_5ForCausalLM
        from kernels.onela.transformers import onela_generate
        model = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()
        out = onela_generate(model, prompts, num_beams=256, max_new_tokens=4, num_return_sequences=256,
                             early_stopping=False, length_penalty=0.0, return_dict_in_generate=True,
                             output_scores=True)
        out.sequences, out.sequences_scores          # as model.generate(..., num_beams=256) returns them
    """
    check_transformers(allow_untested_transformers)
    for name, why in REFUSED_KWARGS.items():
        if name in generate_kwargs and generate_kwargs[name] not in HARMLESS.get(name, (None,)):
            raise ValueError(f"kernels.onela.transformers: {name}={generate_kwargs[name]!r} is not covered: {why}")
    generate_kwargs = {k: v for k, v in generate_kwargs.items() if k not in REFUSED_KWARGS}
    gc = generate_kwargs.get("generation_config")
    if gc is not None and getattr(gc, "do_sample", False):
        raise ValueError("kernels.onela.transformers: generation_config.do_sample=True is not covered: sampling")
    if not isinstance(num_beams, int) or isinstance(num_beams, bool) or num_beams < 2:
        raise ValueError(f"kernels.onela.transformers: num_beams must be an int >= 2 (beam search), got {num_beams!r}")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 2:
        raise ValueError(f"kernels.onela.transformers: max_new_tokens must be an int >= 2 (at least one decode "
                         f"call after the prefill), got {max_new_tokens!r}")
    R, L = check_prompts(input_ids, attention_mask)
    if input_ids.device != model.lm_head.weight.device:
        raise ValueError(f"kernels.onela.transformers: input_ids on {input_ids.device}, the model on "
                         f"{model.lm_head.weight.device}")
    if model.lm_head.weight.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"kernels.onela.transformers: device {model.lm_head.weight.device} needs "
                         "TRITON_INTERPRET=1 (set before triton is imported) for the OneLA kernels")
    cache = getattr(model, CACHE_ATTR, None)
    if cache is None or cache.shape != (R, num_beams, max_new_tokens - 1, L) or cache.attention != attention:
        release(model)                                  # one shape's buffers at a time
        cache = OneLABeamCache(model, R, num_beams, max_new_tokens - 1, L, attention=attention)
        setattr(model, CACHE_ATTR, cache)
    cache.begin(cuda_graphs)
    had_own = "forward" in vars(model)                 # an instance-level forward (e.g. a hook's) is restored too
    original = model.forward
    model.forward = functools.wraps(original)(functools.partial(cache.forward, original))
    try:
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 num_beams=num_beams, max_new_tokens=max_new_tokens, do_sample=False,
                                 use_cache=True, **generate_kwargs)
    finally:
        if had_own:
            model.forward = original
        else:
            del model.forward                           # back to the class's forward
    return (out, cache) if return_cache else out


def release(model) -> None:
    """Drop the OneLA cache `onela_generate` keeps on `model` (its state buffers and CUDA graphs)."""
    if getattr(model, CACHE_ATTR, None) is not None:
        setattr(model, CACHE_ATTR, None)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
