"""tools.replay_bench under the interpreter: the beam-major and the record-major (tree order) replays both compute
the defined sum, and the record lists hold each tile's distinct ancestral records once."""
import pytest
import torch

from artifact.ancestry import build
from artifact.workload import make_workload
from tools.gather_bench import tree_order
from tools.replay_bench import make_records, record_lists, reference, replay_beams, replay_records


@pytest.mark.parametrize("lineage, R, W, bb, ch", [("beam", 2, 64, 16, 16), ("model", 1, 512, 64, 32)])
def test_both_replays_compute_the_defined_sum(lineage, R, W, bb, ch):
    H, K, V, step = 2, 16, 32, 6
    parents = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage=lineage, seed=0, device="cpu",
                            prompt_len=0).parents
    table = build(parents)[step].contiguous()
    khat, delta, gcum, xq, xk, gb = make_records(parents, step, H, K, V, "cpu")
    want_q, want_k = reference(khat, delta, gcum, xq, xk, gb, table, step)
    # the reference against an explicit per-beam walk of one beam's chain
    b, h = W - 1, 1
    chain = sum(torch.exp(gb[0, h, b] - gcum[j, 0, h, table[0, b, j]])
                * (xq[0, b, h].float() @ khat[j, 0, h, table[0, b, j]].float()) * delta[j, 0, h, table[0, b, j]].float()
                for j in range(step))
    torch.testing.assert_close(want_q[0, b, h], chain, rtol=1e-5, atol=1e-7)
    tol = dict(rtol=0, atol=2e-5 * max(want_q.abs().max().item(), want_k.abs().max().item()))
    uq, uk = torch.full_like(want_q, float("nan")), torch.full_like(want_k, float("nan"))
    replay_beams[(W // bb, R * H)](khat, delta, gcum, xq, xk, gb, table, uq, uk, R, W, H, step + 1, step, BB=bb,
                                   K=K, V=V, STAGES=0)
    torch.testing.assert_close(uq, want_q, **tol)
    torch.testing.assert_close(uk, want_k, **tol)
    order = tree_order(table, step)
    ent, cnt = record_lists(table, order, step, bb, ch)
    assert ent.shape[1] % ch == 0 and int(cnt.max()) <= ent.shape[1]
    # each tile's entries: its distinct (depth, slot) pairs, once each
    per = torch.gather(table[:, :, :step], 1, order.long()[:, :, None].expand(R, W, step)).view(-1, bb, step)
    for i in (0, per.shape[0] - 1):
        got = {(int(d), int(s)) for d, s, _, _ in ent[i, :int(cnt[i])].tolist()}
        assert len(got) == int(cnt[i])
        assert got == {(j, int(s)) for j in range(step) for s in per[i, :, j].unique()}
    uq.fill_(float("nan"))
    uk.fill_(float("nan"))
    replay_records[(W // bb, R * H)](khat, delta, gcum, xq, xk, gb, order, ent, cnt, uq, uk, R, W, H, ent.shape[1],
                                     BB=bb, CH=ch, K=K, V=V, STAGES=0, UPCAST=True)
    torch.testing.assert_close(uq, want_q, **tol)
    torch.testing.assert_close(uk, want_k, **tol)


@pytest.mark.parametrize("lineage, R, W, bb, step", [("beam", 2, 64, 16, 6), ("beam", 1, 64, 32, 9),
                                                     ("model", 1, 512, 64, 5)])
def test_device_record_lists_are_the_host_lists(lineage, R, W, bb, step):
    """The per-step kernel writes each tile's entries and count as the host builds them, entry for entry."""
    import triton

    from tools.replay_bench import record_lists_step
    parents = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage=lineage, seed=0, device="cpu",
                            prompt_len=0).parents
    table = build(parents)[step].contiguous()
    order = tree_order(table, step)
    ent, cnt = record_lists(table, order, step, bb, 1)
    got = torch.full((R * W // bb, bb * step, 4), -1, dtype=torch.int32)
    got_cnt = torch.zeros(R * W // bb, dtype=torch.int32)
    record_lists_step[(R * W // bb,)](table, order, got, got_cnt, W, table.shape[2], step, bb * step, BB=bb,
                                      TP=triton.next_power_of_2(step))
    assert torch.equal(got_cnt, cnt)
    for i in range(len(cnt)):
        assert torch.equal(got[i, :int(cnt[i])], ent[i, :int(cnt[i])]), i
