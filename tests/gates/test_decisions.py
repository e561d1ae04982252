"""Decision logic of the GPU gates on synthetic measurements (their GPU runs are gpu-marked)."""
from __future__ import annotations

from gates import Verdict, load_config, numerics_model, numerics_unit, perf_sweep

CFG = load_config()
PTS = ["p1", "p2"]


def _samples(**override):
    s = [{"point": p, "kind": "random", "seed": i * 10 + j, "ok": True, "mutated": [], "deterministic": True}
         for i, p in enumerate(PTS) for j in range(10)]
    s += [{"point": p, "kind": k, "seed": 1, "ok": True, "mutated": [], "deterministic": True}
          for p in PTS for k in numerics_unit.ADVERSARIAL]
    s[0].update(override)
    return s


def test_unit_pass_and_each_failure():
    assert numerics_unit.decide(_samples(), PTS, 10)[0] is Verdict.PASS
    for bad in ({"ok": False, "summary": "nan"}, {"mutated": ["x"]}, {"deterministic": False}, {"seed": 1}):
        assert numerics_unit.decide(_samples(**bad), PTS, 10)[0] is Verdict.FAIL, bad
    assert numerics_unit.decide(_samples(), PTS + ["p3"], 10)[0] is Verdict.FAIL
    no_ties = [s for s in _samples() if s["kind"] != "ties"]
    assert numerics_unit.decide(no_ties, PTS, 10)[0] is Verdict.FAIL


def test_unit_candidate_exception_is_a_named_failure():
    """A launch that raises at a point in scope fails the gate with the exception as the
    reason (not the gate ERROR the harness keeps for its own failures); the points after it
    were not tried, and they are named as missing too."""
    samples = [s for s in _samples() if s["point"] == PTS[0]]
    samples.append({"point": PTS[1], "kind": "random", "seed": 7, "ok": False, "mutated": [], "deterministic": True,
                    "raised": "ValueError: Mismatched mX.shape[1]"})
    verdict, reasons = numerics_unit.decide(samples, PTS, 10)
    assert verdict is Verdict.FAIL
    assert any(r.endswith("raised: ValueError: Mismatched mX.shape[1]") and r.startswith(PTS[1]) for r in reasons)
    assert not any(": wrong:" in r for r in reasons)
    assert any("distinct random input sets" in r and r.startswith(PTS[1]) for r in reasons)


def _perf(cand_us=10.0, floor_us=4.0, noise=0.01):
    return [{"point": p, "incumbent_us": 20.0, "candidate_us": cand_us, "noise_rel": noise, "floor_us": floor_us} for p in PTS]


LAYER = {"on_us": 395.0, "off_us": 400.0, "noise_rel": 0.005}


def test_perf_pass_and_failures():
    v, _, d = perf_sweep.decide(_perf(), LAYER, PTS, CFG)
    assert v is Verdict.PASS and abs(d["geomean_speedup"] - 2.0) < 1e-9
    assert perf_sweep.decide(_perf(cand_us=19.5), LAYER, PTS, CFG)[0] is Verdict.FAIL   # geomean < margin
    assert perf_sweep.decide(_perf(cand_us=3.0), LAYER, PTS, CFG)[0] is Verdict.FAIL    # faster than roofline
    assert perf_sweep.decide(_perf(), None, PTS, CFG)[0] is Verdict.FAIL                 # no per-layer A/B
    assert perf_sweep.decide(_perf(), {"on_us": 450.0, "off_us": 400.0}, PTS, CFG)[0] is Verdict.FAIL
    assert perf_sweep.decide(_perf(), LAYER, PTS + ["p3"], CFG)[0] is Verdict.FAIL       # a point not measured
    one_slow = _perf()
    one_slow[1]["candidate_us"] = 21.0                                                    # +5% > 3 x 1% noise
    assert perf_sweep.decide(one_slow, LAYER, PTS, CFG)[0] is Verdict.FAIL
    one_slow[1]["noise_rel"] = 0.03                                                       # within 3 x 3% noise
    assert perf_sweep.decide(one_slow, LAYER, PTS, CFG)[0] is Verdict.PASS


def _runs(**override):
    r = [{"kind": k, "tokens": 1024, "context": 32768, "greedy_agreement": 1.0, "sampling_agreement": 1.0,
          "max_kl": 1e-6, "max_logit_rel_err": 1e-3, "kernel_calls_on": 5, "kernel_calls_off": 0, "valid": True}
         for k in numerics_model.RUN_KINDS]
    r[0].update(override)
    return r


def test_model_pass_and_failures():
    assert numerics_model.decide(_runs(), CFG)[0] is Verdict.PASS
    for bad in ({"kernel_calls_on": 0}, {"kernel_calls_off": 3}, {"tokens": 512}, {"greedy_agreement": 0.5},
                {"max_kl": 1.0}):
        assert numerics_model.decide(_runs(**bad), CFG)[0] is Verdict.FAIL, bad
    assert numerics_model.decide(_runs()[1:], CFG)[0] is Verdict.FAIL


def test_perf_shadowed_points_count_as_measured_and_stay_out_of_the_geomean():
    """A point where a narrower promoted kernel keeps running is recorded, not timed."""
    pts = _perf()
    pts[1] = {"point": PTS[1], "shadowed_by": "0a11"}
    v, reasons, d = perf_sweep.decide(pts, LAYER, PTS, CFG)
    assert v is Verdict.PASS, reasons
    assert [p["point"] for p in d["per_point"]] == [PTS[0]] and abs(d["geomean_speedup"] - 2.0) < 1e-9
    every = [{"point": p, "shadowed_by": "0a11"} for p in PTS]
    v, reasons, _ = perf_sweep.decide(every, LAYER, PTS, CFG)
    assert v is Verdict.FAIL and any("would never run" in r for r in reasons)
    pts[1]["shadowed_by"] = ""
    assert perf_sweep.decide(pts, LAYER, PTS, CFG)[0] is Verdict.FAIL
