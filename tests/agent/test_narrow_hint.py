"""harness/agent/narrow_hint.py: the sub-scope where a draft beats the promoted kernel by the
perf gate's margin when it does not over all its search points, and the loop's use of it."""
from __future__ import annotations

import pytest

from harness.agent.narrow_hint import narrow_hint
from harness.agent.records import Timing

MARGIN = 1.05


def _t(batch, kernel, promoted, shape="", state="fp32") -> Timing:
    return Timing(batch=batch, tp=8, kernel_us=kernel, incumbent_us=promoted, shape=shape, state_dtype=state)


def test_a_draft_that_wins_on_one_shape_is_hinted_there():
    ts = [_t(b, 9.3, 9.9, "mla_qkv_a") for b in (1, 8)] + [_t(b, 15.0, 14.8, s) for b in (1, 8)
                                                          for s in ("latent_down", "latent_up")]
    h = narrow_hint(ts, (1, 8), MARGIN)
    assert h is not None and h.shapes == ("mla_qkv_a",) and h.batch is None and h.points == 2
    assert h.geomean == pytest.approx(9.9 / 9.3)
    assert h.command("skinny_gemm", "abc") == "harness narrow skinny_gemm abc --shapes mla_qkv_a"


def test_a_draft_that_wins_at_small_batch_is_hinted_up_to_the_last_winning_batch():
    ts = [_t(1, 8.0, 9.2), _t(8, 9.0, 9.9), _t(64, 16.0, 15.0)]
    h = narrow_hint(ts, (1, 64), MARGIN)
    assert h is not None and h.batch == (1, 8) and h.points == 2
    assert h.to_json("moe_router", "abc")["command"] == "harness narrow moe_router abc --batch 1-8"
    up = narrow_hint([_t(1, 9.4, 9.2), _t(8, 9.0, 9.9), _t(64, 14.0, 15.0)], (1, 64), MARGIN)
    assert up is not None and up.batch == (8, 64)


def test_a_state_dtype_is_a_sub_scope_too():
    ts = [_t(b, 3.0, 3.5, state="bf16") for b in (1, 64)] + [_t(b, 3.5, 3.4) for b in (1, 64)]
    h = narrow_hint(ts, (1, 64), MARGIN)
    assert h is not None and h.state_dtypes == ("bf16",) and h.shapes == ()


@pytest.mark.parametrize("ts", [
    [_t(1, 8.0, 9.2), _t(64, 15.0, 16.9)],                       # wins everywhere: no narrowing needed
    [_t(1, 9.5, 9.2), _t(64, 17.5, 16.9)],                       # loses everywhere
    [_t(1, 9.0, 9.2), _t(64, 16.6, 16.9)],                       # wins, within drift everywhere
    [_t(1, 8.0, 9.2), _t(64, 15.0, None)],                       # the promoted kernel not timed everywhere
    [_t(1, 9.5, 9.2, "a"), _t(8, 8.0, 9.2, "a"), _t(64, 9.5, 9.2, "a")]
    + [_t(b, 9.5, 9.2, "b") for b in (1, 8, 64)],               # a wins at B=8 alone: no window holds only that
    [],
])
def test_no_hint(ts):
    assert narrow_hint(ts, (1, 64), MARGIN) is None


def test_the_largest_sub_scope_wins():
    # shapes a, b win at every batch; by batch, only B <= 8 wins with the losing shape c in it
    ts = [_t(b, 9.0, 10.0, s) for b in (1, 8, 64) for s in ("a", "b")] + [_t(b, 10.0, 9.9, "c") for b in (1, 8, 64)]
    h = narrow_hint(ts, (1, 64), MARGIN)
    assert h is not None and h.shapes == ("a", "b") and h.points == 6


