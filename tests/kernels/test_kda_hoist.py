"""The kda_decode `hoist` and `push` knobs (session 10), checked in the PTX compiled on the CPU.

- hoist, fused plans: the step's global loads are issued before the first exp2 (the first math on a
  loaded value; at least 3/4 of them in the PTX), so the prologue waits on memory about once. Without it the H200 waited once per pass
  of the conv loop (results/h200/session10/ncu: 4 serial waits at B=1). The knob's sigmoid uses
  rcp.approx, so no IEEE reciprocal (`rcp.rn.f32`, whose slow-path branch kept loads behind it) is left.
- hoist, persistent plan: b and A_log arrive by 4-byte cp.async with the stage (two copies in the
  fill, two in the loop), not by loads whose first use stalled every tile on a DRAM trip.
- push (v_split > 1): the RMSNorm partials go by st.async + mbarrier: one relaxed cluster arrive and
  its wait (mbarrier inits before pushes), no release arrive (its MEMBAR.ALL.GPU was 10-14% of the
  B=1 samples), no DSMEM loads.
Each check is also run on a committed point without the knob, and must fail there: the test can fail.
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, compiled_ptx, family_candidates, template_params

NOT_HOISTED = "810ce54cc9d4"              # fused v4 t8 w4, neither knob
PERSIST_NOT_HOISTED = "72d7b887d7e9"      # persistmix promoted in session 9, before the knob


def _params(cid: str) -> dict:
    return template_params("kda_decode", cid)


def _with(knob: str) -> list[str]:
    return [c for c in family_candidates("kda_decode", "fused", "persistmix") if _params(c).get(knob)]


def _entries(cid: str, tmp_path) -> dict[str, str]:
    """PTX entry name -> body, fp32 state, TP8."""
    ptx = compiled_ptx(ROOT / "kernels_generated/kda_decode" / cid / "kernel.py", tmp_path, state_dtype="fp32")
    out = {}
    for e in ptx.split(".entry ")[1:]:
        name = e.split("(", 1)[0]
        kind = "persist" if "KdaPersist" in name else "mid" if "MID_KdaDecode" in name else "fused"
        out[kind] = e
    return out


def _loads_before_math(body: str) -> bool:
    """At least 3/4 of the prologue's global loads (those before the first CTA barrier) come before its
    first ex2, the first math on a loaded value. (LLVM still sinks the last partial pass's few loads
    below the gate's math: 26 of 31 loads come first at fp32 v4; without the knob 10 of 31.)"""
    first_math = body.index("ex2.approx")
    first_bar = re.search(r"\bbar\.sync|\bbarrier\.sync", body).start()
    before = len(re.findall(r"\bld\.global", body[:first_math]))
    after = len(re.findall(r"\bld\.global", body[first_math:first_bar]))
    return before >= 3 * after


def _scalar_copies(body: str) -> int:
    """4-byte cp.asyncs: the persistent kernel's b and A_log, in the fill and in the loop."""
    return len(re.findall(r"cp\.async\.ca\.shared\.global(?:\.L2::\w+)? \[[^]]*\], \[[^]]*\], 4(?:, 4)?;", body))


def _push_shape(body: str) -> bool:
    arrives = re.findall(r"barrier\.cluster\.arrive[.\w]*", body)
    return (arrives == ["barrier.cluster.arrive.relaxed"] and len(re.findall(r"barrier\.cluster\.wait", body)) == 1
            and len(re.findall(r"st\.async\.shared::cluster\.mbarrier::complete_tx::bytes", body)) == 1
            and "mbarrier.try_wait" in body and "ld.shared::cluster" not in body)


def test_the_knobs_have_committed_points():
    assert _with("hoist") and _with("push")


@pytest.mark.parametrize("cid", _with("hoist"))
def test_hoisted_fused_plans_load_everything_before_any_math(cid, tmp_path):
    entries = _entries(cid, tmp_path)
    fused = [entries[k] for k in ("fused", "mid") if k in entries]
    assert fused
    for body in fused:
        assert _loads_before_math(body)
        assert "rcp.rn.f32" not in body
    if "persist" in entries:
        body = entries["persist"]
        stages = _params(cid).get("fp32_stages", 2)                  # b and A_log: 2 copies a tile, in the
        assert _scalar_copies(body) == 2 * stages                     # fill (stages - 1 tiles) and the loop (1)
        assert "rcp.rn.f32" not in body


@pytest.mark.parametrize("cid", _with("push"))
def test_push_plans_reduce_without_a_cluster_barrier(cid, tmp_path):
    assert _push_shape(_entries(cid, tmp_path)["fused"])


def test_the_checks_fail_without_the_knobs(tmp_path):
    assert not _params(NOT_HOISTED).get("hoist") and not _params(NOT_HOISTED).get("push")
    body = _entries(NOT_HOISTED, tmp_path)["fused"]
    assert not _loads_before_math(body)
    assert "rcp.rn.f32" in body
    assert not _push_shape(body)


def test_the_persist_check_fails_without_the_knob(tmp_path):
    assert not _params(PERSIST_NOT_HOISTED).get("hoist")
    body = _entries(PERSIST_NOT_HOISTED, tmp_path)["persist"]
    assert _scalar_copies(body) == 0 and "rcp.rn.f32" in body
