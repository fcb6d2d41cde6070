"""Presets reproduce the published parameter counts and KV-cache sizes (shared/reference/facts.md)."""

import pytest

from llmperf import PRESETS, ModelConfig, cost, get_config

# name: (parameters, KV bytes per token in bf16), from facts.md
FACTS = {
    "llama-3-8b": (8_030_261_248, 131_072),
    "llama-3-70b": (70_553_706_496, 327_680),
    "llama-3.1-405b": (405_853_388_800, 516_096),
    "mistral-7b": (7_241_732_096, 131_072),
    "smollm2-135m": (134_515_008, 23_040),
    "smollm2-360m": (361_821_120, 40_960),
    "smollm2-1.7b": (1_711_376_384, 196_608),
}


@pytest.mark.parametrize("name", FACTS)
def test_num_params_and_kv_bytes_match_facts(name):
    cfg = PRESETS[name]
    params, kv_bytes = FACTS[name]
    assert cfg.num_params() == params
    assert cost.kv_bytes_per_token(cfg) == kv_bytes
    assert cost.kv_bytes_per_token(cfg, 4) == 2 * kv_bytes  # float32 doubles it


def test_every_preset_is_checked_or_tiny():
    assert set(PRESETS) == set(FACTS) | {"tiny"}


def test_tied_embedding_counted_once():
    cfg = PRESETS["smollm2-135m"]
    untied = cfg.with_(tie_embeddings=False)
    assert untied.num_params() - cfg.num_params() == cfg.vocab_size * cfg.d_model


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match="Unknown model preset 'llama-2'") as err:
        get_config("llama-2")
    for name in PRESETS:
        assert name in str(err.value)


def test_invalid_config_is_refused():
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        ModelConfig("bad", n_layers=1, d_model=8, n_heads=3, n_kv_heads=2, head_dim=4, d_ff=8,
                    vocab_size=10, rope_theta=1e4)
