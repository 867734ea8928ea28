"""Bad arguments raise what transformers raises (ValueError, TypeError, OSError's
FileNotFoundError), with tfm's messages; the model is still usable after."""
import numpy as np
import pytest

import tfm
from conftest import fixture_dir, reference


@pytest.fixture(scope="module")
def model():
    return tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen3"), device_map="cpu")


@pytest.mark.parametrize("kwargs, message", [
    (dict(do_sample=True, temperature=0.0),
     "`temperature` \\(=0.0\\) has to be a strictly positive"),
    (dict(do_sample=True, top_k=-3), "`top_k` has to be a strictly positive integer"),
    (dict(do_sample=True, top_p=-0.5), "`top_p` has to be a float > 0 and < 1"),
    (dict(repetition_penalty=0.0), "`penalty` has to be a strictly positive float"),
    (dict(max_new_tokens=0), "`max_new_tokens` must be greater than 0"),
    (dict(not_a_setting=1), "model_kwargs` are not used by the model: \\['not_a_setting'\\]"),
])
def test_generation_settings_transformers_refuses(model, kwargs, message):
    ids = np.array(reference("qwen3")["input_ids"])
    with pytest.raises(ValueError, match=message):
        model.generate(ids, **kwargs)
    assert model.generate(ids, max_new_tokens=1).shape == (2, 13)


def test_a_model_that_is_nowhere(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such/model"):
        tfm.AutoModelForCausalLM.from_pretrained("no-such/model")
    with pytest.raises(OSError):
        tfm.AutoTokenizer.from_pretrained(str(tmp_path / "missing"))


def test_ids_that_are_not_a_matrix(model):
    with pytest.raises(ValueError, match="input_ids must be a 2-D array"):
        model(np.array([1, 2, 3]))


def test_an_id_outside_the_vocabulary_is_a_runtime_error(model):
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        model(np.array([[1, 5000]]))


def test_training_arguments_transformers_refuses():
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        tfm.TrainingArguments(output_dir="x", no_such_option=1)
    with pytest.raises(ValueError, match="learning_rate"):
        tfm.TrainingArguments(output_dir="x", learning_rate=float("inf"))
    with pytest.raises(ValueError, match="report_to"):
        tfm.TrainingArguments(output_dir="x", report_to="wandb")
    with pytest.raises(ValueError, match="tp_size"):
        tfm.DistributedConfig(tp_size=0)
    with pytest.raises(ValueError, match="ep_size"):
        tfm.DistributedConfig(tp_size=2, ep_size=0)


def test_expert_parallelism_is_transformers_flag():
    assert tfm.DistributedConfig(tp_size=4, enable_expert_parallel=True).ep_size == 4
    assert tfm.DistributedConfig(tp_size=4).ep_size == 1
    # One process has no expert-parallel ranks to split over: the C++ side names the field.
    with pytest.raises(RuntimeError, match="ep_size=2 must be 1, tp_size=1"):
        tfm.AutoModelForCausalLM.from_pretrained(
            fixture_dir("mixtral"), device_map="cpu",
            distributed_config=tfm.DistributedConfig(ep_size=2))
