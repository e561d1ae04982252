"""A throwaway git repository holding a copy of the gates, harness and references, with one
moe_router candidate committed: gate, promotion and CI tests never touch /work/main's history."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNEL_SRC = (Path(__file__).parent / "kernel_src.py.txt").read_text()
NARROW_SCOPE = {"archs": ["sm_90a"], "tp": [8], "batch": [1, 2], "dtypes": ["bf16"], "state_dtypes": [], "shapes": []}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_candidate(root: Path, source: str = KERNEL_SRC, scope: dict | None = None) -> str:
    from harness.toolchain.candidate import Provenance, Scope, create_candidate

    cand = create_candidate("moe_router", source, Scope.from_json(scope or NARROW_SCOPE),
                            Provenance(author="human"), root=root / "kernels_generated")
    return cand.id




def reference_kernel(op: str, after=None):
    """A test-only "kernel" for `_k3.build_pair(on_fn=...)`: the op's reference written into the
    output tensors the registry passes, then `after(inputs)` (e.g. a sleep: a kernel that costs time)."""
    import reference_impls

    d = reference_impls.get(op)

    def fn(**kw):
        r = d.run_reference({t.name: kw[t.name] for t in d.inputs})
        for name, t in r.items():
            kw[name].copy_(t)
        if after is not None:
            after(kw)
    return fn
