"""oproj_allreduce_residual with 2 ranks through torch.distributed (gloo, 2 spawned processes)."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

H, D_RANK, B, WORLD = 7168, 768, 3, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_inputs(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(B, D_RANK, generator=g).bfloat16()
    w = (torch.randn(H, D_RANK, generator=g) / 50).bfloat16()
    res = torch.randn(B, H, generator=torch.Generator().manual_seed(7)).bfloat16()   # same on every rank
    return x, w, res


def _worker(rank: int, port: int, out_dir: str) -> None:
    from reference_impls.oproj_allreduce_residual import reference_distributed

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        out = reference_distributed(*_rank_inputs(rank))
        torch.save(out, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow          # spawns two Python processes that import torch
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")
def test_two_ranks_gloo(tmp_path) -> None:
    from reference_impls.oproj_allreduce_residual import reference_distributed, reference_ranks

    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    outs = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    ins = [_rank_inputs(r) for r in range(WORLD)]
    want = ins[0][2].double() + sum(x.double() @ w.double().t() for x, w, _ in ins)
    assert torch.equal(outs[0], outs[1])                         # every rank holds the same sum
    assert outs[0].dtype == torch.bfloat16 and outs[0].shape == (B, H)
    torch.testing.assert_close(outs[0].double(), want, rtol=8e-3, atol=1e-3)
    torch.testing.assert_close(outs[0], reference_ranks([i[0] for i in ins], [i[1] for i in ins], ins[0][2]),
                               rtol=8e-3, atol=1e-2)
    # one rank alone is not the answer (the all-reduce matters)
    assert not torch.allclose(reference_ranks([ins[0][0]], [ins[0][1]], ins[0][2]).double(), want, atol=1e-2)
    with pytest.raises(RuntimeError, match="not initialised"):
        reference_distributed(*ins[0])
