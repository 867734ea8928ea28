#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/io_test_util.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using testing::AllOf;
using testing::ElementsAre;
using testing::ElementsAreArray;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_io::read_file;
using testing_io::TempDir;

const std::filesystem::path kFixtures = std::filesystem::path(TFM_TEST_DATA_DIR) / "fixtures";

std::vector<std::pair<std::string, Tensor>> all_tensors(const Checkpoint& checkpoint) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : checkpoint.names())
    out.emplace_back(name, checkpoint.tensor(name));
  return out;
}

// The parameter names transformers lists (reference.json's grad_norms keys) are the checkpoint's.
TEST(SafetensorsTest, FixtureHoldsTheParametersTransformersNames) {
  const Checkpoint checkpoint = Checkpoint::open(kFixtures / "qwen3");
  std::ifstream in(kFixtures / "qwen3" / "reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  std::vector<std::string> expected;
  for (const auto& item : reference["grad_norms"].items()) expected.push_back(item.key());
  std::sort(expected.begin(), expected.end());
  EXPECT_THAT(checkpoint.names(), ElementsAreArray(expected));
}

// Shapes follow from the fixture's config: vocab 1024, hidden 64, 4 heads and 2 KV heads of 16.
TEST(SafetensorsTest, FixtureTensorsHaveTheConfigShapes) {
  const Checkpoint checkpoint = Checkpoint::open(kFixtures / "qwen3" / "model.safetensors");
  EXPECT_THAT(checkpoint.info("model.embed_tokens.weight").shape, ElementsAre(1024, 64));
  EXPECT_THAT(checkpoint.info("model.layers.1.self_attn.k_proj.weight").shape, ElementsAre(32, 64));
  EXPECT_THAT(checkpoint.info("model.layers.0.mlp.down_proj.weight").shape, ElementsAre(64, 128));
  const Tensor norm = checkpoint.tensor("model.layers.0.self_attn.q_norm.weight");
  EXPECT_THAT(norm.shape(), ElementsAre(16));
  EXPECT_EQ(norm.dtype(), f32);
  EXPECT_TRUE(norm.is_borrowed());
  EXPECT_TRUE(checkpoint.contains("model.norm.weight"));
  EXPECT_FALSE(checkpoint.contains("lm_head.weight"));  // tied: omitted as transformers saves it
}

// The fixture was written by the Python library; writing its tensors back must give the same bytes.
TEST(SafetensorsTest, SavingTheFixtureReproducesItByteForByte) {
  TempDir dir;
  for (const char* model : {"qwen3", "llama"}) {
    const Checkpoint checkpoint = Checkpoint::open(kFixtures / model);
    save_safetensors(dir / "copy.safetensors", all_tensors(checkpoint));
    EXPECT_EQ(read_file(dir / "copy.safetensors"),
              read_file(kFixtures / model / "model.safetensors"))
        << model;
  }
}

// Golden bytes from safetensors 0.8.0: safetensors.numpy.save({"b.h": float16 [1, 2, 3], "a.i64":
// int64 [7], "c.f32": float32 zeros (2, 1), "a.i32": int32 [5, 6, 7]}, metadata={"format": "pt"}):
// dtype order, key order and space padding as the library writes them.
TEST(SafetensorsTest, MixedDtypesAreWrittenAsThePythonLibraryWritesThem) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a.i64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("c.f32":{"dtype":"F32","shape":[2,1],"data_offsets":[8,16]},"a.i32":{"dtype":"I32",)"
      R"("shape":[3],"data_offsets":[16,28]},"b.h":{"dtype":"F16","shape":[3],"data_offsets":[28,34]}})"
      "       ";
  const unsigned char data[] = {0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    0, 0,    0, 5,
                                0,    0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 0, 0x3c, 0, 0x40, 0, 0x42};
  const std::string expected = std::string("\x10\x01\0\0\0\0\0\0", 8) + header +
                               std::string(reinterpret_cast<const char*>(data), sizeof data);
  Tensor half = Tensor::empty({3}, f16);
  const uint16_t halves[] = {0x3c00, 0x4000, 0x4200};
  std::memcpy(half.data(), halves, sizeof halves);
  TempDir dir;
  save_safetensors(dir / "mixed.safetensors",
                   {{"b.h", half},
                    {"a.i64", Tensor::from_vector(std::vector<int64_t>{7}, {1})},
                    {"c.f32", Tensor::zeros({2, 1}, f32)},
                    {"a.i32", Tensor::from_vector(std::vector<int32_t>{5, 6, 7}, {3})}});
  EXPECT_EQ(read_file(dir / "mixed.safetensors"), expected);
}

TEST(SafetensorsTest, SaveThenLoadEquals) {
  TempDir dir;
  const Tensor floats =
      Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f}, {2, 3});
  const Tensor brain = floats.to(bf16);
  const Tensor longs = Tensor::from_vector(std::vector<int64_t>{-1, int64_t{1} << 40}, {2});
  const Tensor scalar = Tensor::from_vector(std::vector<float>{42.0f}, {});
  const Tensor empty = Tensor::empty({0, 4}, f16);
  save_safetensors(dir / "t.safetensors",
                   {{"floats", floats},
                    {"brain", brain},
                    {"longs", longs},
                    {"scalar", scalar},
                    {"empty", empty}},
                   {{"format", "pt"}, {"note", "written by tfm"}});
  const Checkpoint loaded = Checkpoint::open(dir / "t.safetensors");
  EXPECT_THAT(loaded.names(), ElementsAre("brain", "empty", "floats", "longs", "scalar"));
  EXPECT_THAT(loaded.tensor("floats").to_f32_vector(), ElementsAreArray(floats.to_f32_vector()));
  EXPECT_EQ(loaded.tensor("brain").dtype(), bf16);
  EXPECT_EQ(std::memcmp(loaded.tensor("brain").data(), brain.data(), brain.nbytes()), 0);
  EXPECT_THAT(std::vector<int64_t>(loaded.tensor("longs").data_as<int64_t>(),
                                   loaded.tensor("longs").data_as<int64_t>() + 2),
              ElementsAre(-1, int64_t{1} << 40));
  EXPECT_THAT(loaded.tensor("scalar").shape(), ElementsAre());
  EXPECT_THAT(loaded.tensor("scalar").to_f32_vector(), ElementsAre(42.0f));
  EXPECT_THAT(loaded.tensor("empty").shape(), ElementsAre(0, 4));
  EXPECT_EQ(open_safetensors(dir / "t.safetensors").header.metadata.at("note"), "written by tfm");
  EXPECT_THAT(
      std::vector<std::filesystem::path>(std::filesystem::directory_iterator(dir.path()), {}),
      ElementsAre(dir / "t.safetensors"));  // no temporary file left behind
}

