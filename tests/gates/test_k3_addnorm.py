"""numerics_model's kernel on/off pair on the K2-style residual (the -addnorm presets): the
only decode path on which an add_rmsnorm kernel is called."""
from __future__ import annotations

import pytest

from gates import _k3
from harness import paths
from harness.model import Residual
from harness.model.sampling import SamplingParams


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference_add_rmsnorm(x, residual, weight, out, residual_out):
    import reference_impls

    r = reference_impls.get("add_rmsnorm").run_reference({"x": x, "residual": residual, "weight": weight})
    out.copy_(r["out"])
    residual_out.copy_(r["residual_out"])


def test_addnorm_pair_counts_add_rmsnorm_kernel_calls_on_and_none_off():
    pair = _k3.build_pair("add_rmsnorm", None, paths.root(), "tiny-addnorm", 0, "cpu", on_fn=_reference_add_rmsnorm)
    assert pair.cfg.residual is Residual.ADD_NORM and pair.cfg.name == "tiny-addnorm"
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 2, 3), 3, SamplingParams())
    prompt_steps, decode_steps = 3, r["tokens"] - 1                 # the last step is compared, not decoded
    assert r["kernel_calls_on"] == 2 * pair.cfg.n_layers * (prompt_steps + decode_steps)
    assert r["kernel_calls_off"] == 0
    assert {row["reason"] for row in r["trace"]["off"]} == {"disabled"}
    assert r["kl_per_step"] == [0.0] * r["tokens"] and r["greedy_agreement"] == 1.0


def test_addnorm_layer_override_and_plain_pair_never_calls_add_rmsnorm():
    pair = _k3.build_pair("add_rmsnorm", None, paths.root(), "tiny-addnorm:2", 0, "cpu", on_fn=_reference_add_rmsnorm)
    assert pair.cfg.n_layers == 2
    plain = _k3.build_pair("add_rmsnorm", None, paths.root(), "tiny", 0, "cpu", on_fn=_reference_add_rmsnorm)
    r = _k3.lockstep(plain, _k3.prompts(plain.tokenizer, 1, 2), 1, SamplingParams())
    assert r["kernel_calls_on"] == 0 and r["trace"]["on"] == []


def test_gate_cli_accepts_addnorm_presets_and_rejects_unknown_names(repo, capsys):
    from harness.cli import main

    _, cid = repo

    def cli(*argv: str) -> tuple[int, str]:
        try:
            main(list(argv))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        return code, capsys.readouterr().err

    code, err = cli("gate", "moe_router", cid, "--only", "static", "--no-write", "--model-config", "k3-tp8-rank-addnorm:3")
    assert code == 0, err
    for bad, why in (("k3-tp8-rank-addnorn", "unknown model config"), ("tiny-addnorm:x", "not an integer")):
        code, err = cli("gate", "moe_router", cid, "--only", "static", "--model-config", bad)
        assert code == 2 and why in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["tiny:0", "k3-tp8-rank:0", "tiny:-2"])
def test_a_layer_count_below_one_is_a_user_error(name):
    """"tiny:0" used to mean tiny's own layer count (get_config(preset, 0 or None))."""
    from harness.errors import UserError

    with pytest.raises(UserError, match="layer count must be >= 1"):
        _k3.parse_model_config(name, 3)
    assert _k3.parse_model_config("tiny:1", 3) == ("tiny", 1)
    assert _k3.parse_model_config("k3-tp8-rank", 3) == ("k3-tp8-rank", 3)
