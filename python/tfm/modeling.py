"""AutoModelForCausalLM: transformers' model interface over tfm's compiled C++ models."""
import json
import types

from . import _tfm
from ._arrays import like, to_numpy


class DistributedConfig:
    """How a model is split: tensor parallel over tp_size ranks, FSDP over fsdp_size, a
    mixture-of-experts model's experts over ep_size ranks: the tensor-parallel ones (tp_size) or,
    with tp_size 1, the FSDP ones (fsdp_size, rows exchanged by all-to-all) (transformers'
    DistributedConfig; enable_expert_parallel=True means ep_size=tp_size). Across processes
    started by tfmrun; on the pjrt device, one program partitioned over tp_size x fsdp_size of the
    plugin's devices."""

    def __init__(self, tp_size=1, fsdp_size=1, ep_size=None, enable_expert_parallel=False):
        if ep_size is None:
            ep_size = tp_size if enable_expert_parallel else 1
        for name, value in (("tp_size", tp_size), ("fsdp_size", fsdp_size), ("ep_size", ep_size)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.tp_size = tp_size
        self.fsdp_size = fsdp_size
        self.ep_size = ep_size


def _dtype_name(dtype):
    """None or "auto" (the checkpoint's), "float32", "bfloat16", or a torch/NumPy dtype."""
    if dtype is None or dtype == "auto":
        return None
    name = str(dtype).replace("torch.", "")
    names = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16"}
    if name not in names:
        raise ValueError(f"dtype {dtype!r} is not supported: use float32 or bfloat16")
    return names[name]


class CausalLMOutput:
    """A forward pass's result: `logits` [batch, sequence, vocabulary], f32."""

    def __init__(self, logits):
        self.logits = logits

    def __getitem__(self, key):
        if key in (0, "logits"):
            return self.logits
        raise KeyError(key)


_GENERATION_FIELDS = ("max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k",
                      "top_p", "repetition_penalty", "eos_token_id", "pad_token_id",
                      "cache_implementation", "seed", "max_length")


class GenerationConfig:
    """transformers' GenerationConfig for the settings tfm's generate() has (and `seed`, tfm's
    own); another setting is refused rather than ignored."""

    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(_GENERATION_FIELDS))
        if unknown:
            raise ValueError(f"GenerationConfig: tfm's generate() has no {unknown}")
        self.__dict__.update(kwargs)

    def to_dict(self):
        return dict(self.__dict__)


class GenerationKwargs:
    """generate()'s settings, named as transformers' GenerationConfig."""

    @classmethod
    def native(cls, generation_config, kwargs):
        settings = generation_config.to_dict() if generation_config is not None else {}
        settings.update(kwargs)
        unused = sorted(set(settings) - set(_GENERATION_FIELDS))
        if unused:
            raise ValueError(f"The following `model_kwargs` are not used by the model: {unused} "
                             "(note: typos in the generate arguments will also show up in this "
                             "list)")
        config = _tfm.GenerationConfig()
        for name, value in settings.items():
            if name == "max_length" or value is None:
                continue  # max_length is read below, against the prompt's length
            if name == "eos_token_id":
                value = [value] if isinstance(value, int) else list(value)
            setattr(config, name, value)
        # max_new_tokens, where given, takes precedence over max_length, as in transformers.
        max_length = None if "max_new_tokens" in settings else settings.get("max_length")
        return config, max_length


class PreTrainedModel:
    """A causal LM as tfm compiled it: one graph per input shape on its device."""

    def __init__(self, native, name_or_path):
        self._native = native
        self.name_or_path = name_or_path
        # The last generate()'s counters (tfm's, not transformers'): prompt and new tokens, time
        # to the first token and for the rest, graphs compiled or loaded.
        self.last_generation_stats = None
        values = json.loads(native.config)
        self.config = types.SimpleNamespace(**values)
        self.config.to_dict = lambda: dict(values)

    @property
    def device(self):
        return self._native.device

    @property
    def dtype(self):
        return self._native.dtype

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def __call__(self, input_ids=None, attention_mask=None, **kwargs):
        return self.forward(input_ids, attention_mask, **kwargs)

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        unsupported = set(kwargs) - {"use_cache", "return_dict"}
        if unsupported:
            raise TypeError(f"forward() got unsupported arguments {sorted(unsupported)}")
        if input_ids is None:
            raise ValueError("You have to specify input_ids")
        logits = self._native.forward(to_numpy(input_ids), to_numpy(attention_mask), True)
        return CausalLMOutput(like(logits, input_ids))

    def generate(self, inputs=None, generation_config=None, streamer=None, input_ids=None,
                 attention_mask=None, **kwargs):
        ids = inputs if inputs is not None else input_ids
        if ids is None:
            raise ValueError("generate() needs input_ids")
        config, max_length = GenerationKwargs.native(generation_config, kwargs)
        prompt = to_numpy(ids)
        if max_length is not None:  # the whole sequence's length, prompt included
            config.max_new_tokens = max(0, int(max_length) - prompt.shape[-1])
        if streamer is not None:
            if prompt.shape[0] != 1:
                raise ValueError("TextStreamer only supports batch size 1")
            streamer.put(prompt[0])
            on_token = lambda row, token: streamer.put([token])  # noqa: E731
        else:
            on_token = None
        try:
            out, self.last_generation_stats = self._native.generate(
                prompt, to_numpy(attention_mask), config, on_token)
        finally:
            if streamer is not None:
                streamer.end()
        return like(out, ids)

    def save_pretrained(self, save_directory, dtype=None):
        self._native.save_pretrained(str(save_directory), _dtype_name(dtype))


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, *, dtype=None, torch_dtype=None,
                        device_map="auto", distributed_config=None, **kwargs):
        unsupported = set(kwargs) - {"trust_remote_code", "low_cpu_mem_usage"}
        if unsupported:
            raise TypeError(f"from_pretrained() got unsupported arguments {sorted(unsupported)}")
        split = distributed_config or DistributedConfig()
        native = _tfm.CausalLM.from_pretrained(
            str(pretrained_model_name_or_path), _dtype_name(dtype or torch_dtype),
            _device(device_map), split.tp_size, split.fsdp_size, split.ep_size)
        return PreTrainedModel(native, str(pretrained_model_name_or_path))

    @staticmethod
    def from_config(config_json, *, dtype=None, device_map="auto", distributed_config=None,
                    seed=0):
        split = distributed_config or DistributedConfig()
        native = _tfm.CausalLM.from_config(str(config_json), _dtype_name(dtype),
                                           _device(device_map), split.tp_size, split.fsdp_size,
                                           split.ep_size, seed)
        return PreTrainedModel(native, str(config_json))


def _device(device_map):
    if device_map is None:
        return "auto"
    if not isinstance(device_map, str):
        raise ValueError(f"device_map={device_map!r}: tfm places a whole model on one device "
                         "('auto', 'cpu', 'cuda[:N]', 'pjrt[:N]', 'neuron')")
    return device_map
