// tfm::CausalLM for python/tfm's AutoModelForCausalLM: loading, logits, generate and saving. The
// GIL is released while the model computes; generate takes it back for each token, to call the
// Python streamer and to let Ctrl-C stop the run.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "generation/generate.h"
#include "io/model_config.h"
#include "python/arrays.h"
#include "python/bindings.h"
#include "tfm/model.h"

namespace py = pybind11;

namespace tfm::python {
namespace {

std::optional<DType> dtype_named(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  if (*name == "float32") return DType::f32;
  if (*name == "bfloat16") return DType::bf16;
  throw py::value_error("dtype '" + *name + "' is not supported: use float32 or bfloat16");
}

LoadOptions load_options(const std::optional<std::string>& dtype, const std::string& device_map,
                         int tp_size, int fsdp_size, int ep_size) {
  return {.dtype = dtype_named(dtype),
          .device_map = device_map,
          .distributed = {.tp_size = tp_size, .fsdp_size = fsdp_size, .ep_size = ep_size}};
}

// Called for each step's token of row 0 (transformers' streamers take one row) with the GIL
// taken: `streamer(row, token)` where one is given, and Python's pending signals checked, so
// Ctrl-C ends the run with KeyboardInterrupt. The streamer is borrowed (the caller holds it for
// the call): the function may be copied without the GIL.
std::function<void(int, int64_t)> per_token(py::handle streamer) {
  return [streamer](int row, int64_t token) {
    if (row != 0) return;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!streamer.is_none()) streamer(row, token);
  };
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<GenerationConfig>(m, "GenerationConfig")
      .def(py::init<>())
      .def_readwrite("max_new_tokens", &GenerationConfig::max_new_tokens)
      .def_readwrite("min_new_tokens", &GenerationConfig::min_new_tokens)
      .def_readwrite("do_sample", &GenerationConfig::do_sample)
      .def_readwrite("temperature", &GenerationConfig::temperature)
      .def_readwrite("top_k", &GenerationConfig::top_k)
      .def_readwrite("top_p", &GenerationConfig::top_p)
      .def_readwrite("repetition_penalty", &GenerationConfig::repetition_penalty)
      .def_readwrite("seed", &GenerationConfig::seed)
      .def_readwrite("eos_token_id", &GenerationConfig::eos_token_id)
      .def_readwrite("pad_token_id", &GenerationConfig::pad_token_id)
      .def_readwrite("cache_implementation", &GenerationConfig::cache_implementation)
      .def("validate", [](const GenerationConfig& c) {
        raising(PyExc_ValueError, [&] { generation::check_config(c); });
      });

  py::class_<CausalLM>(m, "CausalLM")
      .def_static(
          "from_pretrained",
          [](const std::string& id_or_path, const std::optional<std::string>& dtype,
             const std::string& device_map, int tp_size, int fsdp_size, int ep_size) {
            check_findable(id_or_path);
            const LoadOptions options =
                load_options(dtype, device_map, tp_size, fsdp_size, ep_size);
            py::gil_scoped_release release;
            return AutoModelForCausalLM::from_pretrained(id_or_path, options);
          },
          py::arg("id_or_path"), py::arg("dtype"), py::arg("device_map"), py::arg("tp_size"),
          py::arg("fsdp_size"), py::arg("ep_size"))
      .def_static(
          "from_config",
          [](const std::string& config_json, const std::optional<std::string>& dtype,
             const std::string& device_map, int tp_size, int fsdp_size, int ep_size,
             uint64_t seed) {
            const LoadOptions options =
                load_options(dtype, device_map, tp_size, fsdp_size, ep_size);
            py::gil_scoped_release release;
            return AutoModelForCausalLM::from_config(config_json, options, seed);
          },
          py::arg("config_json"), py::arg("dtype"), py::arg("device_map"), py::arg("tp_size"),
          py::arg("fsdp_size"), py::arg("ep_size"), py::arg("seed"))
      .def(
          "forward",
          [](CausalLM& model, const py::handle& input_ids, const py::handle& attention_mask,
             bool all_positions) {
            const Tensor ids = id_matrix(input_ids, "input_ids");
            const std::optional<Tensor> mask = optional_id_matrix(attention_mask, "attention_mask");
            Tensor logits;
            {
              py::gil_scoped_release release;
              logits = model.forward(ids, mask ? &*mask : nullptr, all_positions);
            }
            return to_numpy(logits);
          },
          py::arg("input_ids"), py::arg("attention_mask"), py::arg("all_positions"))
      .def(
          "generate",
          [](CausalLM& model, const py::handle& input_ids, const py::handle& attention_mask,
             GenerationConfig config, py::object streamer) {
            raising(PyExc_ValueError, [&] { generation::check_config(config); });
            const Tensor ids = id_matrix(input_ids, "input_ids");
            const std::optional<Tensor> mask = optional_id_matrix(attention_mask, "attention_mask");
            config.streamer = per_token(streamer);
            Tensor out;
            GenerationStats stats;
            {
              py::gil_scoped_release release;
              out = model.generate(ids, mask ? &*mask : nullptr, config, &stats);
            }
            py::dict counters;
            counters["prompt_tokens"] = stats.prompt_tokens;
            counters["new_tokens"] = stats.new_tokens;
            counters["prefill_ms"] = stats.prefill_ms;
            counters["decode_ms"] = stats.decode_ms;
            counters["graphs_compiled"] = stats.graphs_compiled;
            counters["graphs_loaded"] = stats.graphs_loaded;
            return py::make_tuple(to_numpy(out), counters);
          },
          py::arg("input_ids"), py::arg("attention_mask"), py::arg("config"), py::arg("streamer"))
      .def(
          "save_pretrained",
          [](CausalLM& model, const std::string& dir, const std::optional<std::string>& dtype) {
            const std::optional<DType> d = dtype_named(dtype);
            py::gil_scoped_release release;
            model.save_pretrained(dir, d);
          },
          py::arg("dir"), py::arg("dtype") = py::none())
      .def_property_readonly("config",
                             [](const CausalLM& model) { return to_json(model.config()).dump(); })
      .def_property_readonly("device", [](const CausalLM& model) { return model.device().str(); })
      .def_property_readonly("dtype", [](const CausalLM& model) {
        return model.dtype() == DType::bf16 ? "bfloat16" : "float32";
      });
}

}  // namespace tfm::python
