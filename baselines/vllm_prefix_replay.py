"""vLLM prefix-cache replay: every beam is an independent request that replays, each step, its prompt tail and its
own generated tokens from the request's last prompt-block checkpoint (paper §2.3, docs/design.md §4).

This is not ReplaySSM. No released vLLM has a GDN ReplaySSM kernel: vLLM 0.33 ships ReplaySSM for Mamba2 only
(`replayssm_config.py` knows `mamba2_output_only`). What vLLM does run for a GDN request with a prefix-cache hit
is a chunked prefill over the uncached remainder, which is what this path runs; the paper's ReplaySSM kernel, as
released for GDN, is SGLang's (baselines/sglang_replayssm.py). Figures and REPORT show this path beside the
paper's vLLM ReplaySSM numbers, never paired with them.

Kernels, from the vllm==0.33.0 wheel, unmodified, called the way vLLM's GDN layer runs the uncached remainder
of a request with a prefix-cache hit (`qwen_gdn_linear_attn.py`, "2.3: Process the remaining part"):
  1. `vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv.fused_post_conv_prep` on the
     packed rows [q | k | v] of every token of every sequence plus the raw gate inputs a, b (it splits the rows,
     L2-normalises q and k with x / sqrt(sum x^2 + 1e-6), forms g = -exp(A_log)·softplus(a + dt_bias) and
     beta = sigmoid(b)); with A_log = dt_bias = 0 this path passes a = log(expm1(-g)), b = logit(beta)
     (`_common.gates_to_logits`), which reproduces the workload's gates;
  2. `vllm.third_party.flash_linear_attention.ops.chunk.chunk_gated_delta_rule` on the varlen batch
     (cu_seqlens, scale = K^-0.5, use_qk_l2norm_in_kernel=False as vLLM calls it after step 1), with
     `chunk_indices` / `chunk_offsets` precomputed on the host as vLLM's metadata builder does (its
     `prepare_chunk_indices` syncs with the host, which a CUDA graph cannot contain), and the initial states
     gathered from the checkpoint by index, as vLLM gathers `ssm_state[prefill_state_indices]`.

Sequences and slots: at step t, beam b of request r is sequence n = r·W + b of length L_tail + t + 1: the
request's prompt tail (the tokens after the last completed prompt block), then the tokens its ancestors
generated at steps 0..t-1, then its own current token. Its initial state is request r's checkpoint, copied into
sequence n's initial-state row every step (the chunk kernel reads one contiguous [HV, V, K] state per
sequence, so, like vLLM, every beam loads its own copy of the checkpoint). Its output o_t is the chunk
kernel's output at the sequence's last token. No per-beam state persists between steps: only the checkpoint
(kept by reference, `reset`'s s_ctx) and the token inputs. vLLM's prefill also returns each sequence's final
state and stores it in the request's slot; a beam's request ends after this step, so this path asks the
kernel for no final state (`output_final_state=False`) and keeps none (that only makes this baseline cheaper).

Beam-state maintenance, paid every step with index ops of static shapes (capture-safe): each step's token row
[q | k | v] and gate inputs are appended to a token store (rows: R·L_tail prompt-tail rows, then N = R·W rows
per step); an index table [N, L_tail + T] of store rows, ping-ponged between two buffers, is gathered along
`parents` (child n's first L_tail + t entries are its parent's) and gets the beam's own row; then the
sequence rows are gathered from the store (`index_select`) into the varlen batch, and the checkpoint into the
N initial-state rows. vLLM's scheduler would classify a one-token remainder (t = 0 with no prompt tail) as a
decode and run its recurrent decode kernel; this path runs every step through the chunk (prefill) path.

A new prompt-tail length re-plans the host-side metadata (`plan`) and reallocates the token store: the first
`reset` with a given tail length must run eagerly (the warm-up before a capture does). `fused_post_conv_prep`
addresses token rows with int32 offsets (row x (2·HK·K + HV·V)), so a batch of 2^31 elements or more is split
into the fewest sub-batches of whole sequences that fit -- as vLLM's scheduler splits a batch over its token
budget, but only as far as the kernel needs, which favours this baseline. (The full model's 1024 beams x 449
tokens with a 448-token prompt tail need the split: in one call the offsets overflow into an illegal memory
access.) Not natively
supported: R·W·HV > 65535 (chunk_gated_delta_rule_fwd_h puts sequences x heads on grid y) or more than
65535 chunks in a step's batch (chunk_fwd_o's grid y); K > 256 (the chunk kernel asserts K <= 256).
"""
from __future__ import annotations

import torch

