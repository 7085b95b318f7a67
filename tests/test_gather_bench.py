"""tools.gather_bench's deep-step kernel under the interpreter: every visit order and load mode sums the same
ancestral rows per beam, and the run mode loads only the rows its count says."""
import pytest
import torch

from artifact.ancestry import build
from artifact.workload import make_workload
from tools.gather_bench import gather_runs, rows_loaded, tree_order


def _reference(store, table, step):
    R, W = table.shape[:2]
    out = torch.zeros(R, W, store.shape[2], store.shape[4])
    for j in range(step):
        slots = table[:, :, j].long()
        out += torch.stack([store[j, r][:, slots[r]].transpose(0, 1) for r in range(R)]).float()
    return out


@pytest.mark.parametrize("lineage, R, W, bb", [("beam", 2, 16, 8), ("model", 1, 512, 64)])
def test_gather_runs_sums_each_beams_rows_in_every_order_and_mode(lineage, R, W, bb):
    H, K, step = 2, 16, 6
    wl = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage=lineage, seed=0, device="cpu", prompt_len=0)
    table = build(wl.parents)[step].contiguous()
    g = torch.Generator().manual_seed(1)
    store = torch.randn(step, R, H, W, K, generator=g).to(torch.bfloat16)
    want = _reference(store, table, step)
    tree = tree_order(table, step)
    assert sorted(tree[0].tolist()) == list(range(W))
    chains = [tuple(table[0, b, :step].tolist()) for b in tree[0].tolist()]
    assert chains == sorted(chains)                     # lexicographic: shared ancestors are adjacent
    first = None
    for order in (torch.arange(W, dtype=torch.int32).expand(R, W).contiguous(), tree):
        for runs in (0, 1, 2):
            o = torch.full((R, W, H, K), float("nan"), dtype=torch.bfloat16)
            gather_runs[(W // bb, R * H)](store.view(torch.int32), table, order, o.view(torch.int32), R, W, H,
                                          step + 1, step, BB=bb, KW=K // 2, RUNS=runs, STAGES=0)
            torch.testing.assert_close(o.float(), want, rtol=2 ** -7, atol=0)     # one bf16 unit of the sum
            first = o if first is None else first
            assert torch.equal(o, first)            # the same rows in the same depth order: bit for bit
    assert rows_loaded(table, tree, step, bb, runs=0) == R * W * step
    assert rows_loaded(table, tree, step, bb, runs=1) < rows_loaded(table, tree, step, bb, runs=0)


_COMPILE_LANES = """
import re, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from tools.compile_report import _cuobjdump
from tools.gather_bench import gather_lanes
const = {"BB": 64, "KW": 64, "NW": 4}
names = gather_lanes.arg_names
sig = {a: "constexpr" if a in const else ("*i32" if a.endswith("_ptr") else "i32") for a in names}
# as the launcher specialises the tool's launch: 16-byte aligned tensors, W = 512 and H = 16
attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(names) if a.endswith("_ptr") or a in ("W", "H")}
ck = triton.compile(GluonASTSource(gather_lanes, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": 4})
print("STACK", re.search(r"STACK:(\\d+)", _cuobjdump(ck.asm["cubin"], "--dump-resource-usage")).group(1))
print("LDG.E.128" in _cuobjdump(ck.asm["cubin"], "-sass"))
"""


def test_gather_lanes_compiles_for_hopper_without_spills(sm90_compile):
    """The Gluon mode has no interpreter: compiled for sm_90a here, its rows read as 16-byte loads and nothing
    spilled. Its sums are checked against the plain mode's on the GPU by the tool itself."""
    assert sm90_compile(["-c", _COMPILE_LANES], timeout=300).split() == ["STACK", "0", "True"]


def test_tree_order_step_keeps_the_chains_order_step_by_step():
    """The device order, one sort per step from step 0's identity, is the host's sort of the ancestry rows."""
    from tools.gather_bench import tree_order_step
    R, W, step = 2, 16, 7
    wl = make_workload("qwen3_5_0_8b", R, W, step + 1, lineage="beam", seed=0, device="cpu", prompt_len=0)
    rank = torch.arange(W, dtype=torch.int32).expand(R, W).contiguous()
    order, nxt = torch.empty_like(rank), torch.empty_like(rank)
    tables = build(wl.parents)
    for t in range(1, step + 1):
        tree_order_step[(R,)](wl.parents[t].contiguous(), rank, order, nxt, W=W)
        rank, nxt = nxt, rank
        assert torch.equal(order, tree_order(tables[t].contiguous(), t)), t
        assert torch.equal(torch.gather(rank, 1, order.long()), torch.arange(W, dtype=torch.int32).expand(R, W))
