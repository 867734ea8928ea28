// tfm::Tokenizer for python/tfm's AutoTokenizer: encoding (one text or a padded batch), decoding,
// streaming decode and the chat template.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/bindings.h"
#include "tfm/tokenizer.h"

namespace py = pybind11;

namespace tfm::python {
namespace {

std::vector<int32_t> ids_of(const std::vector<int64_t>& ids) {
  return std::vector<int32_t>(ids.begin(), ids.end());
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer")
      .def_static(
          "from_pretrained",
          [](const std::string& id_or_path) {
            check_findable(id_or_path);
            return AutoTokenizer::from_pretrained(id_or_path);
          },
          py::arg("id_or_path"))
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "encode_batch",
          [](const Tokenizer& t, const std::vector<std::string>& texts, bool add_special_tokens,
             bool padding, bool pad_to_max_length, bool left, std::optional<size_t> max_length,
             bool truncation) {
            BatchEncodeOptions o{.add_special_tokens = add_special_tokens,
                                 .padding = padding,
                                 .pad_to_max_length = pad_to_max_length,
                                 .padding_side = left ? PaddingSide::kLeft : PaddingSide::kRight,
                                 .max_length = max_length,
                                 .truncation = truncation};
            BatchEncoding b = raising(PyExc_ValueError, [&] { return t.encode_batch(texts, o); });
            return py::make_tuple(b.input_ids, b.attention_mask);
          },
          py::arg("texts"), py::arg("add_special_tokens"), py::arg("padding"),
          py::arg("pad_to_max_length"), py::arg("left"), py::arg("max_length"),
          py::arg("truncation"))
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int64_t>& ids, bool skip_special_tokens) {
            return t.decode(ids_of(ids), skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def(
          "apply_chat_template",
          [](const Tokenizer& t, const std::vector<std::map<std::string, std::string>>& messages,
             bool add_generation_prompt, bool enable_thinking) {
            std::vector<ChatMessage> chat;
            for (const auto& message : messages) {
              const auto role = message.find("role"), content = message.find("content");
              if (role == message.end() || content == message.end()) {
                throw py::value_error("each message needs a 'role' and a 'content'");
              }
              chat.push_back({role->second, content->second});
            }
            return raising(PyExc_ValueError, [&] {
              return t.apply_chat_template(chat, add_generation_prompt, enable_thinking);
            });
          },
          py::arg("messages"), py::arg("add_generation_prompt"), py::arg("enable_thinking"))
      .def_property_readonly("eos_token_id", &Tokenizer::eos_token_id)
      .def_property_readonly("pad_token_id", &Tokenizer::pad_token_id)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_token_id)
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", &Tokenizer::id_to_token, py::arg("id"))
      .def("is_special", &Tokenizer::is_special, py::arg("id"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size);

  // Holds its tokenizer (a Python reference) as long as it lives.
  py::class_<StreamingDecoder>(m, "StreamingDecoder")
      .def(py::init<const Tokenizer&, bool>(), py::arg("tokenizer"),
           py::arg("skip_special_tokens") = false, py::keep_alive<1, 2>())
      .def("put", &StreamingDecoder::put, py::arg("id"))
      .def("flush", &StreamingDecoder::flush);
}

}  // namespace tfm::python
