"""The attn_res rowmix family at a block count other than 8: compile(tp, options, shape="nb3")
builds the kernel for NB = 3 with `blocks` taken at a dynamic batch stride (the decoder's
[B, 3, H] view of its [B, 8, H] buffer), for sm_90a and sm_103a. The TVM-FFI wrapper the
compile emits is what checks a call's tensors: its signature must read blocks [n0, 3, 7168]
and its stride check must ask only divisibility by 8 (16 bytes), not the compact 3*7168.
On a GPU (-m gpu): the kernels on the strided view and on compact blocks against the reference."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from kernel_helpers import ROOT, check_attn_res_on_strided_blocks, load_module

PROBE = r"""
import importlib.util, json, os, sys
os.environ["CUTE_DSL_ARCH"] = sys.argv[1]
spec = importlib.util.spec_from_file_location("ar_kernel", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
out = {}
for shape in ("nb3", ""):
    ir = str(mod.compile(8, "--enable-tvm-ffi", shape=shape).ir_module)
    out[shape] = {"sig3": "mB: Tensor([n0, 3, 7168], bfloat16)" in ir,
                  "sig8": "mB: Tensor([n0, 8, 7168], bfloat16)" in ir,
                  "stride_check": "mB.strides" in ir and "expected to be divisible by 8" in ir}
try:
    mod.compile(8, "--enable-tvm-ffi", shape="nb9")
    out["nb9"] = "compiled"
except ValueError as exc:
    out["nb9"] = str(exc)
print(json.dumps(out))
"""


def _kernel_py() -> str:
    metas = sorted((ROOT / "kernels_generated/attn_res").glob("*/candidate.json"))
    for m in metas:
        if (json.loads(m.read_text())["provenance"].get("template") or {}).get("family") == "rowmix":
            return str(m.parent / "kernel.py")
    pytest.skip("no rowmix candidate rendered")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_nb3_compiles_with_a_strided_blocks_tensor(arch):
    res = subprocess.run([sys.executable, "-c", PROBE, arch, _kernel_py()], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["nb3"] == {"sig3": True, "sig8": False, "stride_check": True}
    assert out[""] == {"sig3": False, "sig8": True, "stride_check": True}      # "" = nb8, the default
    assert "unknown attn_res shape 'nb9'" in out["nb9"] and "nb1, nb2" in out["nb9"]


def _rowmix_candidates() -> list[str]:
    metas = sorted((ROOT / "kernels_generated/attn_res").glob("*/candidate.json"))
    return [m.parent.name for m in metas
            if (json.loads(m.read_text())["provenance"].get("template") or {}).get("family") == "rowmix"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _rowmix_candidates())
def test_gpu_strided_blocks_match_the_reference(cid):
    """On the GPU: each nb kernel on the decoder's strided view (rows nb..7 of the buffer NaN, so
    a read past nb shows) and on a compact tensor, against the reference (harness.compare)."""
    mod = load_module(ROOT / "kernels_generated/attn_res" / cid / "kernel.py", f"attn_res_{cid}")
    check_attn_res_on_strided_blocks(mod, cid, nbs=(1, 3, 5, 8), batches=(5,), seed=lambda nb, batch: nb)
