"""kda_decode: a CPU emulation of the `staged` family's new index math (8-channel conv groups over flat conv_state / conv_weight views,
conv_state shift ownership with and without a cluster) matches the reference at each human point.
The state / o part of `staged` uses `fused`'s row, lane and reduction maps, emulated by
test_kda_emulation.emulate; here the conv groups replace its slot loop and are checked on their own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point
from test_kda_emulation import emulate        # the fused family's state / o emulation (same maps)

ROOT = Path(__file__).resolve().parents[2]


D = 128
CG = 8


def _points(family: str) -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p["params"] for p in pts if p["op"] == "kda_decode" and p["family"] == family]


def conv_groups(inp: dict[str, torch.Tensor], p: dict, tp: int):
    """The staged kernel's conv: per CTA rank, thread i < NG owns 8 channels; reads come from the flat
    views at element offsets gc*3 (24 values) and gc*4 (32 values). Returns y per rank [B, h, NSLOT],
    the new conv_state and the per-channel write counts."""
    vs, warps = p["v_split"], p["warps"]
    rb = D // vs
    ng = (2 * D + rb) // CG
    assert ng <= warps * 32 and ng <= 48
    h = 96 // tp
    hdim = h * D
    bsz = inp["qkv"].shape[0]
    cs_flat = inp["conv_state"].reshape(bsz, -1)
    cw_flat = inp["conv_weight"].reshape(-1)
    cs_out = cs_flat.clone()
    writes = torch.zeros(bsz, 3 * hdim, dtype=torch.int32)
    ys = []
    for rank in range(vs):
        y = torch.empty(bsz, h, 2 * D + rb)
        for hd in range(h):
            for i in range(ng):
                seg = i // 16
                ch0 = i * CG - seg * D + (seg // 2) * (rank * rb)
                gc = seg * hdim + hd * D + ch0
                assert gc % CG == 0
                r_cs = cs_flat[:, gc * 3:gc * 3 + 24].float().view(bsz, CG, 3)
                r_w = cw_flat[gc * 4:gc * 4 + 32].float().view(CG, 4)
                r_x = inp["qkv"][:, gc:gc + CG].float()
                acc = r_cs[..., 0] * r_w[:, 0]
                acc = acc + r_cs[..., 1] * r_w[:, 1]
                acc = acc + r_cs[..., 2] * r_w[:, 2]
                acc = acc + r_x * r_w[:, 3]
                y[:, hd, i * CG:(i + 1) * CG] = acc * torch.sigmoid(acc)
                # shift: stored at once (v_split 1, or own v rows) or by the channel block's owner
                if vs == 1 or seg == 2 or ch0 // rb == rank:
                    nw = torch.stack([cs_flat[:, gc * 3:gc * 3 + 24].view(bsz, CG, 3)[..., 1],
                                      cs_flat[:, gc * 3:gc * 3 + 24].view(bsz, CG, 3)[..., 2],
                                      inp["qkv"][:, gc:gc + CG]], -1).reshape(bsz, 24)
                    cs_out[:, gc * 3:gc * 3 + 24] = nw
                    writes[:, gc:gc + CG] += 1
        ys.append(y)
    return ys, cs_out.view_as(inp["conv_state"]), writes


CASES = [(p, tp, bsz) for p in _points("staged") for tp in (8, 16) for bsz in (1, 3)]


@pytest.mark.parametrize("params,tp,bsz", CASES,
                         ids=[f"{json.dumps(c[0], sort_keys=True)}-tp{c[1]}-b{c[2]}" for c in CASES])
def test_staged_conv_groups_match_reference(params, tp, bsz):
    defn = reference_impls.get("kda_decode")
    point = Point(batch=bsz, tp=tp, state_dtype="fp32")
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(11 + bsz), "cpu")
    ref = defn.run_reference(inputs)
    ys, cs_out, writes = conv_groups(inputs, params, tp)
    assert int(writes.min()) == 1 and int(writes.max()) == 1, "every conv_state channel written exactly once"
    assert torch.equal(cs_out, ref["conv_state"])
    # y per rank against the reference conv: q, k of the head and this rank's v rows
    h, rb = 96 // tp, D // params["v_split"]
    window = torch.cat([inputs["conv_state"], inputs["qkv"][:, :, None]], -1).float()
    y_ref = torch.nn.functional.silu((window * inputs["conv_weight"].float()[None]).sum(-1)).view(bsz, 3, h, D)
    for rank, y in enumerate(ys):
        want = torch.cat([y_ref[:, 0], y_ref[:, 1], y_ref[:, 2, :, rank * rb:(rank + 1) * rb]], -1)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("params", _points("staged"), ids=lambda p: json.dumps(p, sort_keys=True))
@pytest.mark.parametrize("state_dtype", ["fp32", "bf16"])
def test_staged_state_math_matches_reference(params, state_dtype):
    """The staged kernel's state / o path is `fused`'s map at the same (v_split, TPR, warps)."""
    defn = reference_impls.get("kda_decode")
    point = Point(batch=2, tp=8, state_dtype=state_dtype)
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(5), "cpu")
    got, writes = emulate(inputs, params, 8)
    for name, cnt in writes.items():
        assert int(cnt.min()) == 1 and int(cnt.max()) == 1, name
    res = compare(defn, got, defn.run_reference(inputs), inputs)
    assert res.ok, res.summary()


def test_staged_points_exist():
    pts = _points("staged")
    assert len(pts) >= 2 and any(p["v_split"] == 1 for p in pts) and any(p["v_split"] > 1 for p in pts)