from artifact.cost import TokenReplay
from artifact.limits import grid_reason, memory_reason
from artifact.paths import Stepper, StepperPath
from baselines import _common, _load
from baselines.vllm_fullstate import vllm_reason

PACK_SPEC = {
    "wheel": "vllm==0.33.0",
    "modules": [
        "vllm.third_party.flash_linear_attention.ops.chunk",
        "vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv",
        "vllm.platforms.cuda",
        "vllm.platforms.cpu",
        "vllm.third_party.pynvml",
    ],
    "follow_lazy": ["vllm.third_party.flash_linear_attention"],
    "stub_packages": ["vllm.third_party.flash_linear_attention.ops"],
    "extension_stubs": ["vllm._C_stable_libtorch"],
    "placeholders": ["regex", "psutil", "amdsmi"],
    "deps": ["packaging==26.4"],
}
CHUNK_MODULE = "vllm.third_party.flash_linear_attention.ops.chunk"
PREP_MODULE = "vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv"
FLA_CHUNK_SIZE = 64          # vllm.third_party.flash_linear_attention.ops.utils.FLA_CHUNK_SIZE


def kernel():
    return _load.load(PACK_SPEC, CHUNK_MODULE).chunk_gated_delta_rule


def prep_kernel():
    return _load.load(PACK_SPEC, PREP_MODULE).fused_post_conv_prep


