// `tfm train` under tfmrun with 4 CPU processes against one process on the same global batches:
// the logged losses and gradient norms (clipping on), the eval loss and the saved checkpoint must
// agree, and a run resumed from a checkpoint continues the uninterrupted run's losses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "io/checkpoint.h"
#include "support/fixtures.h"
#include "support/run_binary.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

std::string port(int offset) { return testing::test_port(offset); }

// Ten rows of 12 token ids: the fixture's two and rotations of them, each id taken modulo `vocab`.
fs::path write_rows(const fs::path& dir, int64_t vocab = 1024) {
  const nlohmann::json& ids = testing::reference("qwen3")["input_ids"];
  std::ofstream out(dir / "rows.jsonl");
  for (int shift = 0; shift < 5; ++shift) {
    for (const auto& row : ids) {
      std::vector<int64_t> r = row.get<std::vector<int64_t>>();
      std::rotate(r.begin(), r.begin() + shift, r.end());
      for (int64_t& id : r) id %= vocab;
      out << nlohmann::json{{"input_ids", r}}.dump() << "\n";
    }
  }
  return dir / "rows.jsonl";
}

std::vector<std::string> train_args(const fs::path& data, const fs::path& out, int per_device,
                                    const std::string& model = testing::fixture_dir("qwen3")) {
  return {"train",
          "--model",
          model,
          "--data",
          data.string(),
          "--max_length",
          "12",
          "--per_device_train_batch_size",
          std::to_string(per_device),
          "--max_steps",
          "5",
          "--logging_steps",
          "1",
          "--learning_rate",
          "1e-2",
          "--max_grad_norm",
          "1.0",
          "--save_steps",
          "0",
          "--output_dir",
          out.string(),
          "--device",
          "cpu",
          "--disable_tqdm"};
}

// The entries of logs.jsonl that carry `key`.
std::vector<nlohmann::json> log_lines(const fs::path& dir, const std::string& key = "loss") {
  std::vector<nlohmann::json> lines;
  std::ifstream in(dir / "logs.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (entry.contains(key)) lines.push_back(entry);
  }
  return lines;
}

// The split run's five logged steps are the one process's: losses within 1e-5, gradient norms
// within 1e-4, relative.
void expect_same_steps(const std::vector<nlohmann::json>& want,
                       const std::vector<nlohmann::json>& got, const std::string& output) {
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(got.size(), want.size()) << output;
  for (size_t i = 0; i < want.size(); ++i) {
    const double loss = want[i]["loss"], norm = want[i]["grad_norm"];
    EXPECT_NEAR(got[i]["loss"].get<double>(), loss, 1e-5 * loss) << "step " << i + 1;
    EXPECT_NEAR(got[i]["grad_norm"].get<double>(), norm, 1e-4 * norm) << "step " << i + 1;
  }
}

