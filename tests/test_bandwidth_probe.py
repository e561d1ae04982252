"""scripts/gpu/bandwidth_probe.py: the GPU identity it records (the copy timing runs only on a GPU)."""
from __future__ import annotations

import subprocess

import pytest
from gpu_scripts import gpu_script


@pytest.fixture(scope="module")
def probe():
    return gpu_script("bandwidth_probe")


def test_gpu_identity_names_each_queried_field(probe, monkeypatch):
    line = "GPU-1234, 165, 00000000:19:00.0, 2619 MHz, 1980 MHz, 2619 MHz, 1980 MHz, 41, 118.52 W\n"
    seen = {}

    def fake_run(argv, **kw):
        seen["argv"] = argv
        return subprocess.CompletedProcess(argv, 0, stdout=line, stderr="")
    monkeypatch.setattr(probe.subprocess, "run", fake_run)
    ident = probe.gpu_identity()
    assert ident["uuid"] == "GPU-1234" and ident["clocks.mem"] == "2619 MHz" and ident["power.draw"] == "118.52 W"
    assert list(ident) == probe.SMI_FIELDS.split(",")
    assert f"--query-gpu={probe.SMI_FIELDS}" in seen["argv"]


def test_gpu_identity_is_empty_without_nvidia_smi(probe, monkeypatch):
    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])
    monkeypatch.setattr(probe.subprocess, "run", missing)
    assert probe.gpu_identity() == {}