TEST(SafetensorsTest, TensorOutlivesItsCheckpoint) {
  Tensor embed;
  std::vector<float> expected;
  {
    const Checkpoint checkpoint = Checkpoint::open(kFixtures / "llama");
    embed = checkpoint.tensor("model.embed_tokens.weight");
    expected = embed.clone().to_f32_vector();
  }
  EXPECT_EQ(embed.to_f32_vector(), expected);
}

TEST(SafetensorsTest, TensorRowsIsASliceOfAxisZero) {
  const Checkpoint checkpoint = Checkpoint::open(kFixtures / "llama");
  const std::string name = "model.layers.2.mlp.gate_proj.weight";  // [160, 96]
  const Tensor all = checkpoint.tensor(name);
  const Tensor rows = checkpoint.tensor_rows(name, 40, 80);
  EXPECT_THAT(rows.shape(), ElementsAre(40, 96));
  EXPECT_TRUE(rows.is_borrowed());
  EXPECT_EQ(rows.to_f32_vector(), all.slice(40, 80).to_f32_vector());
  EXPECT_EQ(checkpoint.tensor_rows(name, 160, 160).numel(), 0);
  EXPECT_THAT([&] { checkpoint.tensor_rows(name, 100, 161); },
              ThrowsMessage<Error>(AllOf(HasSubstr("rows [100, 161) out of range"), HasSubstr(name),
                                         HasSubstr("model.safetensors"))));
}

TEST(SafetensorsTest, ShardedCheckpointReadsEveryShard) {
  TempDir dir;
  save_safetensors(dir / "model-00001-of-00002.safetensors",
                   {{"a", Tensor::from_vector(std::vector<float>{1, 2}, {2})},
                    {"unlisted", Tensor::zeros({1}, f32)}});
  save_safetensors(dir / "model-00002-of-00002.safetensors",
                   {{"b", Tensor::from_vector(std::vector<int32_t>{3}, {1})}});
  testing_io::write_file(dir / "model.safetensors.index.json",
                         R"({"metadata": {"total_size": 12},
      "weight_map": {"a": "model-00001-of-00002.safetensors",
                     "b": "model-00002-of-00002.safetensors"}})");
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_THAT(checkpoint.names(), ElementsAre("a", "b"));  // only what the index lists
  EXPECT_THAT(checkpoint.tensor("a").to_f32_vector(), ElementsAre(1, 2));
  EXPECT_EQ(checkpoint.tensor("b").data_as<int32_t>()[0], 3);
  EXPECT_EQ(checkpoint.info("b").file, dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(checkpoint.path(), dir.path());
}

TEST(SafetensorsTest, SaveRejectsDuplicateNames) {
  TempDir dir;
  const Tensor t = Tensor::zeros({1}, f32);
  EXPECT_THAT(
      [&] {
        save_safetensors(dir / "d.safetensors", {{"x", t}, {"x", t}});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("d.safetensors"), HasSubstr("'x' given twice"))));
  EXPECT_FALSE(std::filesystem::exists(dir / "d.safetensors"));
}

}  // namespace
}  // namespace tfm
