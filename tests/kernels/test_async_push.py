"""The `async_push` knob of add_rmsnorm `pushhybrid` and attn_res `gramhybrid` (session 11), and the
fp32 small plan of kda_decode `persistmix` (fp32_small_tpr / fp32_small_warps), checked in the PTX
compiled on the CPU.

- async_push: a cluster plan's pushes are st.async completing bytes on the receiver's mbarrier, each
  CTA waits on its own mbarrier (mbarrier.try_wait), and the only cluster arrive is the relaxed one
  that orders the mbarrier inits before the pushes: no release arrive (whose MEMBAR kda's profile
  showed at 10-14% of the samples), no st.shared::cluster pushes. The same check on the point without
  the knob (the incumbent before session 11) must fail: the test can fail.
- persistmix's fp32 small plan: with its own shape the fp32 compile runs an F32_ fused kernel at
  fp32_small_warps * 32 threads, the bf16 compile the shared small plan at warps * 32; without the
  knobs no F32_ kernel exists.
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, compiled_ptx, family_candidates, ptx_entries_by_name, template_params

ADD_RMSNORM_SYNC = "61c9e83c97e4"        # pushhybrid promoted in session 8: st.shared::cluster + cluster barrier
ATTN_RES_SYNC = "876aac5846f7"           # gramhybrid promoted in session 8, likewise
KDA_SHARED_SMALL = "10b2b2eb35e9"        # persistmix promoted in session 10: one small plan for both dtypes


_params = template_params


def _with(op: str, family: str, knob: str) -> list[str]:
    return [c for c in family_candidates(op, family) if _params(op, c).get(knob)]


def _own_fp32_small() -> list[str]:
    """persistmix points whose fp32 small plan has its own shape (an F32_ kernel)."""
    return [c for c in family_candidates("kda_decode", "persistmix")
            if _params("kda_decode", c).get("fp32_small_tpr", 8) != _params("kda_decode", c)["threads_per_row"]]


def _entries(op: str, cid: str, tmp_path, **static) -> dict[str, str]:
    """PTX entry name -> body, TP8."""
    return ptx_entries_by_name(compiled_ptx(ROOT / "kernels_generated" / op / cid / "kernel.py", tmp_path, **static))


def _async_push_shape(body: str) -> bool:
    return (re.findall(r"barrier\.cluster\.arrive[.\w]*", body) == ["barrier.cluster.arrive.relaxed"]
            and len(re.findall(r"barrier\.cluster\.wait", body)) == 1
            and "st.async.shared::cluster.mbarrier::complete_tx::bytes" in body
            and "mbarrier.try_wait" in body and "st.shared::cluster" not in body)


def _cluster_entries(entries: dict[str, str], marker: str) -> list[str]:
    """The bodies of the entries named with `marker` that run as a cluster (map shared memory)."""
    return [b for n, b in entries.items() if marker in n and "mapa" in b]


def test_the_knobs_have_committed_points():
    assert _with("add_rmsnorm", "pushhybrid", "async_push") and _with("attn_res", "gramhybrid", "async_push")
    assert _own_fp32_small()


@pytest.mark.parametrize("cid", _with("add_rmsnorm", "pushhybrid", "async_push"))
def test_add_rmsnorm_cluster_plans_push_asynchronously(cid, tmp_path):
    bodies = _cluster_entries(_entries("add_rmsnorm", cid, tmp_path), "AddRMSNorm_cs")
    assert bodies
    assert all(_async_push_shape(b) for b in bodies)


@pytest.mark.parametrize("shape", ["nb4", "nb8"])          # one Gram round (nb4), two rounds (nb8)
@pytest.mark.parametrize("cid", _with("attn_res", "gramhybrid", "async_push"))
def test_attn_res_pushed_plans_push_asynchronously(cid, shape, tmp_path):
    bodies = _cluster_entries(_entries("attn_res", cid, tmp_path, shape=shape), "AttnResPush")
    assert bodies
    for b in bodies:
        assert _async_push_shape(b)
    if shape == "nb8" and _params("attn_res", cid)["r1_max_nb"] < 8:
        assert any(len(re.findall(r"mbarrier\.try_wait", b)) >= 2 for b in bodies)   # a wait per round


@pytest.mark.parametrize("op,cid,marker,static", [
    ("add_rmsnorm", ADD_RMSNORM_SYNC, "AddRMSNorm_cs", {}),
    ("attn_res", ATTN_RES_SYNC, "AttnResPush", {"shape": "nb8"}),
])
def test_the_check_fails_without_the_knob(op, cid, marker, static, tmp_path):
    assert not _params(op, cid).get("async_push")
    bodies = _cluster_entries(_entries(op, cid, tmp_path, **static), marker)
    assert bodies and not any(_async_push_shape(b) for b in bodies)


def _threads(body: str) -> int:
    return int(re.search(r"\.reqntid (\d+)", body).group(1))


@pytest.mark.parametrize("cid", _own_fp32_small())
def test_kda_fp32_small_plan_has_its_own_shape(cid, tmp_path):
    p = _params("kda_decode", cid)
    fp32 = _entries("kda_decode", cid, tmp_path, state_dtype="fp32")
    f32 = [b for n, b in fp32.items() if "F32_KdaDecode" in n]
    assert len(f32) == 1 and _threads(f32[0]) == p["fp32_small_warps"] * 32
    bf16 = _entries("kda_decode", cid, tmp_path, state_dtype="bf16")
    assert not any("F32_" in n for n in bf16)
    small = [b for n, b in bf16.items() if re.search(r"_kKdaDecode", n)]
    assert len(small) == 1 and _threads(small[0]) == p["warps"] * 32


def test_without_the_knobs_no_f32_kernel(tmp_path):
    assert "fp32_small_tpr" not in _params("kda_decode", KDA_SHARED_SMALL)
    assert not any("F32_" in n for n in _entries("kda_decode", KDA_SHARED_SMALL, tmp_path, state_dtype="fp32"))
