"""MXFP4 helpers: every e2m1 code, nibble order, e8m0 scales, encode/decode round trip."""
from __future__ import annotations

import torch

from reference_impls import mxfp4

import refimpl_naive as naive


def test_all_16_codes() -> None:
    codes = torch.arange(16)
    packed = mxfp4.pack_nibbles(codes.repeat(2)[None])          # 32 values: one scale group
    for scale_byte in (127, 120, 130):
        got = mxfp4.decode(packed, torch.tensor([[scale_byte]], dtype=torch.uint8))[0]
        for c in range(16):
            want = naive.e2m1_value(c) * 2.0 ** (scale_byte - 127)
            assert got[c].item() == want and got[16 + c].item() == want, (c, scale_byte)
    # the OCP magnitudes, and code 8 is negative zero
    assert [naive.e2m1_value(c) for c in range(8)] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert torch.signbit(mxfp4.e2m1_table()[8])


def test_low_nibble_first() -> None:
    packed = torch.full((1, 16), 0x72, dtype=torch.uint8)      # low nibble 2 (1.0), high 7 (6.0)
    got = mxfp4.decode(packed, torch.tensor([[127]], dtype=torch.uint8))[0]
    assert got[0].item() == 1.0 and got[1].item() == 6.0


def test_e8m0_nan_and_range() -> None:
    s = mxfp4.e8m0_to_float(torch.tensor([0, 127, 254, 255], dtype=torch.uint8))
    assert s[0].item() == 2.0 ** -127 and s[1].item() == 1.0 and s[2].item() == 2.0 ** 127
    assert torch.isnan(s[3])


def test_encode_round_trip() -> None:
    g = torch.Generator().manual_seed(0)
    packed, scale = mxfp4.random_weights((5, 3), 64, g, scale_exp=-3)
    vals = mxfp4.decode(packed, scale)
    p2, s2 = mxfp4.encode(vals)
    assert torch.equal(mxfp4.decode(p2, s2), vals)              # representable values survive
    x = torch.randn(4, 64, generator=g)
    err = (mxfp4.decode(*mxfp4.encode(x)) - x).abs()
    amax = x.view(4, 2, 32).abs().amax(-1).repeat_interleave(32, -1)
    scale = torch.exp2(torch.floor(torch.log2(amax)) - 2)      # amax / scale in [4, 8)
    # rounding costs at most half the widest step (2 * scale); clamping amax/scale in (6, 8) to 6, 2 * scale
    assert (err <= 2 * scale).all()
    assert (err <= scale).float().mean() > 0.9
