// AdamW's state as a safetensors file: exp_avg and exp_avg_sq as F32 [total] and the step count as
// an I64 scalar. A learning-rate schedule is a function of the step count, so this file is also
// the scheduler's state.
#include <algorithm>
#include <string>

#include "io/safetensors.h"
#include "tfm/error.h"
#include "training/adamw.h"

namespace tfm::training {
namespace {

constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kStep = "step";

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& problem) {
  throw Error("cannot load AdamW state from '" + file.string() + "': " + problem);
}

std::string dtype_shape(DType dtype, const Shape& shape) {
  return std::string(safetensors_dtype_name(dtype)) + " " + shape_str(shape);
}

const TensorInfo& find(const SafetensorsFile& f, const std::string& name, DType dtype,
                       const Shape& shape, const std::filesystem::path& file) {
  const auto& tensors = f.header.tensors;
  const auto it = std::find_if(tensors.begin(), tensors.end(),
                               [&](const TensorInfo& t) { return t.name == name; });
  if (it == tensors.end()) fail(file, "tensor '" + name + "' is missing");
  if (it->dtype != dtype || it->shape != shape) {
    fail(file, "tensor '" + name + "' is " + dtype_shape(it->dtype, it->shape) + ", expected " +
                   dtype_shape(dtype, shape) + " for this optimizer's parameters");
  }
  return *it;
}

Tensor read(const SafetensorsFile& f, const TensorInfo& info) {
  return borrow_tensor_rows(f.mapping, info, 0, info.shape.empty() ? 1 : info.shape[0]);
}

}  // namespace

void AdamW::save(const std::filesystem::path& file) const {
  // On the host the state is written straight from the optimizer's own buffers.
  save_safetensors(file, {{kExpAvg, exp_avg_.to(kCpu)},
                          {kExpAvgSq, exp_avg_sq_.to(kCpu)},
                          {kStep, Tensor::from_vector<int64_t>({steps_}, {})}});
}

void AdamW::load(const std::filesystem::path& file) {
  SafetensorsFile f;
  try {
    f = open_safetensors(file);
  } catch (const Error& e) {
    fail(file, e.what());
  }
  const Shape shape = {total_};
  const Tensor avg = read(f, find(f, kExpAvg, DType::f32, shape, file));
  const Tensor avg_sq = read(f, find(f, kExpAvgSq, DType::f32, shape, file));
  const int64_t step = read(f, find(f, kStep, DType::i64, {}, file)).data_as<int64_t>()[0];
  if (step < 0) fail(file, "negative step count " + std::to_string(step));
  // Everything is checked before anything changes, so a failed load leaves the optimizer as it was.
  exp_avg_.copy_from(avg);
  exp_avg_sq_.copy_from(avg_sq);
  steps_ = step;
}

}  // namespace tfm::training
