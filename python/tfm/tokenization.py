"""AutoTokenizer: transformers' tokenizer interface over tfm's C++ tokenizer."""
import json
import os
import shutil

from . import _tfm
from ._arrays import as_tensors, to_numpy


class BatchEncoding(dict):
    """What a tokenizer call returns: a dict of input_ids and attention_mask, also read as
    attributes (encoding.input_ids), as transformers' BatchEncoding."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e


class PreTrainedTokenizer:
    """A tokenizer.json (and tokenizer_config.json) loaded as `tokenizers` reads it."""

    def __init__(self, native, source):
        self._native = native
        self._source = source
        self.name_or_path = source
        config = {}
        config_path = os.path.join(source, "tokenizer_config.json") if os.path.isdir(source) else ""
        if config_path and os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        self.padding_side = config.get("padding_side", "right")
        self.truncation_side = "right"
        self.model_max_length = config.get("model_max_length")

    @property
    def eos_token_id(self):
        return self._native.eos_token_id

    @property
    def pad_token_id(self):
        return self._native.pad_token_id

    @property
    def bos_token_id(self):
        return self._native.bos_token_id

    @property
    def eos_token(self):
        return None if self.eos_token_id is None else self._native.id_to_token(self.eos_token_id)

    @property
    def pad_token(self):
        return None if self.pad_token_id is None else self._native.id_to_token(self.pad_token_id)

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def __len__(self):
        return self._native.vocab_size

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._native.token_to_id(tokens)
        return [self._native.token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._native.id_to_token(ids)
        return [self._native.id_to_token(int(i)) for i in ids]

    def __call__(self, text, add_special_tokens=True, padding=False, truncation=False,
                 max_length=None, return_tensors=None, return_attention_mask=True):
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("text input must be of type `str` (single example) or `List[str]` "
                             "(batch of examples).")
        if padding in (True, "longest"):
            pad, to_max = True, False
        elif padding in (False, "do_not_pad"):
            pad, to_max = False, False
        elif padding == "max_length":
            if max_length is None:
                raise ValueError("padding='max_length' needs max_length")
            pad, to_max = True, True
        else:
            raise ValueError(f"padding={padding!r} is not True, False, 'longest', 'max_length' or "
                             "'do_not_pad'")
        if pad and self.pad_token_id is None:
            raise ValueError(
                "Asking to pad but the tokenizer does not have a padding token. Please select a "
                "token to use as `pad_token` `(tokenizer.pad_token = tokenizer.eos_token e.g.)` or "
                "add a new pad token via `tokenizer.add_special_tokens({'pad_token': '[PAD]'})`.")
        ids, mask = self._native.encode_batch(
            texts, add_special_tokens, pad, to_max, self.padding_side == "left", max_length,
            bool(truncation))
        if single and return_tensors is None:
            ids, mask = ids[0], mask[0]
        out = BatchEncoding(input_ids=as_tensors(ids, return_tensors))
        if return_attention_mask:
            out["attention_mask"] = as_tensors(mask, return_tensors)
        return out

    def encode(self, text, add_special_tokens=True, **kwargs):
        if kwargs:
            return self(text, add_special_tokens=add_special_tokens, **kwargs)["input_ids"]
        return self._native.encode(text, add_special_tokens)

    def decode(self, token_ids, skip_special_tokens=False, **kwargs):
        ids = to_numpy(token_ids)
        ids = [int(ids)] if ids.ndim == 0 else [int(i) for i in ids.reshape(-1)]
        return self._native.decode(ids, skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False, **kwargs):
        return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in sequences]

    def apply_chat_template(self, conversation, tokenize=True, add_generation_prompt=False,
                            return_tensors=None, return_dict=False, enable_thinking=True,
                            **kwargs):
        if kwargs:
            raise TypeError(f"apply_chat_template: unsupported arguments {sorted(kwargs)}")
        text = self._native.apply_chat_template(
            [dict(m) for m in conversation], add_generation_prompt, enable_thinking)
        if not tokenize:
            return text
        ids = self._native.encode(text, False)
        if return_dict:
            return BatchEncoding(input_ids=as_tensors([ids], return_tensors) if return_tensors
                                 else ids,
                                 attention_mask=as_tensors([[1] * len(ids)], return_tensors)
                                 if return_tensors else [1] * len(ids))
        return as_tensors([ids], return_tensors) if return_tensors else ids

    def save_pretrained(self, save_directory):
        """Copies the tokenizer's files (tokenizer.json, tokenizer_config.json and the special
        tokens' map where present) into `save_directory`."""
        os.makedirs(save_directory, exist_ok=True)
        source = self._source if os.path.isdir(self._source) else os.path.dirname(self._source)
        saved = []
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            path = os.path.join(source, name)
            if os.path.exists(path):
                shutil.copyfile(path, os.path.join(save_directory, name))
                saved.append(os.path.join(save_directory, name))
        return tuple(saved)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, **kwargs):
        unsupported = set(kwargs) - {"use_fast", "trust_remote_code", "padding_side"}
        if unsupported:
            raise TypeError(f"AutoTokenizer.from_pretrained: unsupported arguments "
                            f"{sorted(unsupported)}")
        native = _tfm.Tokenizer.from_pretrained(str(pretrained_model_name_or_path))
        tokenizer = PreTrainedTokenizer(native, _source_dir(str(pretrained_model_name_or_path)))
        if "padding_side" in kwargs:
            tokenizer.padding_side = kwargs["padding_side"]
        return tokenizer


def _source_dir(name):
    """The folder the tokenizer came from (a Hub id resolved in the local cache)."""
    if os.path.exists(name):
        return name
    return _tfm.resolve_pretrained(name)