// `tfm train ARGS` under tfmrun with tp x fsdp processes.
std::optional<testing::Run> run_split(const std::vector<std::string>& train, int tp, int fsdp,
                                      int port_offset) {
  std::vector<std::string> args{"--nproc_per_node", std::to_string(tp * fsdp), "--master_port",
                                port(port_offset), std::getenv("TFM_BIN")};
  args.insert(args.end(), train.begin(), train.end());
  args.insert(args.end(), {"--tp-size", std::to_string(tp), "--fsdp-size", std::to_string(fsdp)});
  return testing::run_binary("tfmrun", args);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("tfm-dist-train-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct Layout {
  int tp, fsdp;

  friend void PrintTo(const Layout& l, std::ostream* os) {
    *os << "tp=" << l.tp << " fsdp=" << l.fsdp;
  }
};

class DistributedTrainerTest : public ::testing::TestWithParam<Layout> {};

TEST_P(DistributedTrainerTest, MatchesOneProcess) {
  const Layout l = GetParam();
  if (std::getenv("TFM_BIN") == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fresh_dir(std::to_string(l.tp) + "x" + std::to_string(l.fsdp));
  const fs::path data = write_rows(dir);
  const int global_batch = l.fsdp == 3 ? 3 : 4;
  // Eval batches of 2 rows per rank: with 4 FSDP ranks the last global batch (2 of 10 rows)
  // leaves two ranks without a target, with 3 one rank.
  const std::vector<std::string> eval{
      "--validation_file", data.string(), "--eval_steps", "5", "--per_device_eval_batch_size", "2"};
  std::vector<std::string> one_args = train_args(data, dir / "one", global_batch);
  one_args.insert(one_args.end(), eval.begin(), eval.end());
  const auto one = testing::run_binary("tfm", one_args);
  ASSERT_EQ(one->status, 0) << one->err;
  std::vector<std::string> four_args = train_args(data, dir / "four", global_batch / l.fsdp);
  four_args.insert(four_args.end(), eval.begin(), eval.end());
  const auto four = run_split(four_args, l.tp, l.fsdp, 10 * l.tp + l.fsdp);
  ASSERT_EQ(four->status, 0) << four->out << four->err;

  const auto want = log_lines(dir / "one"), got = log_lines(dir / "four");
  expect_same_steps(want, got, four->out);
  EXPECT_GT(want[0]["grad_norm"].get<double>(), 1.0) << "clipping was not exercised";
  const auto want_eval = log_lines(dir / "one", "eval_loss"),
             got_eval = log_lines(dir / "four", "eval_loss");
  ASSERT_EQ(want_eval.size(), 1u);
  ASSERT_EQ(got_eval.size(), 1u) << four->out;
  const double eval_loss = want_eval[0]["eval_loss"];
  EXPECT_NEAR(got_eval[0]["eval_loss"].get<double>(), eval_loss, 1e-5 * eval_loss);

  // One ordinary checkpoint, gathered from the slices. Adam divides each gradient by its own
  // running size, so where a gradient is near zero its rounding (summed in another order here)
  // moves the weight by a visible part of a step: the bound is 2% of one step (lr 1e-2).
  const Checkpoint a = Checkpoint::open(dir / "one"), b = Checkpoint::open(dir / "four");
  for (const std::string name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight", "model.norm.weight"}) {
    const std::vector<float> x = a.tensor(name).to_f32_vector(), y = b.tensor(name).to_f32_vector();
    ASSERT_EQ(x.size(), y.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
    EXPECT_LT(worst, 2e-4) << name;
  }
  fs::remove_all(dir);
}

// Steps 4 and 5 of a tp=2 x fsdp=2 run resumed from its checkpoint-3 are those of the run that
// went on (each rank reloads its slice of the weights and its own optimizer shard); resuming with
// another layout is refused, naming both.
TEST(DistributedTrainerResume, ContinuesTheLossCurve) {
  if (std::getenv("TFM_BIN") == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fresh_dir("resume");
  const fs::path data = write_rows(dir);
  std::vector<std::string> first = train_args(data, dir / "first", 2);
  *std::next(std::find(first.begin(), first.end(), "--save_steps")) = "3";
  const auto uninterrupted = run_split(first, 2, 2, 5);
  ASSERT_EQ(uninterrupted->status, 0) << uninterrupted->out << uninterrupted->err;
  ASSERT_TRUE(fs::exists(dir / "first/checkpoint-3/optimizer-rank3.safetensors"));

  std::vector<std::string> again = train_args(data, dir / "again", 2);
  again.insert(again.end(), {"--resume_from_checkpoint", (dir / "first/checkpoint-3").string()});
  const auto resumed = run_split(again, 2, 2, 6);
  ASSERT_EQ(resumed->status, 0) << resumed->out << resumed->err;
  const auto want = log_lines(dir / "first"), got = log_lines(dir / "again");
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(got.size(), 2u) << resumed->out;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["step"], want[i + 3]["step"]);
    const double loss = want[i + 3]["loss"];
    EXPECT_NEAR(got[i]["loss"].get<double>(), loss, 1e-6 * loss) << "step " << i + 4;
  }

  std::vector<std::string> other = train_args(data, dir / "other", 4);
  other.insert(other.end(), {"--resume_from_checkpoint", (dir / "first/checkpoint-3").string()});
  const auto refused = run_split(other, 4, 1, 7);
  EXPECT_NE(refused->status, 0);
  EXPECT_THAT(refused->out + refused->err,
              ::testing::HasSubstr("saved with tp_size=2 fsdp_size=2 and this run has "
                                   "tp_size=4 fsdp_size=1"));
  fs::remove_all(dir);
}

// The largest difference between two nested JSON arrays of numbers of the same shape.
double max_difference(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_array()) return std::fabs(a.get<double>() - b.get<double>());
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_difference(a[i], b[i]));
  return worst;
}

