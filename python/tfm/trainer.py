"""transformers' TrainingArguments and Trainer over tfm's C++ Trainer: the training step, clipping
and AdamW as compiled graphs; logs in output_dir/logs.jsonl, checkpoints as transformers writes
them."""
import collections
import os

from . import _tfm

TrainOutput = collections.namedtuple("TrainOutput", ["global_step", "training_loss", "metrics"])

# Accepted for scripts written for transformers, and changing nothing here: tfm logs to
# output_dir/logs.jsonl and reports nowhere else.
_NO_EFFECT = {"report_to": ("none", None, [], "all"), "logging_dir": None}


class TrainingArguments:
    """transformers' TrainingArguments where tfm supports the option, with its names and defaults
    (torch_compile defaults to True: tfm compiles one step per shape)."""

    def __init__(self, output_dir="trainer_output", **kwargs):
        native = _tfm.TrainingArguments()
        native.output_dir = str(output_dir)
        fields = [f for f in dir(native) if not f.startswith("_") and f != "validate"]
        for name, value in kwargs.items():
            if name in _NO_EFFECT:
                allowed = _NO_EFFECT[name]
                if allowed is not None and value not in allowed:
                    raise ValueError(f"{name}={value!r} is not supported: tfm logs to "
                                     "output_dir/logs.jsonl")
                continue
            if name not in fields:
                raise TypeError(f"TrainingArguments.__init__() got an unexpected keyword argument "
                                f"'{name}'")
            setattr(native, name, value)
        native.validate()
        self._native = native

    def __getattr__(self, name):
        return getattr(self.__dict__["_native"], name)


class DataCollatorForLanguageModeling:
    """transformers' collator for causal language modeling (mlm=False): labels are the input ids,
    padding left out of the loss. It is how tfm's Trainer always collates; mlm=True (masked
    language modeling) is not a causal LM's objective."""

    def __init__(self, tokenizer=None, mlm=True, **kwargs):
        if mlm:
            raise ValueError("tfm trains causal language models: use "
                             "DataCollatorForLanguageModeling(tokenizer, mlm=False)")
        if kwargs:
            raise TypeError(f"DataCollatorForLanguageModeling: unsupported arguments "
                            f"{sorted(kwargs)}")
        self.tokenizer = tokenizer
        self.mlm = mlm


class Trainer:
    """Trains `model` on `train_dataset`: a list of texts (or of token id lists), a .txt/.jsonl
    path, or a `datasets.Dataset` with a "text" or "input_ids" column. Texts are tokenized with
    `processing_class` (or `tokenizer`) and packed into rows of `max_length` tokens (1024 unless
    given), as run_clm.py groups them (padded rows with padding=True); rows of token ids are the
    rows, as transformers' Trainer takes a tokenized dataset (padded to the longest; packed to
    `max_length` where it is given)."""

    def __init__(self, model=None, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, tokenizer=None, max_length=None,
                 padding=False):
        if model is None or train_dataset is None:
            raise ValueError("Trainer needs a model and a train_dataset")
        if data_collator is not None and not isinstance(data_collator,
                                                        DataCollatorForLanguageModeling):
            raise TypeError("tfm's Trainer collates as DataCollatorForLanguageModeling(mlm=False) "
                            f"does; got {type(data_collator).__name__}")
        self.model = model
        self.args = args if args is not None else TrainingArguments()
        self.tokenizer = processing_class if processing_class is not None else tokenizer
        native_tokenizer = self.tokenizer._native if self.tokenizer is not None else None
        train = _rows(train_dataset, "train_dataset", native_tokenizer, max_length, padding)
        evaluation = None
        if eval_dataset is not None:
            evaluation = _rows(eval_dataset, "eval_dataset", native_tokenizer, max_length, padding)
        tokenizer_dir = ""
        if self.tokenizer is not None and os.path.isdir(self.tokenizer.name_or_path):
            tokenizer_dir = self.tokenizer.name_or_path
        self._native = _tfm.Trainer(model._native, self.args._native, train, evaluation,
                                    tokenizer_dir)

    def train(self, resume_from_checkpoint=None):
        if resume_from_checkpoint is not None:
            self.args._native.resume_from_checkpoint = (
                "last" if resume_from_checkpoint is True else str(resume_from_checkpoint))
        out = self._native.train()
        metrics = {k: v for k, v in out.items() if k != "global_step"}
        metrics["train_loss"] = metrics.pop("training_loss")
        return TrainOutput(out["global_step"], out["training_loss"], metrics)

    def evaluate(self):
        return {"eval_loss": self._native.evaluate()}

    def save_model(self, output_dir=None):
        self.model.save_pretrained(output_dir or self.args.output_dir)


def _rows(data, name, tokenizer, max_length, padding):
    if isinstance(data, (str, os.PathLike)):
        return _tfm.TokenRows.from_file(str(data), tokenizer, max_length or 1024, padding)
    if hasattr(data, "column_names"):  # a datasets.Dataset
        column = "input_ids" if "input_ids" in data.column_names else "text"
        if column not in data.column_names:
            raise ValueError(f"{name} has no 'text' or 'input_ids' column: {data.column_names}")
        data = list(data[column])
    data = list(data)
    if data and not isinstance(data[0], str) and max_length is None:
        # Token id rows as they are: padded to the longest (padding carries no loss).
        longest = max(len(row) for row in data)
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        return _tfm.TokenRows.from_examples(data, tokenizer, longest, True, name,
                                            pad if pad is not None else 0)
    return _tfm.TokenRows.from_examples(data, tokenizer, max_length or 1024, padding, name)
