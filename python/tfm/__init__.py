"""tfm: Hugging Face causal language models in C++, compiled per input shape, with transformers'
interface: AutoTokenizer, AutoModelForCausalLM, generate() with streamers, TrainingArguments and
Trainer. Arrays are NumPy arrays, or torch tensors (through DLPack) where torch tensors went in."""
from . import _tfm
from .modeling import (AutoModelForCausalLM, CausalLMOutput, DistributedConfig, GenerationConfig,
                       PreTrainedModel)
from .streamers import TextIteratorStreamer, TextStreamer
from .tokenization import AutoTokenizer, BatchEncoding, PreTrainedTokenizer
from .trainer import DataCollatorForLanguageModeling, Trainer, TrainingArguments, TrainOutput

use_device_plugin = _tfm.use_device_plugin
set_verbosity = _tfm.set_verbosity
set_verbosity("warning")  # as transformers' logging: compile lines only when asked ("info")

__all__ = [
    "AutoModelForCausalLM", "AutoTokenizer", "BatchEncoding", "CausalLMOutput",
    "DataCollatorForLanguageModeling",
    "DistributedConfig", "GenerationConfig", "PreTrainedModel", "PreTrainedTokenizer",
    "TextIteratorStreamer",
    "TextStreamer", "Trainer", "TrainingArguments", "TrainOutput", "set_verbosity",
    "use_device_plugin",
]
