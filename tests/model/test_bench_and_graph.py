"""The GPU bench script runs (tiny, CPU) and writes its JSON; CUDA-graph replay of the decode
step equals eager decode (GPU only)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from graph_checks import assert_graph_step_matches_eager

ROOT = Path(__file__).resolve().parents[2]


def test_bench_layers_tiny_writes_json(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "scripts/gpu/bench_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("OUT", str(tmp_path))
    mod.main(["--tiny", "--batches", "1", "--no-graphs"])
    doc = json.loads((tmp_path / "bench_layers_tiny.json").read_text())
    assert [r["layer"] for r in doc["rows"]] == [1, 2, 3, 4, 5]
    assert [r["attn"] for r in doc["rows"]] == ["kda", "kda", "kda", "mla", "mla"]
    assert all(r["eager_us"] > 0 and r["aten_ops"] > 0 for r in doc["rows"])
    assert {r["kernels"] for r in doc["rows"]} == {"off"} and "on_off_table" not in doc


def test_bench_layers_names_its_json_by_context():
    """One $OUT holds runs of several contexts of one config: a non-default context is in the name."""
    spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "scripts/gpu/bench_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = {mod.json_name("k3-tp8-rank", c) for c in (mod.DEFAULT_CONTEXT, 8192, 32768)}
    assert names == {"bench_layers_k3-tp8-rank.json", "bench_layers_k3-tp8-rank_ctx8192.json",
                     "bench_layers_k3-tp8-rank_ctx32768.json"}


def test_bench_layers_on_off_table(tmp_path, monkeypatch):
    """--kernels both: every (batch, layer) timed with the registry empty and with the promoted
    manifest loaded; one table line per pair (on the CPU no kernel runs: the arch falls back)."""
    spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "scripts/gpu/bench_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("OUT", str(tmp_path))
    doc = mod.main(["--tiny", "--batches", "1", "--no-graphs", "--kernels", "both"])
    assert sorted({(r["kernels"], r["layer"]) for r in doc["rows"]}) == \
        sorted((m, i) for m in ("off", "on") for i in range(1, 6))
    assert len(doc["on_off_table"]) == 1 + 5
    assert not any(" kernel " in k for k in doc["registry"]["off"])
    # the "on" registry dispatched the promoted ops: fallbacks counted (no CUDA here), never a kernel run
    on = doc["registry"]["on"]
    assert any(k.startswith("moe_router fallback") for k in on) and not any(" kernel " in k for k in on)
    # and the run names the candidates each op's "on" side loaded: the manifest's, op for op (an
    # op with a narrow kernel beside its broad one lists both, the most specific first)
    from harness.promotion import promoted_ids

    manifest = json.loads((ROOT / "kernels_generated/promoted.json").read_text())
    assert doc["promoted"] == promoted_ids(manifest)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_step_matches_eager():
    from harness.model import K3Decoder, get_config, init_weights
    from harness.registry import Registry

    cfg = get_config("tiny")
    model = K3Decoder(cfg, init_weights(cfg, 0, "cuda"), Registry())
    caches = assert_graph_step_matches_eager(model, cfg, steps=4)
    assert torch.equal(caches[0].lens, caches[1].lens)
