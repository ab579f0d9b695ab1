import json

import pytest

transformers = pytest.importorskip("transformers")

from haggler.engine.backends.embedded import embedded_model_dir  # noqa: E402


def test_the_embedded_model_is_an_ordinary_trainable_savable_folder(tmp_path):
    folder = embedded_model_dir()
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] and "quantization_config" not in config
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    model.save_pretrained(tmp_path / "copy")  # a fine-tuned model must be savable for evaluation
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "copy")
    assert again.num_parameters() == model.num_parameters() > 100_000_000