// A vocabulary of 777 ids, which tp_size=2 does not divide: each rank holds 389 rows, the last
// one a zero row (as Megatron-LM pads), and FSDP splits those 389 rows into padded blocks again.
// Training gives the one process's losses and gradient norms and saves the whole 777-row
// embedding; that checkpoint's logits (ids on both sides of the split and the last one) and
// greedy ids under tp_size=2 are the one process's.
TEST(DistributedTrainerVocabulary, APaddedVocabularyMatchesOneProcess) {
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fresh_dir("vocab777");
  testing::write_fixture_with_vocabulary("qwen3", 777, (dir / "model").string());
  const fs::path data = write_rows(dir, 777);
  const auto one = testing::run_binary("tfm", train_args(data, dir / "one", 4, dir / "model"));
  ASSERT_EQ(one->status, 0) << one->err;
  const auto four = run_split(train_args(data, dir / "four", 2, dir / "model"), 2, 2, 8);
  ASSERT_EQ(four->status, 0) << four->out << four->err;
  const auto want = log_lines(dir / "one"), got = log_lines(dir / "four");
  expect_same_steps(want, got, four->out);
  const Tensor embedding = Checkpoint::open(dir / "four").tensor("model.embed_tokens.weight");
  EXPECT_EQ(embedding.shape(), (Shape{777, 64}));

  const std::vector<std::string> logits{
      "logits", (dir / "one").string(), "--ids", "5,17,388,389,700,776", "--all", "--device",
      "cpu"};
  const std::vector<std::string> greedy{"generate",    (dir / "one").string(),
                                        "--ids",       "5,388,776",
                                        "--print-ids", "--max-new-tokens",
                                        "12",          "--device",
                                        "cpu",         "--quiet"};
  for (const std::vector<std::string>& command : {logits, greedy}) {
    SCOPED_TRACE(command[0]);
    const auto whole = testing::run_binary("tfm", command);
    ASSERT_EQ(whole->status, 0) << whole->err;
    std::vector<std::string> args{"--nproc_per_node", "2", "--master_port", port(9), tfm};
    args.insert(args.end(), command.begin(), command.end());
    args.insert(args.end(), {"--tp-size", "2"});
    const auto split = testing::run_binary("tfmrun", args);
    ASSERT_EQ(split->status, 0) << split->out << split->err;
    const std::string prefix = "[rank0]: ";
    ASSERT_EQ(split->out.rfind(prefix, 0), 0u) << split->out;
    const auto a = nlohmann::json::parse(whole->out),
               b = nlohmann::json::parse(split->out.substr(prefix.size()));
    if (command == logits) {
      EXPECT_LT(max_difference(a["logits"], b["logits"]), 1e-5);
    } else {
      EXPECT_EQ(a, b);
    }
  }
  fs::remove_all(dir);
}

// Mixtral's 8 experts split over the 4 tensor-parallel ranks sharing each batch, or over 2 FSDP
// ranks each with half of it, which send rows to the experts by all-to-all (one process then
// accumulates two micro-batches: a routers' load-balancing loss is of each rank's rows, as in
// transformers' Trainer; 5 steps of 2 rows are the data's 10 rows once). The one process's logged
// losses (that loss in them) and gradient norms, and a checkpoint holding every expert under its
// published name.
class DistributedTrainerExperts : public ::testing::TestWithParam<bool> {};

TEST_P(DistributedTrainerExperts, ExpertParallelMatchesOneProcess) {
  const bool exchanged = GetParam();
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fresh_dir(exchanged ? "exchanged-experts" : "experts");
  const fs::path data = write_rows(dir, 1000);
  const std::string model = testing::fixture_dir("mixtral");
  std::vector<std::string> one_args = train_args(data, dir / "one", exchanged ? 1 : 4, model);
  if (exchanged) one_args.insert(one_args.end(), {"--gradient_accumulation_steps", "2"});
  const auto one = testing::run_binary("tfm", one_args);
  ASSERT_EQ(one->status, 0) << one->err;
  const std::string ranks = exchanged ? "2" : "4";
  std::vector<std::string> split{"--nproc_per_node", ranks, "--master_port",
                                 port(exchanged ? 41 : 40), tfm};
  const std::vector<std::string> args = train_args(data, dir / "four", exchanged ? 1 : 4, model);
  split.insert(split.end(), args.begin(), args.end());
  split.insert(split.end(), {exchanged ? "--fsdp-size" : "--tp-size", ranks, "--ep-size", ranks});
  const auto four = testing::run_binary("tfmrun", split);
  ASSERT_EQ(four->status, 0) << four->out << four->err;
  expect_same_steps(log_lines(dir / "one"), log_lines(dir / "four"), four->out);

  // As in MatchesOneProcess, Adam turns the rounding of near-zero gradients (summed in another
  // order: micro-batches against ranks) into a visible part of a step; an expert sees few rows,
  // so more of its gradients are near zero: 5% of one step (lr 1e-2).
  const Checkpoint a = Checkpoint::open(dir / "one"), b = Checkpoint::open(dir / "four");
  for (int e = 0; e < 8; ++e) {
    for (const char* w : {"w1", "w2", "w3"}) {
      const std::string name =
          "model.layers.1.block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight";
      const std::vector<float> x = a.tensor(name).to_f32_vector(),
                               y = b.tensor(name).to_f32_vector();
      ASSERT_EQ(x.size(), y.size()) << name;
      float worst = 0;
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
      EXPECT_LT(worst, 5e-4) << name;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedTrainerExperts, ::testing::Bool(),
                         [](const auto& info) {
                           return std::string(info.param ? "over_fsdp" : "over_tp");
                         });

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedTrainerTest,
                         ::testing::Values(Layout{2, 2}, Layout{4, 1}, Layout{1, 4}, Layout{1, 3}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_fsdp" +
                                  std::to_string(info.param.fsdp);
                         });

}  // namespace
}  // namespace tfm
