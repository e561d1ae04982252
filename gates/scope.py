"""scope gate (CPU-runnable): the declared scope is real.

- Every declared arch x TP x static key compiles (toolchain compile_matrix, sandboxed, cached).
- Through the registry (the decode path's dispatcher): a call inside the scope takes the
  kernel; a call outside it (batch beyond either end, an undeclared TP, an undeclared arch)
  and a call with the kill switch on fall back to the reference with the matching reason.
On the CPU the kernel cannot launch: the dispatch check registers a stand-in that writes the
reference's outputs for the CPU "arch", so what is tested is the registry's decision on the
candidate's declared scope; on a GPU the compiled kernel itself is registered.
"""
from __future__ import annotations

from typing import Any

from . import GateContext, GateName, GateResult, Verdict


def decide(numbers: dict[str, Any], archs: list[str], tps: list[int]) -> tuple[Verdict, list[str]]:
    reasons: list[str] = []
    compiles = numbers.get("compiles", [])
    for arch in archs:
        for tp in tps:
            hits = [c for c in compiles if c.get("arch") == arch and c.get("tp") == tp]
            if not hits:
                reasons.append(f"compile {arch} TP{tp}: not attempted")
            reasons += [f"compile {arch} TP{tp} {c.get('static') or ''}: {c.get('verdict')}: {c.get('message', '')}".rstrip()
                        for c in hits if c.get("verdict") != "OK"]
    cases = numbers.get("dispatch", [])
    if not any(c.get("expected_outcome") == "kernel" for c in cases):
        reasons.append("dispatch: no in-scope call checked")
    if not any(c.get("expected_outcome") == "fallback" for c in cases):
        reasons.append("dispatch: no out-of-scope call checked")
    for c in cases:
        if (c.get("got_outcome"), c.get("got_reason")) != (c.get("expected_outcome"), c.get("expected_reason")):
            reasons.append(f"dispatch {c.get('case')}: expected {c.get('expected_outcome')}/{c.get('expected_reason')}, "
                           f"registry chose {c.get('got_outcome')}/{c.get('got_reason')}")
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons


def _reference_standin(defn):
    """A CPU stand-in for the kernel: writes the reference's outputs into the buffers."""
    from harness.opdef import Role

    names = {s.name for s in defn.inputs}

    def fn(**tensors):
        ins = {k: v for k, v in tensors.items() if k in names}
        ref = defn.run_reference(ins)
        for s in defn.outputs:
            dst = ins[s.name] if s.role is Role.STATE else tensors[s.name]
            dst.copy_(ref[s.name])
    return fn


def dispatch_cases(defn, scope, device: str, arch: str, fn, candidate_dir=None) -> list[dict[str, Any]]:
    """Calls inside and outside `scope` through a fresh Registry; what it chose, per case.
    `fn` is a ready kernel callable, or None to let the registry load `candidate_dir`."""
    import torch

    from harness.opdef import Point
    from harness.registry import KernelScope, Registry

    kscope = KernelScope.from_json(scope.to_json())
    own = KernelScope(archs=(arch,), tp=kscope.tp, batch=kscope.batch, dtypes=kscope.dtypes,
                      state_dtypes=kscope.state_dtypes, shapes=kscope.shapes)
    lo, hi = scope.batch
    shape = scope.shapes[0] if scope.shapes else ""
    state = scope.state_dtypes[0] if scope.state_dtypes else defn.state_dtypes[0]
    ctx_len = 1024 if defn.uses_context else 0
    cases: list[tuple[str, KernelScope, int, int, bool, str, str, str]] = []
    for tp in scope.tp:
        cases.append((f"inside B={lo} TP{tp}", own, lo, tp, False, "kernel", "in_scope", shape))
        cases.append((f"inside B={hi} TP{tp}", own, hi, tp, False, "kernel", "in_scope", shape))
    tp0 = scope.tp[0]
    if lo > 1:
        cases.append((f"below B={lo - 1}", own, lo - 1, tp0, False, "fallback", "batch", shape))
    cases.append((f"above B={hi + 1}", own, hi + 1, tp0, False, "fallback", "batch", shape))
    for tp in (8, 16):
        if tp not in scope.tp:
            cases.append((f"undeclared TP{tp}", own, lo, tp, False, "fallback", "tp", shape))
    # a narrow-shape kernel must leave the op's other named shapes alone (one of them is enough)
    other = [s for s in defn.extra.get("shape_names", ()) if scope.shapes and s not in scope.shapes]
    if other:
        cases.append((f"undeclared shape {other[0]}", own, lo, tp0, False, "fallback", "shape", other[0]))
    if arch not in scope.archs:
        cases.append((f"declared archs {list(scope.archs)} on {arch}", kscope, lo, tp0, False, "fallback", "arch", shape))
    cases.append(("kill switch", own, lo, tp0, True, "fallback", "disabled", shape))
    out = []
    for name, ks, batch, tp, kill, want_o, want_r, shape in cases:
        reg = Registry()
        reg.register(defn.name, ks, fn, candidate="gate", candidate_dir=candidate_dir)
        if kill:
            reg.disable(defn.name)
        pt = Point(batch=batch, tp=tp, context=ctx_len, state_dtype=state, shape=shape)
        inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch * 31 + tp), device)
        static = {"shape": shape} if shape else {}
        try:
            reg.run(defn.name, inputs, tp=tp, site="scope-gate", **static)
        except Exception as exc:  # noqa: BLE001 - recorded, the case then fails
            out.append({"case": name, "expected_outcome": want_o, "expected_reason": want_r,
                        "got_outcome": "raised", "got_reason": f"{type(exc).__name__}: {exc}"})
            continue
        got = [k for k, n in reg.counters().items() if n]
        o, r = (got[0].outcome.value, got[0].reason.value) if len(got) == 1 else ("?", str(got))
        if reg.errors():
            r += f" ({next(iter(reg.errors().values()))})"
        out.append({"case": name, "expected_outcome": want_o, "expected_reason": want_r,
                    "got_outcome": o, "got_reason": r})
    return out


def run(ctx: GateContext) -> GateResult:
    import torch

    import reference_impls
    from harness.errors import UserError
    from harness.registry import device_arch
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.compile import compile_matrix

    name = GateName.SCOPE.value
    defn = reference_impls.get(ctx.op)
    try:
        cand = load_candidate(ctx.op, ctx.candidate_dir)
    except UserError as exc:
        return GateResult(name, Verdict.FAIL, [f"candidate folder invalid: {exc}"])
    compiles = [{"arch": r.arch, "tp": r.tp, "static": r.static, "verdict": r.verdict.value,
                 "message": r.message, "compile_s": r.compile_s} for r in compile_matrix(cand)]
    fn: Any = _reference_standin(defn)
    device, arch = "cpu", "cpu"
    if torch.cuda.is_available():
        device, arch = "cuda", device_arch(torch.device("cuda"))
        if arch in cand.scope.archs:
            fn = None                 # the registry compiles the real kernel per (arch, TP)
    numbers = {"compiles": compiles, "dispatch": dispatch_cases(defn, cand.scope, device, arch, fn, cand.path),
               "dispatch_device": device}
    verdict, reasons = decide(numbers, list(cand.scope.archs), list(cand.scope.tp))
    return GateResult(name, verdict, reasons, numbers)
