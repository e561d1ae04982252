"""The attn_res clustermix family (a row split over a cluster of CS CTAs, DSMEM reductions).

CPU: a torch emulation of each human candidate's exact partition (read from the rendered module:
CS, THREADS, VEC, SV, NV) and reduction order - per thread over its vectors k in order, the 5-step
warp butterfly (offsets 16 .. 1, idle threads contribute 0), warps in order into the CTA partial,
CTA partials in rank order 0..CS-1 - against the op reference (harness.compare) at NB = 1, 3, 8;
every feasible point of the space owns each column exactly once; the nb3 compile takes the strided
blocks view and emits the cluster barriers and DSMEM loads the docstring promises.
GPU (-m gpu): each candidate on the decoder's strided view (rows past nb NaN) and on compact blocks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from kernel_helpers import (ROOT, attn_res_owner as _owner, check_attn_res_on_strided_blocks, emulate_clustermix,
                            family_candidates, load_module)

H, EPS = 7168, 1e-5
FAMILY = "clustermix"              # and clustermix_pf: the same kernel, dependents launched early


def _candidates() -> list[str]:
    return family_candidates("attn_res", FAMILY, FAMILY + "_pf")


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/attn_res" / cid / "kernel.py", f"attn_res_cm_{cid}")


def test_every_feasible_point_owns_each_column_once():
    from harness.agent.families import load_family

    fam = load_family(ROOT / "prompts/kernels/attn_res" / f"{FAMILY}.py.j2", "attn_res")
    cfgs = fam.configs()
    assert cfgs
    for c in cfgs:
        col, live = _owner(c["cs"], c["threads"], c["vec"])
        got = col[live].flatten().sort().values
        assert torch.equal(got, torch.arange(H)), c
        per_cta = col.shape[1:]
        for r in range(c["cs"]):                                        # CTA r: a contiguous H / CS slice
            cols = col[r][live[r]]
            assert cols.min() == r * H // c["cs"] and cols.max() == (r + 1) * H // c["cs"] - 1, (c, per_cta)
        assert ((~live.any(-1)).sum(-1) < 32).all(), c                  # no warp without a live vector


@pytest.mark.parametrize("nb", [1, 3, 8])
@pytest.mark.parametrize("cid", _candidates())
def test_emulation_matches_reference(cid, nb):
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    mod = _module(cid)
    col, live = _owner(mod.CS, mod.THREADS, mod.VEC)
    assert col.shape[2] == mod.NV and int(live[0].sum()) * mod.VEC == mod.SV * mod.VEC == H // mod.CS
    defn = reference_impls.get("attn_res")
    point = Point(batch=3, tp=8, shape=f"nb{nb}")
    inp = defn.make_inputs(point, torch.Generator().manual_seed(23 + nb))
    got = emulate_clustermix(mod.CS, mod.THREADS, mod.VEC, inp, nb)
    res = compare(defn, got, defn.reference(**inp), inp)
    assert res.ok, res.summary()


PROBE = r"""
import importlib.util, json, os, re, sys, pathlib, tempfile
os.environ["CUTE_DSL_ARCH"] = sys.argv[1]
os.environ["CUTE_DSL_KEEP"] = "ptx"
dump = tempfile.mkdtemp(prefix="cm-probe-")
os.environ["CUTE_DSL_DUMP_DIR"] = dump
spec = importlib.util.spec_from_file_location("cm_kernel", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ir = str(mod.compile(8, "--enable-tvm-ffi", shape="nb3").ir_module)
ptx = "\n".join(p.read_text() for p in pathlib.Path(dump).rglob("*.ptx"))
count = lambda pat: len(re.findall(pat, ptx))
print(json.dumps({"sig3": "mB: Tensor([n0, 3, 7168], bfloat16)" in ir,
                  "stride_check": "mB.strides" in ir and "expected to be divisible by 8" in ir,
                  "arrive": count(r"barrier\.cluster\.arrive"), "wait": count(r"barrier\.cluster\.wait"),
                  "mapa": count(r"mapa\.shared::cluster"), "ld_cluster": count(r"ld\.shared::cluster\.f32"),
                  "ld_global": sorted(set(re.findall(r"ld\.global\S*", ptx))), "cs": mod.CS}))
"""


def test_nb3_compiles_strided_with_cluster_reductions():
    cids = _candidates()
    if not cids:
        pytest.skip("no clustermix candidate rendered")
    path = ROOT / "kernels_generated/attn_res" / cids[0] / "kernel.py"
    res = subprocess.run([sys.executable, "-c", PROBE, "sm_90a", str(path)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    cs = out["cs"]
    assert out["sig3"] and out["stride_check"]
    assert out["arrive"] == 3 and out["wait"] == 3                 # phase 1, phase 2, exit
    # phase 1: 2 * CS per lane (ss, dot); phase 2: CS; each one mapa + one ld.shared::cluster
    assert out["mapa"] == out["ld_cluster"] == 2 * cs + cs, out
    assert out["ld_global"] == ["ld.global.v4.b32"], out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_strided_blocks_match_the_reference(cid):
    """Each nb kernel on the decoder's strided view (rows nb..7 of the [B, 8, H] buffer NaN, so a read
    past nb shows) and on compact blocks, at B = 1, 5 and 64, against the reference (harness.compare)."""
    check_attn_res_on_strided_blocks(_module(cid), cid, nbs=(1, 3, 5, 8), batches=(1, 5, 64),
                                     seed=lambda nb, batch: 100 * nb + batch)
