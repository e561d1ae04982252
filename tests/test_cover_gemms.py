"""scripts/gpu/cover_gemms.sh: the device calls of the GEMM-coverage bench. Each plan
(scripts/gpu/cover_plans/) lists its renders with the ids they must come out as (the bench names
them); these tests keep them equal to what the render step makes, so a template change shows up
here and not as a refused device call."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/gpu/cover_gemms.sh"
PLANS = ROOT / "scripts/gpu/cover_plans"
ROUND1 = str(PLANS / "round1.sh")
ROUND2 = str(PLANS / "round2.sh")
ROUND3 = str(PLANS / "round3.sh")
ROUND4 = str(PLANS / "round4.sh")


def _run(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env})


def _bench_argv(tmp_path: Path, tree: Path, plan: str) -> list[str]:
    """`cover_gemms.sh bench` in `tree` with a stand-in interpreter that records its calls instead of
    timing anything: the argv of its first call (bench_kernels.py's)."""
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "py"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    stub.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    r = _run("bench", cwd=tree, OUT=str(out), COVER_PLAN=plan, PYTHON=str(stub), COVER_DIR=str(tmp_path / "cover"))
    assert r.returncode == 0, r.stderr
    return calls.read_text().splitlines()[0].split()


def _flags(argv: list[str]) -> dict[str, str]:
    return {k: v for k, v in zip(argv, argv[1:]) if k.startswith("--")}


def test_render_makes_exactly_the_folders_bench_times(tmp_path):
    r = _run("render", RENDER_ROOT=str(tmp_path), COVER_PLAN=ROUND1)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()                              # four skinny_gemm renders, then three gemm_situ_and_mul
    made = {f"{p.parent.name}/{p.name}" for p in tmp_path.glob("*/*") if p.is_dir()}
    assert made == {f"skinny_gemm/{i}" for i in ids[:4]} | {f"gemm_situ_and_mul/{i}" for i in ids[4:]}
    assert len(made) == 7
    assert _run("missing", RENDER_ROOT=str(tmp_path), COVER_PLAN=ROUND1).stdout == ""   # the plan's ids are these
    skinny = json.loads((tmp_path / "skinny_gemm" / ids[0] / "candidate.json").read_text())
    assert len(skinny["scope"]["shapes"]) == 10 and skinny["scope"]["batch"] == [1, 8]
    assert not {"latent_down", "latent_up", "mla_qkv_a"} & set(skinny["scope"]["shapes"])   # promoted kernels run those
    situ = json.loads((tmp_path / "gemm_situ_and_mul" / ids[4] / "candidate.json").read_text())
    assert situ["scope"]["shapes"] == ["dense_gate_up"]


def test_round2_renders_only_the_uncovered_shapes(tmp_path):
    """Round 2 (session 53): thirteen skinny renders of 268009 at the four shapes still on cuBLAS,
    none of them a study outside the space."""
    r = _run("render", RENDER_ROOT=str(tmp_path), COVER_PLAN=ROUND2)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == len(set(ids)) == 13
    assert sorted(p.name for p in (tmp_path / "skinny_gemm").iterdir()) == sorted(ids)
    assert not (tmp_path / "gemm_situ_and_mul").exists()
    from harness.agent.families import load_family

    family = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    params = []
    for i in ids:
        cand = json.loads((tmp_path / "skinny_gemm" / i / "candidate.json").read_text())
        assert cand["scope"]["shapes"] == ["kda_o_proj", "mla_o_proj", "mla_q_b", "dense_down"]
        assert cand["scope"]["batch"] == [1, 8]
        tpl = cand["provenance"]["template"]
        assert tpl["family"] == "swapab" and family.feasible(tpl["params"])     # proposable, not a study
        params.append(json.dumps(tpl["params"], sort_keys=True))
    assert len(set(params)) == 13                                       # no two renders alike


def test_round3_times_the_promoted_kernels_beside_its_renders(tmp_path):
    """Round 3 (session 55): nine bulk renders at the K 768 GEMMs where 91b17e and a87a4d miss the
    cuBLAS bar at B=8. bench hands those two promoted kernels to bench_kernels.py beside the renders,
    at the plan's batches (a stand-in interpreter records the call), and propose refuses the plan:
    pick_winner judges against cuBLAS, and a winner here must beat the promoted kernels."""
    gen = tmp_path / "tree" / "kernels_generated"
    r = _run("render", RENDER_ROOT=str(gen), COVER_PLAN=ROUND3)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == len(set(ids)) == 9
    from harness.agent.families import load_family

    family = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    for i in ids:
        cand = json.loads((gen / "skinny_gemm" / i / "candidate.json").read_text())
        assert cand["scope"]["shapes"] == ["shared_down", "kda_o_proj", "mla_o_proj"]
        params = cand["provenance"]["template"]["params"]
        assert params["bulk"] is True and family.feasible(params)

    bench = _bench_argv(tmp_path, tmp_path / "tree", ROUND3)
    assert bench[0] == "scripts/gpu/bench_kernels.py"
    arg = _flags(bench)
    assert arg["--batches"] == "1,2,4,5,8" and arg["--tps"] == "8,16"
    assert arg["--candidates"].split(",") == ids + ["91b17e39677d", "a87a4d18c8bc"]
    assert set(arg["--skip-points"].split(",")) == {"shared_down@16", "kda_o_proj@8", "mla_o_proj@8",
                                                   "mla_o_proj@16"}

    cover = tmp_path / "cover"
    cover.mkdir(exist_ok=True)
    (cover / "bench_cover_skinny.json").write_text("{}")
    r = _run("propose", cwd=tmp_path / "tree", COVER_PLAN=ROUND3, COVER_DIR=str(cover))
    assert r.returncode == 2 and "narrow a render by hand" in r.stderr


def test_round4_renders_the_small_k_pipes_at_both_tps_beside_the_promoted_kernels(tmp_path):
    """Round 4 (session 66): four pipe renders of 2f5f13 at the small-K GEMMs, B 16..64, each scoped to
    TP 8 and 16 (a `--scope tp=[8,16]` the render step must not glob: a file named `tp=8` in the
    working folder would otherwise replace it), timed beside the four promoted kernels there."""
    tree = tmp_path / "tree"
    gen = tree / "kernels_generated"
    gen.mkdir(parents=True)
    (tree / "scripts").symlink_to(ROOT / "scripts")
    (tree / "tp=8").write_text("")                      # what an unquoted [8,16] would glob to
    r = _run("render", cwd=tree, RENDER_ROOT=str(gen), COVER_PLAN=ROUND4)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == len(set(ids)) == 4
    from harness.agent.families import load_family

    family = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    base = json.loads((ROOT / "kernels_generated/skinny_gemm/2f5f13de67e1/candidate.json").read_text())
    base_params = base["provenance"]["template"]["params"]
    changed = []
    for i in ids:
        cand = json.loads((gen / "skinny_gemm" / i / "candidate.json").read_text())
        assert cand["scope"]["tp"] == [8, 16] and cand["scope"]["batch"] == [1, 64]
        assert cand["scope"]["shapes"] == ["shared_down", "kda_o_proj", "mla_o_proj", "mla_q_b"]
        params = cand["provenance"]["template"]["params"]
        assert family.feasible(params)
        changed.append({k: v for k, v in params.items() if base_params.get(k, v) != v})   # new keys: defaults
    assert all(set(c) <= {"lp_sblocks", "lp_cluster", "lp_warps"} and c for c in changed)

    arg = _flags(_bench_argv(tmp_path, tree, ROUND4))
    assert arg["--batches"] == "16,32,64" and arg["--tps"] == "8,16"
    assert arg["--candidates"].split(",") == ids + ["2f5f13de67e1", "01f8c367a0bd", "59f8b866e4c0", "5242eb3d9ff3"]


def test_the_default_plan_is_the_newest_round():
    """Without COVER_PLAN the highest round number runs (round10 after round9, not after round1)."""
    def number(p: Path) -> int:
        return int(p.stem.removeprefix("round"))

    newest = max(PLANS.glob("round*.sh"), key=number)
    r = _run("plan")
    assert r.returncode == 0 and Path(r.stdout.strip()).resolve() == newest.resolve()
    assert _run("plan", COVER_PLAN=ROUND1).stdout.strip() == ROUND1


def test_a_render_whose_id_changed_stops_the_plan(tmp_path):
    """A plan id that no longer matches its render (a template changed) stops render, naming both."""
    plan = tmp_path / "plan.sh"
    plan.write_text('SKINNY_SHAPES=mla_q_b\nRENDERS=("skinny_gemm 000000000000 268009 --set warps=2")\n')
    r = _run("render", RENDER_ROOT=str(tmp_path / "out"), COVER_PLAN=str(plan))
    assert r.returncode == 3 and "not the plan's 000000000000: a template changed" in r.stderr
    plan.write_text('RENDERS=("moe_router 000000000000 876e93")\n')
    r = _run("render", RENDER_ROOT=str(tmp_path / "out"), COVER_PLAN=str(plan))
    assert r.returncode == 2 and "renders an op it cannot bench: moe_router" in r.stderr


def test_bench_refuses_before_any_gpu_work_without_its_candidates(tmp_path):
    r = _run("bench", cwd=tmp_path, OUT=str(tmp_path), COVER_PLAN=ROUND1)
    assert r.returncode == 2 and "no candidate folder for skinny_gemm/ee9e383345ca" in r.stderr
    assert "render' here first" in r.stderr and list(tmp_path.iterdir()) == []
    r = _run("bench", RENDER_ROOT=str(tmp_path), OUT=str(tmp_path))
    assert r.returncode == 2 and "unset RENDER_ROOT" in r.stderr
    assert _run("nonsense").returncode == 2


def _scratch_tree(tmp_path: Path) -> Path:
    """What propose reads and writes, copied: the templates and human_candidates.json, the scripts,
    and the two ops' candidate folders (HARNESS_ROOT points the renders here)."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "prompts", tree / "prompts")
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    for op in ("skinny_gemm", "gemm_situ_and_mul"):
        shutil.copytree(ROOT / "kernels_generated" / op, tree / "kernels_generated" / op,
                        ignore=shutil.ignore_patterns("evidence"))
    return tree


def test_propose_renders_the_winners_and_names_only_the_new_folders(tmp_path):
    """Call 2's first half, on session 33's committed whole-family bench: its winner is 268009's
    scope. With 268009's folder in place nothing is new (no gate to run); without it, propose
    appends the entry, renders it back to 268009f21621 and names that folder alone."""
    import lzma

    cover = tmp_path / "cover"
    cover.mkdir()
    (cover / "bench_cover_skinny.json").write_bytes(
        lzma.open(ROOT / "results/h200/session33/bench_skinny33.json.xz").read())
    tree = _scratch_tree(tmp_path)
    env = {"COVER_DIR": str(cover), "HARNESS_ROOT": str(tree), "COVER_PLAN": ROUND2}
    n0 = len(json.loads((tree / "prompts/kernels/human_candidates.json").read_text())["candidates"])
    r = _run("propose", cwd=tree, **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "added 268009_cover_tp8_16" in r.stderr
    import shutil

    shutil.rmtree(tree / "kernels_generated/skinny_gemm/268009f21621")
    r = _run("propose", cwd=tree, **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["skinny_gemm/268009f21621"]
    assert "nothing (every entry was there)" in r.stderr
    assert len(json.loads((tree / "prompts/kernels/human_candidates.json").read_text())["candidates"]) == n0 + 1


def test_gate_refuses_without_call_1s_results(tmp_path):
    r = _run("gate", cwd=tmp_path, OUT=str(tmp_path), COVER_DIR=str(tmp_path / "none"))
    assert r.returncode == 2 and "no bench results in" in r.stderr and list(tmp_path.iterdir()) == []


def test_perf_passed_reads_regate_summaries(tmp_path):
    """gate runs the other gates only on what passed perf_sweep: read from regate.sh's summary
    (session 33's real one, and a made-up one with a refusal and an unfinished candidate)."""
    r = _run("perf-passed", str(ROOT / "results/h200/session33/regate_perf.txt"))
    assert r.stdout.split() == ["skinny_gemm/268009f21621"]
    summary = tmp_path / "regate_perf.txt"
    summary.write_text("#### skinny_gemm/aaaaaaaaaaaa\n== aaaaaaaaaaaa: harness gate exit 1 after 90 s\n"
                       "   FAIL     perf_sweep          88.0 s\n            geomean speedup 0.98\n"
                       "#### gemm_situ_and_mul/bbbbbbbbbbbb\n   PASS     perf_sweep          60.0 s\n"
                       "#### skinny_gemm/cccccccccccc\n(no verdict yet)\n")
    assert _run("perf-passed", str(summary)).stdout.split() == ["gemm_situ_and_mul/bbbbbbbbbbbb"]


def _evidence_candidate_hash(cdir: Path) -> str:
    from gates.pins import sha256_files

    files = [p for p in cdir.rglob("*") if p.is_file() and p.relative_to(cdir).parts[0] != "evidence"]
    return sha256_files(files, cdir.parents[2])


def test_adopt_takes_call_2s_renders_as_gated(tmp_path):
    """Session 54: the gate call rendered 072140 and d659fc at 01:31:33 and gated them; propose here
    rendered them again with another created_utc, and promote refused the records as stale. adopt
    takes call 2's files instead: the scratch tree is here before the call (without the two folders
    and their two entries), COVER_DIR holds what call 2 writes, and afterwards the records' candidate
    hash matches the adopted files."""
    import shutil

    ids = ["skinny_gemm/072140b6c70e", "skinny_gemm/d659fc07d743"]
    cover = tmp_path / "cover"
    cover.mkdir()
    subprocess.run(["tar", "-cJf", str(cover / "new_candidates.tar.xz"), "--exclude=evidence",
                    "-C", str(ROOT / "kernels_generated"), *ids], check=True)    # as gate packs them
    tree = _scratch_tree(tmp_path)
    listed = tree / "prompts/kernels/human_candidates.json"
    doc = json.loads(listed.read_text())
    labels = [c["label"] for c in doc["candidates"]]
    at = labels.index("29d230_cover_tp16")                 # the list as it was: call 2 appended two
    assert labels[at:at + 2] == ["29d230_cover_tp16", "9ebf33_cover_tp8"]
    (cover / "human_candidates.json").write_text(
        json.dumps({**doc, "candidates": doc["candidates"][:at + 2]}, indent=1) + "\n")
    doc["candidates"] = doc["candidates"][:at]
    listed.write_text(json.dumps(doc, indent=2) + "\n")
    for cid in ids:
        shutil.rmtree(tree / "kernels_generated" / cid)

    r = _run("adopt", cwd=tree, COVER_DIR=str(cover))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ids
    assert listed.read_bytes() == (cover / "human_candidates.json").read_bytes()
    for cid in ids:
        record = json.loads(next((ROOT / "kernels_generated" / cid / "evidence").glob("*.json")).read_text())
        assert _evidence_candidate_hash(tree / "kernels_generated" / cid) == record["hashes"]["candidate"]
    assert _run("adopt", cwd=tree, COVER_DIR=str(cover)).returncode == 0          # the same files again: fine

    cj = tree / "kernels_generated" / ids[0] / "candidate.json"
    cj.write_text(cj.read_text().replace("01:31:33", "01:48:59"))                 # propose's re-render
    r = _run("adopt", cwd=tree, COVER_DIR=str(cover))
    assert r.returncode == 3 and f"kernels_generated/{ids[0]} already there and not the gated files" in r.stderr
    assert "01:48:59" in cj.read_text()

    doc["candidates"] = doc["candidates"][1:]              # here, an entry changed after the call
    doc["candidates"].insert(0, {"label": "made_here_after_the_call"})
    listed.write_text(json.dumps(doc, indent=2) + "\n")
    r = _run("adopt", cwd=tree, COVER_DIR=str(cover))
    assert r.returncode == 3 and "changed since the gate call's tree" in r.stderr
    assert "made_here_after_the_call" in listed.read_text()


def test_adopt_names_what_call_2_should_have_written(tmp_path):
    r = _run("adopt", cwd=tmp_path, COVER_DIR=str(tmp_path))
    assert r.returncode == 2 and "no " + str(tmp_path / "new_candidates.tar.xz") in r.stderr


def test_gate_packs_its_renders_for_adopt(tmp_path):
    """Call 2 on the CPU up to the GPU work: with at_head.sh stubbed to stop (rc 3), gate proposes
    and renders session 33's winner and packs exactly that folder; here, with the folder and the
    list entry not yet made, adopt then restores the gate's render byte for byte."""
    import lzma
    import shutil
    import tarfile

    cover, out = tmp_path / "cover", tmp_path / "out"
    cover.mkdir()
    out.mkdir()
    (cover / "bench_cover_skinny.json").write_bytes(
        lzma.open(ROOT / "results/h200/session33/bench_skinny33.json.xz").read())
    tree = _scratch_tree(tmp_path)
    (tree / "scripts/gpu/at_head.sh").write_text("return 3\n")          # stop before any GPU work
    cid = "skinny_gemm/268009f21621"
    shutil.rmtree(tree / "kernels_generated" / cid)
    listed = tree / "prompts/kernels/human_candidates.json"
    before = listed.read_bytes()

    r = _run("gate", cwd=tree, OUT=str(out), COVER_DIR=str(cover), HARNESS_ROOT=str(tree), COVER_PLAN=ROUND2)
    assert r.returncode == 3, r.stdout + r.stderr
    assert (out / "new_ids.txt").read_text().split() == [cid]
    with tarfile.open(out / "new_candidates.tar.xz") as tar:
        assert sorted(tar.getnames()) == [cid, f"{cid}/candidate.json", f"{cid}/kernel.py"]
    gated = {p.name: p.read_bytes() for p in (tree / "kernels_generated" / cid).iterdir()}

    shutil.rmtree(tree / "kernels_generated" / cid)                   # here, before adopt
    listed.write_bytes(before)
    r = _run("adopt", cwd=tree, COVER_DIR=str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [cid]
    assert {p.name: p.read_bytes() for p in (tree / "kernels_generated" / cid).iterdir()} == gated
    assert listed.read_bytes() == (out / "human_candidates.json").read_bytes() != before