def test_shapes_and_a_batch_window_together():
    """Session 47's skinny_gemm case: a draft over many GEMM shapes wins at some of them, only at
    small B, and loses elsewhere. Neither axis alone holds a winning sub-scope; the two together do."""
    ts = ([_t(b, 9.0, 10.0, s) for b in (1, 8) for s in ("mla_q_b", "mla_g_proj")]
          + [_t(64, 11.0, 10.0, s) for s in ("mla_q_b", "mla_g_proj")]
          + [_t(b, 10.2, 10.0, "kda_in_proj") for b in (1, 8, 64)])
    h = narrow_hint(ts, (1, 64), MARGIN)
    assert h is not None and h.shapes == ("mla_g_proj", "mla_q_b") and h.batch == (1, 8) and h.points == 4
    assert h.command("skinny_gemm", "abc") == "harness narrow skinny_gemm abc --shapes mla_g_proj,mla_q_b --batch 1-8"
    one = narrow_hint([_t(1, 8.0, 9.2, "a"), _t(8, 9.3, 9.2, "a"), _t(1, 9.5, 9.2, "b"), _t(8, 9.5, 9.2, "b")],
                      (1, 64), MARGIN)
    assert one is not None and (one.shapes, one.batch, one.points) == (("a",), (1, 1), 1)


def test_where_no_promoted_kernel_runs_the_reference_is_todays_time():
    """A point outside every promoted kernel's scope (covered False) runs the reference today, so
    the draft is held to the reference there (the perf gate's incumbent), and to the promoted
    kernel where one covers the point (covered True). A covered point whose promoted kernel was not
    timed leaves no claim."""
    def t(shape, kernel, promoted, reference, covered):
        return Timing(batch=1, tp=8, kernel_us=kernel, incumbent_us=promoted, reference_us=reference,
                      shape=shape, covered=covered)
    ts = [t("latent_down", 10.0, 9.5, 12.0, True), t("mla_q_b", 4.0, None, 6.0, False)]
    assert [x.today_us for x in ts] == [9.5, 6.0]
    h = narrow_hint(ts, (1, 8), MARGIN)
    assert h is not None and h.shapes == ("mla_q_b",) and h.geomean == pytest.approx(1.5)
    assert narrow_hint([t("latent_down", 10.0, None, 12.0, True), ts[1]], (1, 8), MARGIN) is None
    legacy = Timing(batch=1, tp=8, kernel_us=4.0, incumbent_us=None, reference_us=6.0)   # covered not recorded
    assert legacy.today_us is None


def test_the_loop_names_the_narrow_command_when_it_skips_the_gates(harness_root, monkeypatch, capsys):
    """A draft 1.08x the promoted router at B=1 and 0.97x at B=64 (1.02x over both) stays below the
    perf bar: the loop skips the gates and says how to gate the part where it wins."""
    import json

    import harness.agent.gating as gating
    from harness.agent.loop import OptimizeConfig, start
    from harness.agent.records import EvalInfo, StageStatus
    from harness.agent.stages import ToolchainStages

    from .conftest import fenced, tiny_kernel
    from .llm_server import ScriptedLLM

    class Stages(ToolchainStages):
        def __init__(self) -> None:
            super().__init__(use_gpu=False)

        def evaluate(self, cand) -> EvalInfo:
            return EvalInfo(StageStatus.OK, "OK", "timed on paper (test double)", incumbent="876e935cf35f",
                            timings=[Timing(1, 8, 8.5, 9.2, 2.7, 35.0, 55.0), Timing(64, 8, 17.5, 16.9, 2.7, 35.0, 55.0)])

    monkeypatch.setattr(gating, "run_full_gates", lambda *a, **k: pytest.fail("gated below the perf bar"))
    cfg = OptimizeConfig(op="moe_router", agent="openai:gpt-4o", rounds=1, candidates_per_round=1, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1)
    with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
        cfg.base_url = srv.url + "/v1"
        opt = start(cfg, run_id="t-narrow", stages=Stages())
        opt.run()
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    hint = summary["speedup"]["narrow_hint"]
    cid = summary["best"]["id"]
    assert hint["batch"] == [1, 1] and hint["points"] == 1 and hint["geomean"] == pytest.approx(9.2 / 8.5)
    assert hint["command"] == f"harness narrow moe_router {cid} --batch 1-1"
    assert f"gate that part with `{hint['command']}`" in summary["gates"]["reason"]
    from harness.agent.display import print_summary

    capsys.readouterr()
    print_summary(summary)                                       # what a person reads at the end
    shown = " ".join(capsys.readouterr().out.split())
    assert f"gate it there with `{hint['command']}`" in shown
