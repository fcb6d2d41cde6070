"""The serving config: every setting resolved once, from the device, with vLLM's names; and the command line."""

import pytest

from llmperf.paged_cache import bytes_per_block
from llmperf.serve.config import default_num_blocks, resolve


def test_the_defaults_hold_max_num_seqs_whole_contexts(tiny):
    config = resolve(tiny, max_num_seqs=3, max_model_len=100)
    per_block = bytes_per_block(tiny.cfg, 16, tiny.dtype)
    assert config.num_blocks == 3 * 7 and config.kv_cache_memory_bytes == 21 * per_block  # ceil(100 / 16) = 7
    assert (config.block_size, config.enable_prefix_caching, config.prefill_chunk, config.device) == (16, True, 512,
                                                                                                      "cpu")
    assert not config.fused and "KV pool of 21 blocks of 16 positions" in config.banner()
    assert "prefix caching on" in config.banner()


def test_a_gpu_pool_is_its_utilisation_share_but_no_more_than_can_be_held():
    assert default_num_blocks(8, 10, 1000, gpu_share=None) == 80
    assert default_num_blocks(8, 10, 1000, gpu_share=10**9) == 80  # room for far more: the contexts cap it
    assert default_num_blocks(8, 10, 1000, gpu_share=25_500) == 25  # the share decides
    assert default_num_blocks(8, 10, 1000, gpu_share=-5) == 0  # nothing left: refused by resolve


def test_the_pool_given_in_bytes_or_blocks(tiny):
    per_block = bytes_per_block(tiny.cfg, 4, tiny.dtype)
    assert resolve(tiny, max_model_len=32, block_size=4, kv_cache_memory_bytes=20 * per_block + 5).num_blocks == 20
    assert resolve(tiny, max_model_len=32, block_size=4, num_blocks=9).num_blocks == 9


@pytest.mark.parametrize("settings, message", [
    (dict(max_model_len=64, num_blocks=3), r"cannot hold one request of max_model_len 64 tokens, which needs 4 blocks"),
    (dict(num_blocks=200, kv_cache_memory_bytes=10**6), "num_blocks or kv_cache_memory_bytes, not both"),
    (dict(block_size=0), "block_size must be at least 1"),
    (dict(max_num_seqs=0), "max_num_seqs must be at least 1"),
    (dict(max_model_len=1), "max_model_len must lie in 2.."),
    (dict(policy="fifo"), "Unknown batching policy"),
    (dict(prefill_chunk=0), "prefill_chunk must be at least 1"),
])
def test_bad_settings_are_refused_naming_the_setting(tiny, settings, message):
    with pytest.raises(ValueError, match=message):
        resolve(tiny, **{"max_model_len": 32, **settings})


@pytest.mark.parametrize("argv, message", [
    (["--block-size", "0"], "need --block-size >= 1"),
    (["--num-blocks", "0"], "a KV pool of at least 1 block"),
    (["--num-blocks", "4", "--kv-cache-memory-bytes", "100"], "not allowed with argument"),
    (["--max-num-seqs", "0"], "need --max-num-seqs >= 1"),
])
def test_the_command_line_refuses_bad_pool_settings_before_loading_the_model(capsys, monkeypatch, argv, message):
    from llmperf import weights
    from llmperf.serve.__main__ import main

    monkeypatch.setattr(weights, "load_smollm2", lambda *a: pytest.fail("loaded the model before checking"))
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def stub_command_line(monkeypatch, model, seen: dict):
    """llmperf.serve's command line with `model` loaded and nothing served: the settings it resolves land in
    seen["config"]. Returns its module."""
    from llmperf.serve import __main__ as cli

    monkeypatch.setattr("llmperf.weights.load_smollm2", lambda device, dtype: (model, None))
    monkeypatch.setattr(cli, "serve", lambda app, host, port: None)

    class App:  # what create_app's stand-in returns is printed through .state.config
        pass

    def app_with(config):
        app = App()
        app.state = App()
        app.state.config = config
        seen["config"] = config
        return app

    monkeypatch.setattr(cli, "create_app", lambda model, tokenizer, config: app_with(config))
    return cli


def test_the_command_line_takes_vllms_names_and_the_old_ones(monkeypatch, tiny):
    seen = {}
    cli = stub_command_line(monkeypatch, tiny, seen)
    cli.main(["--plain", "--max-batch", "2", "--context", "64", "--block-size", "8", "--no-enable-prefix-caching"])
    c = seen["config"]
    assert (c.max_num_seqs, c.max_model_len, c.block_size, c.enable_prefix_caching, c.num_blocks) == (2, 64, 8, False,
                                                                                                      16)
    cli.main(["--plain", "--max-num-seqs", "3", "--max-model-len", "64", "--num-gpu-blocks-override", "9"])
    assert (seen["config"].max_num_seqs, seen["config"].num_blocks) == (3, 9)


@pytest.mark.parametrize("unsaved", [None, "2 of this host's choices were measured while other work held ..."])
def test_the_server_says_when_its_choices_were_measured_on_a_busy_host(monkeypatch, capsys, tiny, unsaved):
    from llmperf.fast import tuning

    cli = stub_command_line(monkeypatch, tiny, {})
    monkeypatch.setattr(tuning, "unsaved_said", lambda: unsaved)
    cli.main(["--plain", "--context", "64"])
    assert ("Note: 2 of this host's choices" in capsys.readouterr().out) == (unsaved is not None)
