"""Grammar-constrained decoding (llguidance, byte tokenizer) always yields schema-valid JSON:
with adversarial random logits over the whole vocabulary, and through the tiny model."""
from __future__ import annotations

import pytest
import torch

from harness.model import K3Decoder, get_config
from harness.model.evaluate import load_schemas
from harness.model.generate import generate
from harness.model.grammar import JsonConstraint, RowConstraints, validate
from harness.model.sampling import SamplingParams, make_generator, sample
from harness.model.tokenizer import ByteTokenizer
from harness.registry import Registry

TOK = ByteTokenizer(264)
SCHEMAS = load_schemas()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", range(6))
def test_random_logits_constrained_are_always_valid(name, seed):
    schema = SCHEMAS[name]
    cons = JsonConstraint(schema, TOK)
    ms = cons.matchers(3)
    params = SamplingParams(temperature=1.5, seed=seed)
    g = make_generator(params, "cpu")
    out: list[list[int]] = [[], [], []]
    done = [False] * 3
    for _ in range(300):
        logits = torch.randn(3, TOK.vocab_size, generator=g) * 4
        logits[:, TOK.eos_token_id] += 8.0                    # the model wants to stop early
        toks = sample(logits, params, g, cons.allowed_mask(ms)).tolist()
        assert all(cons.advance(ms, toks))
        for b, t in enumerate(toks):
            if not done[b]:
                done[b] = t == TOK.eos_token_id
                if not done[b]:
                    out[b].append(t)
        if all(done):
            break
    assert all(done)
    for ids in out:
        assert validate(schema, TOK.decode(ids)), TOK.decode(ids)


def test_validator_rejects_what_the_schema_forbids():
    s = SCHEMAS["record"]
    assert validate(s, '{"name":"Ab","age":3,"admin":true,"tags":["a"]}')
    assert not validate(s, '{"name":"ab","age":3,"admin":true,"tags":["a"]}')     # pattern
    assert not validate(s, '{"name":"Ab","age":300,"admin":true,"tags":[]}')       # maximum
    assert not validate(s, '{"name":"Ab","age":3,"admin":true}')                   # required
    assert not validate(s, '{"name":"Ab","age":3,"admin":true,"tags":[],"x":1}')    # additional
    assert not validate(s, '{"name":"Ab","age":3,')


def test_tiny_model_structured_generation_is_valid(tiny_weights):
    cfg = get_config("tiny")
    model = K3Decoder(cfg, tiny_weights, Registry())
    names = sorted(SCHEMAS)
    cons = RowConstraints([JsonConstraint(SCHEMAS[n], TOK) for n in names])
    prompts = [TOK.encode("Call a tool:"), TOK.encode("A user record as JSON")]
    res = generate(model, prompts, 120, SamplingParams(temperature=0.8, top_k=50, top_p=0.95, seed=1), cons)
    assert all(res.finished)
    for n, ids in zip(names, res.tokens):
        assert validate(SCHEMAS[n], TOK.decode(ids)), TOK.decode(ids)
