"""Drafts compiled without a GPU, measured on one by `--resume` (harness/agent/loop.py,
Optimizer._measure_deferred): the CPU half runs anywhere, the GPU half on the lent H200."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from harness.agent.loop import OptimizeConfig, resume, start
from harness.agent.records import ScoreKind, StageStatus
from harness.agent.stages import ToolchainStages

REPO = Path(__file__).resolve().parents[2]
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_a_draft_compiled_without_the_gpu_is_checked_and_timed_on_it_after_resume(harness_root):
    """One template draft of situ_and_mul, compiled by a run that does not use the GPU (its
    evaluation NOT_RUN, ranked by compile feedback), then `resume` with the real stages: the
    draft is checked against the reference and timed on this GPU, and ranked by that time."""
    shutil.copytree(REPO / "prompts", harness_root / "prompts")
    cfg = OptimizeConfig(op="situ_and_mul", rounds=1, candidates_per_round=1, run_gates=False)
    cpu = start(cfg, run_id="gpu-deferred", stages=ToolchainStages(use_gpu=False)).run()
    (cid,) = cpu.deferred()
    assert cpu.records[cid].score_kind is ScoreKind.COMPILE_PROXY

    st = resume("gpu-deferred").run()                  # the real stages: this machine's GPU
    rec = st.records[cid]
    assert rec.evaluate is not None and rec.evaluate.status is StageStatus.OK, rec.evaluate
    assert rec.score_kind is ScoreKind.TIME_US and rec.evaluate.timings
    assert all(t.kernel_us > 0 and t.reference_us for t in rec.evaluate.timings)
    assert st.deferred() == [] and st.best_verified().id == cid
