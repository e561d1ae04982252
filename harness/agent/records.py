"""Typed records of one optimize run: what each candidate did at each stage.

These cross the boundary between the loop, the run log (JSON), the prompts and the
display, so they are dataclasses with explicit to/from JSON.
"""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

MAX_ERROR_CHARS = 2000        # compiler errors are trimmed to this before feedback and logs


class StageStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"
    NOT_RUN = "not_run"        # this machine cannot run the stage (no GPU)
    SKIPPED = "skipped"        # an earlier stage failed


class ScoreKind(str, enum.Enum):
    TIME_US = "time_us"                  # geometric mean of measured kernel times
    COMPILE_PROXY = "compile_proxy"      # no GPU: registers / spills / 128-bit loads only


def trim_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Keep the head and the tail of a long compiler error (the cause and the site)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-half:]


@dataclass
class CompileInfo:
    arch: str
    status: StageStatus
    registers: int | None = None
    spill_bytes: int | None = None
    ld128: int | None = None           # 128-bit global loads in the SASS/PTX
    seconds: float | None = None
    cached: bool = False
    error: str = ""


@dataclass
class Mismatch:
    tensor: str
    reason: str
    max_abs_err: float = 0.0
    rel_norm_err: float = 0.0
    worst: list[dict] = field(default_factory=list)


@dataclass
class Timing:
    """One search point's medians, all from the same interleaved CUDA-graph run."""
    batch: int
    tp: int
    kernel_us: float
    incumbent_us: float | None = None   # the op's promoted kernel (kernels_generated/promoted.json), when timed
    floor_us: float | None = None
    compiled_us: float | None = None    # torch.compile of the reference, when measured
    reference_us: float | None = None   # the eager PyTorch reference
    state_dtype: str = "fp32"           # the point's static key (kda_decode's state, skinny_gemm's shape)
    shape: str = ""
    incumbent_id: str | None = None     # which promoted kernel incumbent_us timed (the one running this point)
    # Whether a promoted kernel's scope covers this point: True, incumbent_us times what runs it
    # today; False, none does and the reference runs it (reference_us); None, not recorded (run
    # logs before session 48, test doubles), and incumbent_us alone counts.
    covered: bool | None = None

    @property
    def today_us(self) -> float | None:
        """The time of what runs this point today, perf_sweep's incumbent: the promoted kernel
        covering it, else the reference (None where that was not timed)."""
        return self.reference_us if self.covered is False else self.incumbent_us

    def label(self) -> str:
        """B=8, or B=8 bf16 mla_qkv_a where the point has a non-default static key."""
        return " ".join([f"B={self.batch}"] + ([self.state_dtype] if self.state_dtype != "fp32" else [])
                        + ([self.shape] if self.shape else []))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Timing":
        d = dict(d)
        if "reference_us" not in d:
            # run logs written before session 23 stored the eager reference's time as incumbent_us
            d["reference_us"], d["incumbent_us"] = d.get("incumbent_us"), None
        return cls(**d)


@dataclass
class EvalInfo:
    status: StageStatus
    verdict: str                        # harness.toolchain.verdict.Verdict value
    detail: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    incumbent: str | None = None        # ids of the promoted kernels timed beside it, ","-joined in try order

    def _speedup_over(self, other_us: Callable[[Timing], float | None]) -> float | None:
        """Geomean of other_us(t) / this kernel's time over the points, when every point has that
        time; else None (no claim from part of the points)."""
        ratios = [us / t.kernel_us for t in self.timings if (us := other_us(t))]
        if not ratios or len(ratios) < len(self.timings):
            return None
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))

    def vs_promoted(self) -> float | None:
        """Geomean of promoted-kernel time / this kernel's time, when the promoted kernel was timed at
        every point; else None."""
        return self._speedup_over(lambda t: t.incumbent_us)

    def vs_today(self) -> float | None:
        """Geomean of today's time / this kernel's time (Timing.today_us: the promoted kernel
        covering a point, else the reference, as perf_sweep compares), when every point has one;
        else None. Equal to vs_promoted() where promoted kernels cover every point."""
        return self._speedup_over(lambda t: t.today_us)

    def today_label(self) -> str:
        """What vs_today() compares with, in words."""
        on_ref = sum(1 for t in self.timings if t.covered is False)
        promoted = f"the promoted {self.incumbent or 'kernel'}"
        if not on_ref:
            return promoted
        if on_ref == len(self.timings):
            return "the reference (no promoted kernel covers these points)"
        return (f"what runs each point today ({promoted} at {len(self.timings) - on_ref} of "
                f"{len(self.timings)} search points, the reference at the rest)")


@dataclass
class CandidateRecord:
    id: str
    round: int
    slot: int
    author: str
    prompt_hash: str | None = None
    parent: str | None = None
    family: str | None = None
    params: dict[str, Any] | None = None
    static_ok: bool | None = None
    static_problems: list[str] = field(default_factory=list)
    compile: dict[str, CompileInfo] = field(default_factory=dict)
    evaluate: EvalInfo | None = None
    score: float | None = None
    score_kind: ScoreKind | None = None

    @property
    def compiled_everywhere(self) -> bool:
        return bool(self.compile) and all(c.status is StageStatus.OK for c in self.compile.values())

    @property
    def verified(self) -> bool:
        return self.evaluate is not None and self.evaluate.status is StageStatus.OK

    def summary(self) -> str:
        if self.static_ok is False:
            return "static checks refused: " + "; ".join(self.static_problems[:3])
        bad = [a for a, c in self.compile.items() if c.status is StageStatus.FAILED]
        if bad:
            return f"compile failed for {', '.join(bad)}"
        parts = []
        regs = [c.registers for c in self.compile.values() if c.registers is not None]
        if regs:
            parts.append(f"{max(regs)} regs")
        spills = [c.spill_bytes for c in self.compile.values() if c.spill_bytes]
        if spills:
            parts.append(f"{max(spills)} B spilled")
        if self.evaluate is not None and self.evaluate.status is not StageStatus.NOT_RUN:
            parts.append(self.evaluate.verdict)
            if self.evaluate.timings:
                ts = self.evaluate.timings
                g = math.exp(sum(math.log(t.kernel_us) for t in ts) / len(ts))
                parts.append(f"geomean {g:.2f} us")
                if (x := self.evaluate.vs_today()) is not None:
                    parts.append(f"{x:.2f}x {self.evaluate.today_label()}")
        else:
            parts.append("compiled; GPU stages not run")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CandidateRecord":
        d = dict(d)
        d["compile"] = {a: CompileInfo(**{**c, "status": StageStatus(c["status"])}) for a, c in d.get("compile", {}).items()}
        if d.get("evaluate"):
            e = dict(d["evaluate"])
            e["status"] = StageStatus(e["status"])
            e["mismatches"] = [Mismatch(**m) for m in e.get("mismatches", [])]
            e["timings"] = [Timing.from_json(t) for t in e.get("timings", [])]
            d["evaluate"] = EvalInfo(**e)
        if d.get("score_kind"):
            d["score_kind"] = ScoreKind(d["score_kind"])
        return cls(**d)