def chunk_metadata(n_seq: int, seq_len: int, device) -> dict[str, torch.Tensor]:
    """vLLM's varlen metadata for n_seq sequences of seq_len tokens each, built on the host like
    `GDNAttentionMetadataBuilder._build_chunk_metadata` (same values as fla's prepare_chunk_indices /
    prepare_chunk_offsets, dtypes included): cu_seqlens [n+1] int32; chunk_indices [n_chunks, 2] int32
    (sequence, chunk within it); chunk_offsets [n+1] int64 (first chunk of each sequence); last [n] int64 (row
    of each sequence's last token)."""
    per = -(-seq_len // FLA_CHUNK_SIZE)
    seq = torch.arange(n_seq + 1, dtype=torch.int32)
    cu = seq * seq_len
    idx = torch.stack([torch.arange(n_seq, dtype=torch.int32).repeat_interleave(per),
                       torch.arange(per, dtype=torch.int32).repeat(n_seq)], 1)
    return {"cu_seqlens": cu.to(device), "chunk_indices": idx.to(device),
            "chunk_offsets": (seq.long() * per).to(device),
            "last": (cu[1:].long() - 1).to(device)}


INT32_ELEMS = 2 ** 31 - 1


def sub_batch_size(n_seq: int, max_seq_len: int, row_elems: int) -> int:
    """Sequences per kernel call so that no token row offset (token x row_elems) reaches 2^31 in
    fused_post_conv_prep; n_seq when one call fits."""
    fit = INT32_ELEMS // (max_seq_len * row_elems)
    if fit < 1:
        raise ValueError(f"one sequence of {max_seq_len} tokens x {row_elems} elements exceeds int32 offsets")
    return min(n_seq, fit)


def _tail_len(tail) -> int:
    return 0 if tail is None else int(tail["k"].shape[0])


class VllmPrefixReplayStepper(Stepper):
    def __init__(self, geometry, R, W, T, device):
        super().__init__(geometry, R, W, T, device)
        self.prep, self.chunk = prep_kernel(), kernel()
        g, dev = geometry, self.device
        self.N = N = R * W
        self.qkv_dim = 2 * g.hk * g.k + g.hv * g.v
        self.scale = g.k ** -0.5
        self.zeros_hv = torch.zeros(g.hv, dtype=torch.float32, device=dev)       # A_log = dt_bias = 0
        self.request_of_beam = torch.arange(R, device=dev).repeat_interleave(W)   # checkpoint of each sequence
        self.row_base = (torch.arange(R, device=dev) * W)[:, None]
        self.h0 = torch.empty(N, g.hv, g.v, g.k, dtype=torch.float32, device=dev)
        self.dtype = torch.bfloat16
        self.replay_tail_len = None
        self.plan(0)

    # ---- host-side planning (never inside a capture) ----
    def plan(self, tail_len: int, dtype=None) -> None:
        """Allocate the token store and build every step's varlen metadata for a prompt tail of tail_len tokens."""
        R, W, T, N, dev = self.R, self.W, self.T, self.N, self.device
        self.dtype = dtype or self.dtype
        self.replay_tail_len = Lt = int(tail_len)
        rows = R * Lt + T * N
        self.x = torch.zeros(rows, self.qkv_dim, dtype=self.dtype, device=dev)    # packed [q | k | v] rows
        self.a = torch.zeros(rows, self.geometry.hv, dtype=torch.float32, device=dev)
        self.b = torch.zeros(rows, self.geometry.hv, dtype=torch.float32, device=dev)
        self.dec0 = R * Lt                                                          # first decode row
        # sequence tables: [2, N, Lt + T] store rows; the prompt-tail part is fixed per request
        self.seq = torch.zeros(2, N, Lt + T, dtype=torch.long, device=dev)
        tail_rows = (torch.arange(R, device=dev)[:, None] * Lt + torch.arange(Lt, device=dev)).repeat_interleave(W, 0)
        self.seq[:, :, :Lt] = tail_rows
        self.own = [self.dec0 + t * N + torch.arange(N, device=dev) for t in range(T)]
        self.sub = sub_batch_size(N, Lt + T, self.qkv_dim)
        self.batches = [(s0, min(N, s0 + self.sub)) for s0 in range(0, N, self.sub)]
        sizes = {s1 - s0 for s0, s1 in self.batches}
        self.meta = [{n: chunk_metadata(n, Lt + t + 1, dev) for n in sizes} for t in range(T)]

    # ---- Stepper ----
    def reset(self, s_ctx, tail=None):
        """s_ctx [R, HV, V, K]: the checkpoint at the last completed prompt block; tail: the prompt tokens after
        it ({"q", "k": [L, R, HK, K], "v": [L, R, HV, V], "g", "beta": [L, R, HV]}, or None)."""
        geo, R = self.geometry, self.R
        Lt = _tail_len(tail)
        if tuple(s_ctx.shape) != (R, geo.hv, geo.v, geo.k):
            raise ValueError(f"s_ctx has shape {tuple(s_ctx.shape)}, expected {(R, geo.hv, geo.v, geo.k)}")
        if Lt:
            expect = {"q": (Lt, R, geo.hk, geo.k), "k": (Lt, R, geo.hk, geo.k), "v": (Lt, R, geo.hv, geo.v),
                      "g": (Lt, R, geo.hv), "beta": (Lt, R, geo.hv)}
            for name, shape in expect.items():
                if tuple(tail[name].shape) != shape:
                    raise ValueError(f"tail[{name!r}] has shape {tuple(tail[name].shape)}, expected {shape}")
        dtype = tail["q"].dtype if Lt else self.dtype
        if Lt != self.replay_tail_len or dtype != self.dtype:
            self.plan(Lt, dtype)
        self.s_ctx = s_ctx
        if Lt:       # request r's tail token p is store row r * Lt + p
            x = self.x[:self.dec0].view(R, Lt, self.qkv_dim)
            torch.cat([tail["q"].transpose(0, 1).reshape(R, Lt, -1), tail["k"].transpose(0, 1).reshape(R, Lt, -1),
                       tail["v"].transpose(0, 1).reshape(R, Lt, -1)], dim=2, out=x)
            _common.gates_to_logits(tail["g"].float().transpose(0, 1), tail["beta"].float().transpose(0, 1),
                                    self.a[:self.dec0].view(R, Lt, geo.hv), self.b[:self.dec0].view(R, Lt, geo.hv))

    def step(self, t, q, k, v, g, beta, parents, out):
        geo, N = self.geometry, self.N
        if q.dtype != self.dtype:
            if t or self.replay_tail_len:
                raise ValueError(f"inputs are {q.dtype} but this decode was planned for {self.dtype}")
            self.plan(0, q.dtype)        # eager: the first decode of a new input dtype
        Lt = self.replay_tail_len
        n_tok = Lt + t + 1
        # append this step's token rows and gate inputs to the store
        r0 = self.dec0 + t * N
        torch.cat([q.reshape(N, -1), k.reshape(N, -1), v.reshape(N, -1)], dim=1, out=self.x[r0:r0 + N])
        _common.gates_to_logits(g.reshape(N, geo.hv), beta.reshape(N, geo.hv), self.a[r0:r0 + N],
                                self.b[r0:r0 + N])
        # each beam's sequence: its parent's (prompt tail + ancestors' tokens), then its own token
        cur = self.seq[t % 2]
        if t > 0:
            parent = (parents.long() + self.row_base).reshape(N)
            cur[:, :Lt + t] = self.seq[(t - 1) % 2][:, :Lt + t].index_select(0, parent)
        cur[:, Lt + t] = self.own[t]
        # every beam loads its request's checkpoint as its sequence's initial state
        torch.index_select(self.s_ctx, 0, self.request_of_beam, out=self.h0)
        out_rows = out.view(N, geo.hv, geo.v)
        for s0, s1 in self.batches:          # one batch unless int32 row offsets force a split (docstring)
            meta = self.meta[t][s1 - s0]
            rows = cur[s0:s1, :n_tok].reshape(-1)
            xs = self.x.index_select(0, rows)
            qs, ks, vs, gs, bs = self.prep(xs, self.a.index_select(0, rows), self.b.index_select(0, rows),
                                           self.zeros_hv, self.zeros_hv, num_k_heads=geo.hk, head_k_dim=geo.k,
                                           head_v_dim=geo.v, apply_l2norm=True, output_g_exp=False)
            o, _ = self.chunk(qs[None], ks[None], vs[None], gs[None], bs[None], scale=self.scale,
                              initial_state=self.h0[s0:s1], output_final_state=False,
                              cu_seqlens=meta["cu_seqlens"], chunk_indices=meta["chunk_indices"],
                              chunk_offsets=meta["chunk_offsets"], use_qk_l2norm_in_kernel=False)
            out_rows[s0:s1].copy_(o[0].index_select(0, meta["last"]))
        return out

    def persistent_bytes(self):
        """Checkpoint (one state per request) + token store + sequence tables: what lives across steps."""
        tensors = (self.x, self.a, self.b, self.seq)
        return self.R * self.geometry.state_bytes + sum(x.numel() * x.element_size() for x in tensors)

    def workspace_bytes(self):
        """The per-step initial-state rows (one checkpoint copy per beam), rewritten every step."""
        return self.h0.numel() * self.h0.element_size()

    def written_bytes(self):
        """Per step: N checkpoint copies into the initial-state rows plus N appended token rows; the tail once."""
        row = self.x.element_size() * self.qkv_dim + 8 * self.geometry.hv
        return (self.T * self.N * (self.geometry.state_bytes + row)
                + self.R * self.replay_tail_len * row)


class VllmPrefixReplayPath(StepperPath):
    # vLLM's chunked prefill path rounds q-hat / k-hat to bf16 (fused_post_conv_prep) and keeps the intra-chunk
    # WY factors and chunk states in bf16: at R=4 W=512 on the Qwen geometry its max error against FP32
    # FullState is 5.0-5.6e-4 (results/recurrent_path.csv), just over the paper's 4.88e-4. Its own gate is
    # 1e-3 (artifact.measure.path_tolerance; docs/design.md §2); a row's `tolerance` is the gate applied and its
    # reason names the run's. The primary numbers (plots.data) count only its rows within 4.88e-4.
    gate_tolerance = 1e-3
    name = "vllm_prefix_replay"
    stepper_cls = VllmPrefixReplayStepper
    algorithm = TokenReplay()
    replays_prompt_tail = True
    replay_tail_len = 0      # the operator suite decodes from s_ctx with no prompt tail (reset(..., tail=None))

    def supports(self, geometry, shape, device):
        why = _load.unavailable_reason(PACK_SPEC, [CHUNK_MODULE, PREP_MODULE]) or vllm_reason(geometry, shape, device)
        if why:
            return why
        if geometry.k > 256:
            return f"not natively supported: K={geometry.k} > 256 (chunk_gated_delta_rule_fwd_h asserts K <= 256)"
        if geometry.k != geometry.v:
            # _fused_post_conv_kernel binds mask_2d to [BLOCK_T, BK] in its q/k branch and [BLOCK_T, BV] in its
            # v branch; Triton rejects a variable whose type differs between the branches of an `if`, so the
            # kernel does not compile for K != V: a shape it cannot build is a skip, not a failure.
            return (f"not natively supported: K={geometry.k} != V={geometry.v} (fused_post_conv_prep's kernel "
                    "types mask_2d as [BLOCK_T, BK] in one branch and [BLOCK_T, BV] in the other; Triton "
                    "refuses to compile it unless BK == BV)")
        n, T = shape.R * shape.W, shape.T
        tokens = n * (self.replay_tail_len + T)
        n_chunks = n * -(-(self.replay_tail_len + T) // FLA_CHUNK_SIZE)
        g = geometry
        work = (tokens * (2 * (2 * g.hk * g.k + g.hv * g.v) + 16 * g.hv)          # gathered rows + prep outputs
                + n_chunks * g.hv * g.v * g.k * 2 + tokens * g.hv * g.v * 4)          # per-chunk states, v_new, o
        return (grid_reason(n * g.hv, "R*W*HV sequence-heads (grid y of chunk_gated_delta_rule_fwd_h)")
                or grid_reason(n_chunks, "R*W*ceil((L_tail+T)/64) chunks (grid y of chunk_fwd_o)")
                or memory_reason(shape.R * g.state_bytes + n * g.state_bytes + work,
                                         device, "the prefix-cache replay batch"))
