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


class Trainer:
    """Trains `model` on `train_dataset`: a list of texts (or of token id lists), a .txt/.jsonl
    path, or a `datasets.Dataset` with a "text" or "input_ids" column. Texts are tokenized with
    `processing_class` (or `tokenizer`) and packed into rows of `max_length` tokens, as run_clm.py
    groups them (padded rows with padding=True)."""

    def __init__(self, model=None, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, tokenizer=None, data_collator=None, max_length=1024,
                 padding=False):
        if model is None or train_dataset is None:
            raise ValueError("Trainer needs a model and a train_dataset")
        self.model = model
        self.args = args if args is not None else TrainingArguments()
        self.tokenizer = processing_class if processing_class is not None else tokenizer
        native_tokenizer = self.tokenizer._native if self.tokenizer is not None else None
        rows = lambda data, name: _rows(data, name, native_tokenizer, max_length, padding)  # noqa: E731
        train = rows(train_dataset, "train_dataset")
        evaluation = rows(eval_dataset, "eval_dataset") if eval_dataset is not None else None
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
        return _tfm.TokenRows.from_file(str(data), tokenizer, max_length, padding)
    if hasattr(data, "column_names"):  # a datasets.Dataset
        column = "input_ids" if "input_ids" in data.column_names else "text"
        if column not in data.column_names:
            raise ValueError(f"{name} has no 'text' or 'input_ids' column: {data.column_names}")
        data = list(data[column])
    return _tfm.TokenRows.from_examples(list(data), tokenizer, max_length, padding, name)
