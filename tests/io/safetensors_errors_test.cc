// Broken checkpoints, built byte by byte: each must give a tfm::Error naming the file and the
// problem, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "io/io_test_util.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_io::safetensors_bytes;
using testing_io::TempDir;
using testing_io::write_file;

// Writes `bytes` as a .safetensors file and expects opening it to fail with `problem`, naming it.
void expect_open_error(const std::string& bytes, const std::string& problem) {
  TempDir dir;
  const std::filesystem::path file = dir / "bad.safetensors";
  write_file(file, bytes);
  EXPECT_THAT([&] { Checkpoint::open(file); },
              ThrowsMessage<Error>(AllOf(HasSubstr(file.string()), HasSubstr(problem))));
}

std::string one_tensor(const std::string& entry, const std::string& data) {
  return safetensors_bytes(R"({"x":)" + entry + "}", data);
}

TEST(SafetensorsErrorsTest, TruncatedFiles) {
  expect_open_error("", "truncated: 0 bytes");
  expect_open_error(std::string("\x10\0\0", 3), "truncated: 3 bytes");
  const std::string good =
      one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", std::string(8, '\0'));
  expect_open_error(good.substr(0, 20), "runs past the end of the file (20 bytes)");
  expect_open_error(good.substr(0, good.size() - 1),
                    "out of range (the data section holds 7 bytes)");
}

TEST(SafetensorsErrorsTest, HeaderLengthBeyondTheFile) {
  expect_open_error(std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10),
                    "header length 255 runs past");
  expect_open_error(std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10), "exceeds the limit");
}

TEST(SafetensorsErrorsTest, HeaderIsNotJson) {
  expect_open_error(safetensors_bytes("{\"x\": [1, 2", ""), "header is not valid JSON");
  expect_open_error(safetensors_bytes("hello!!!", ""), "header is not valid JSON");
  expect_open_error(
      safetensors_bytes(
          R"({"__metadata__": )" + std::string(100000, '[') + std::string(100000, ']') + "}", ""),
      "nested deeper than 1000 levels");
  expect_open_error(safetensors_bytes("[1, 2, 3]", ""), "header is not a JSON object");
  expect_open_error(safetensors_bytes("{\"x\": 3}", ""), "tensor 'x' is not a JSON object");
}

TEST(SafetensorsErrorsTest, MissingOrMalformedFields) {
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[1]})", "abcd"), "has no 'data_offsets'");
  expect_open_error(one_tensor(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", "abcd"),
                    "'dtype' is not a string");
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", "abcd"),
                    "'shape' holds -1, not a non-negative integer");
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", "abcd"),
                    "'shape' holds 1.5");
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", "abcd"),
                    "'data_offsets' must hold 2 numbers");
  expect_open_error(safetensors_bytes(R"({"__metadata__":{"format":1}})", ""),
                    "'__metadata__' value of 'format' is not a string");
}

TEST(SafetensorsErrorsTest, OffsetsOutOfRange) {
  expect_open_error(
      one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", "abcd"),
      "tensor 'x': data_offsets [0, 8] out of range (the data section holds 4 bytes)");
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})", "abcd"),
                    "data_offsets [4, 0] out of range");
  expect_open_error(
      one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551615,4]})", "abcd"),
      "not a non-negative integer");
}

TEST(SafetensorsErrorsTest, OverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_open_error(safetensors_bytes(header, std::string(12, '\0')),
                    "tensors 'a' and 'b' overlap");
}

TEST(SafetensorsErrorsTest, ShapeAndDtypeNotMatchingTheByteRange) {
  expect_open_error(one_tensor(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,4]})", "abcd"),
                    "tensor 'x': shape [3] of BF16 does not match data_offsets [0, 4] (4 bytes)");
  // Dimensions whose product overflows 64 bits must not wrap around to a matching size.
  expect_open_error(one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296,4],)"
                               R"("data_offsets":[0,0]})",
                               ""),
                    "does not match");
}

TEST(SafetensorsErrorsTest, UnknownAndUnsupportedDtypes) {
  expect_open_error(one_tensor(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})", "abcdefgh"),
                    "unsupported dtype 'F64' for tensor 'x'");
  expect_open_error(one_tensor(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", "a"),
                    "unsupported dtype 'F8_E4M3' for tensor 'x'");
  expect_open_error(one_tensor(R"({"dtype":"X99","shape":[1],"data_offsets":[0,1]})", "a"),
                    "unknown dtype 'X99' for tensor 'x'");
}

TEST(SafetensorsErrorsTest, DuplicateNames) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_open_error(safetensors_bytes(header, std::string(8, '\0')), "names 'x' twice");
}

TEST(SafetensorsErrorsTest, MissingTensorNamesTheCheckpoint) {
  TempDir dir;
  save_safetensors(dir / "model.safetensors", {{"present", Tensor::zeros({1}, f32)}});
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_THAT([&] { checkpoint.tensor("absent"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("tensor 'absent' is not in checkpoint"),
                                         HasSubstr(dir.path().string()))));
}

TEST(SafetensorsErrorsTest, MissingCheckpointFiles) {
  TempDir dir;
  write_file(dir / "pytorch_model.bin", "not read");
  EXPECT_THAT(
      [&] { Checkpoint::open(dir.path()); },
      ThrowsMessage<Error>(AllOf(HasSubstr("no model.safetensors or model.safetensors.index.json"),
                                 HasSubstr("it holds: pytorch_model.bin"))));
  EXPECT_THAT([&] { Checkpoint::open(dir / "nothing.safetensors"); },
              ThrowsMessage<Error>(HasSubstr("nothing.safetensors' does not exist")));
}

class ShardedErrorsTest : public testing::Test {
 protected:
  void SetUp() override {
    save_safetensors(dir_ / "shard-1.safetensors", {{"a", Tensor::zeros({1}, f32)}});
  }
  void expect_error(const std::string& index, const std::string& problem) {
    write_file(dir_ / "model.safetensors.index.json", index);
    EXPECT_THAT(
        [&] { Checkpoint::open(dir_.path()); },
        ThrowsMessage<Error>(AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr(problem))));
  }
  TempDir dir_;
};

TEST_F(ShardedErrorsTest, IndexNamesAMissingShard) {
  expect_error(R"({"weight_map": {"a": "shard-1.safetensors", "b": "shard-2.safetensors"}})",
               "names shard 'shard-2.safetensors' (for tensor 'b'), which does not exist");
}

TEST_F(ShardedErrorsTest, IndexPlacesATensorInAShardWithoutIt) {
  expect_error(R"({"weight_map": {"a": "shard-1.safetensors", "c": "shard-1.safetensors"}})",
               "places tensor 'c' in '" + (dir_ / "shard-1.safetensors").string() +
                   "', which does not hold it");
}

TEST_F(ShardedErrorsTest, MalformedIndex) {
  expect_error("{\"weight_map\": ", "not valid JSON");
  expect_error(R"({"metadata": )" + std::string(100000, '[') + std::string(100000, ']') + "}",
               "nested deeper than 1000 levels");
  expect_error(R"({"metadata": {}})", "has no 'weight_map' object");
  expect_error(R"({"weight_map": {"a": 1}})", "shard of tensor 'a' is not a string");
  expect_error(R"({"weight_map": {"a": "../outside.safetensors"}})",
               "not a file name in the index's folder");
}

}  // namespace
}  // namespace tfm
