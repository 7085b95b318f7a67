"""Large-beam search as GR runs it (paper §2.1): per request, the global top-W over W x vocab accumulated
log-probs; the survivors' parents and tokens feed the next decode call.

Beams are kept sorted by score (beam 0 is the best); ties go the way `torch.topk` breaks them. Two paths
therefore pick the same beams when their logits agree closely enough that no candidate pair swaps order --
true at fp32 for FullState vs projection replay (tested); at bf16 a near-tie may swap, so bf16 comparisons make
one decode follow the other's beams (`BeamDecoder.run(forced=...)`) and compare logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def first_beams(logits_last: torch.Tensor, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """From the last prompt position's logits [R, vocab]: tokens [R, W] (int64) and scores [R, W] (fp32)."""
    vocab = logits_last.shape[-1]
    if not 1 <= W <= vocab:
        raise ValueError(f"beam width W={W} must be in [1, vocab={vocab}]")
    scores, tokens = torch.log_softmax(logits_last.float(), dim=-1).topk(W, dim=-1, sorted=True)
    return tokens, scores


def select_beams(logits: torch.Tensor, scores: torch.Tensor):
    """One selection: logits [R, W, vocab], scores [R, W] -> (scores', parents int32, tokens int64), each [R, W]."""
    R, W, vocab = logits.shape
    cand = scores[:, :, None] + torch.log_softmax(logits.float(), dim=-1)
    top, flat = cand.view(R, W * vocab).topk(W, dim=-1, sorted=True)
    return top, torch.div(flat, vocab, rounding_mode="floor").to(torch.int32), flat % vocab


def forced_scores(logits: torch.Tensor, scores: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor):
    """Scores of a given (parents, tokens) choice, for a decode that follows another decode's beams."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = parents.long()
    return torch.gather(scores, 1, p) + logp[torch.arange(logits.shape[0], device=logits.device)[:, None], p, tokens]


@dataclass
class BeamResult:
    """One beam search: O = T + 1 output tokens per beam.

    tokens[0] come from the prefill's logits; tokens[t + 1] and parents[t + 1] from the selection after decode
    call t (parents[t + 1][b] indexes the beams of tokens[t]); parents[0] is all zeros (every first beam's
    parent is the prompt). hidden[t] is decode call t's final-normed hidden state (logits = hidden @ E^T).
    """

    tokens: torch.Tensor     # [O, R, W] int64
    parents: torch.Tensor    # [O, R, W] int32
    scores: torch.Tensor     # [R, W] fp32, final accumulated log-probs
    hidden: torch.Tensor     # [T, R, W, H]

    @property
    def T(self) -> int:
        return self.tokens.shape[0] - 1
