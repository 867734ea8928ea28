// tfm's Trainer for python/tfm's Trainer and TrainingArguments: rows made from texts, token ids or
// a dataset file (as `tfm train` makes them), training and evaluation with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/bindings.h"
#include "tfm/training_args.h"
#include "training/dataset.h"
#include "training/trainer.h"

namespace py = pybind11;

namespace tfm::python {
namespace {

// Texts (strings) or token ids (lists of ints) as Examples named `source` in messages.
training::Examples examples_of(const py::list& items, const std::string& source) {
  training::Examples examples;
  examples.source = source;
  for (size_t i = 0; i < items.size(); ++i) {
    examples.lines.push_back(static_cast<int64_t>(i) + 1);
    if (py::isinstance<py::str>(items[i])) {
      examples.texts.push_back(items[i].cast<std::string>());
    } else {
      examples.ids.push_back(items[i].cast<std::vector<int32_t>>());
    }
  }
  if (!examples.texts.empty() && !examples.ids.empty()) {
    throw py::value_error(source + ": give every example as text or every one as token ids");
  }
  return examples;
}

// Rows of `max_length` tokens, packed as run_clm.py groups texts or each example padded.
training::DatasetOptions row_options(int64_t max_length, bool padded,
                                     std::optional<int32_t> pad_token_id = std::nullopt) {
  training::DatasetOptions options;
  options.max_length = max_length;
  options.shaping = padded ? training::RowShaping::kPadded : training::RowShaping::kPacked;
  options.pad_token_id = pad_token_id;
  return options;
}

}  // namespace

void bind_trainer(py::module_& m) {
  py::class_<TrainingArguments>(m, "TrainingArguments")
      .def(py::init<>())
      .def_readwrite("output_dir", &TrainingArguments::output_dir)
      .def_readwrite("bf16", &TrainingArguments::bf16)
      .def_readwrite("torch_compile", &TrainingArguments::torch_compile)
      .def_readwrite("per_device_train_batch_size",
                     &TrainingArguments::per_device_train_batch_size)
      .def_readwrite("per_device_eval_batch_size", &TrainingArguments::per_device_eval_batch_size)
      .def_readwrite("gradient_accumulation_steps",
                     &TrainingArguments::gradient_accumulation_steps)
      .def_readwrite("learning_rate", &TrainingArguments::learning_rate)
      .def_readwrite("weight_decay", &TrainingArguments::weight_decay)
      .def_readwrite("adam_beta1", &TrainingArguments::adam_beta1)
      .def_readwrite("adam_beta2", &TrainingArguments::adam_beta2)
      .def_readwrite("adam_epsilon", &TrainingArguments::adam_epsilon)
      .def_readwrite("max_grad_norm", &TrainingArguments::max_grad_norm)
      .def_readwrite("num_train_epochs", &TrainingArguments::num_train_epochs)
      .def_readwrite("max_steps", &TrainingArguments::max_steps)
      .def_readwrite("warmup_steps", &TrainingArguments::warmup_steps)
      .def_readwrite("lr_scheduler_type", &TrainingArguments::lr_scheduler_type)
      .def_readwrite("logging_steps", &TrainingArguments::logging_steps)
      .def_readwrite("eval_steps", &TrainingArguments::eval_steps)
      .def_readwrite("save_steps", &TrainingArguments::save_steps)
      .def_readwrite("save_total_limit", &TrainingArguments::save_total_limit)
      .def_readwrite("seed", &TrainingArguments::seed)
      .def_readwrite("dataloader_drop_last", &TrainingArguments::dataloader_drop_last)
      .def_readwrite("resume_from_checkpoint", &TrainingArguments::resume_from_checkpoint)
      .def_readwrite("overwrite_output_dir", &TrainingArguments::overwrite_output_dir)
      .def_readwrite("disable_tqdm", &TrainingArguments::disable_tqdm)
      .def("validate", [](const TrainingArguments& a) {
        raising(PyExc_ValueError, [&] { a.validate(); });
      });

  py::class_<training::TokenRows>(m, "TokenRows")
      .def_static(
          "from_examples",
          [](const py::list& items, const Tokenizer* tokenizer, int64_t max_length, bool padded,
             const std::string& source, std::optional<int32_t> pad_token_id) {
            const training::DatasetOptions options = row_options(max_length, padded, pad_token_id);
            training::Examples examples = examples_of(items, source);
            return raising(PyExc_ValueError, [&] {
              return training::make_rows(std::move(examples), tokenizer, options);
            });
          },
          py::arg("items"), py::arg("tokenizer"), py::arg("max_length"), py::arg("padded"),
          py::arg("source"), py::arg("pad_token_id") = py::none())
      .def_static(
          "from_file",
          [](const std::string& path, const Tokenizer* tokenizer, int64_t max_length,
             bool padded) {
            return training::load_rows(path, tokenizer, row_options(max_length, padded));
          },
          py::arg("path"), py::arg("tokenizer"), py::arg("max_length"), py::arg("padded"))
      .def_property_readonly("num_rows", &training::TokenRows::num_rows);

  py::class_<training::Trainer>(m, "Trainer")
      .def(py::init([](CausalLM& model, const TrainingArguments& args,
                       const training::TokenRows& train,
                       const std::optional<training::TokenRows>& eval,
                       const std::string& tokenizer_dir) {
             raising(PyExc_ValueError, [&] { args.validate(); });
             return std::make_unique<training::Trainer>(model, args, train, eval, tokenizer_dir);
           }),
           py::arg("model"), py::arg("args"), py::arg("train"), py::arg("eval"),
           py::arg("tokenizer_dir"), py::keep_alive<1, 2>())
      .def(
          "train",
          [](training::Trainer& trainer) {
            // Ctrl-C ends the run after the step it comes in (KeyboardInterrupt).
            trainer.set_step_callback([](int64_t) {
              py::gil_scoped_acquire gil;
              if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            });
            training::TrainOutput out;
            {
              py::gil_scoped_release release;
              out = trainer.train();
            }
            py::dict result;
            result["global_step"] = out.global_step;
            result["training_loss"] = out.training_loss;
            result["train_runtime"] = out.train_runtime_s;
            result["train_tokens_per_second"] = out.tokens_per_s;
            if (out.eval_loss) result["eval_loss"] = *out.eval_loss;
            return result;
          })
      .def("evaluate", [](training::Trainer& trainer) {
        py::gil_scoped_release release;
        return trainer.evaluate();
      });
}

}  // namespace tfm::python
