// The Trainer's loop: resuming continues the run exactly, gradient accumulation is the large
// batch, checkpoints rotate, and the saved model is the trained one.
#include "training/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "io/checkpoint.h"
#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "training/checkpoint_manifest.h"
#include "training/trainer_checkpoint.h"

namespace tfm::training {
namespace {
namespace fs = std::filesystem;

// Rows of random token ids with labels = input_ids, as packing makes them.
TokenRows random_rows(int64_t rows, int64_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 1023);  // the qwen3 fixture's vocabulary
  TokenRows out;
  out.max_length = length;
  for (int64_t i = 0; i < rows * length; ++i) out.input_ids.push_back(id(rng));
  out.attention_mask.assign(out.input_ids.size(), 1);
  out.labels = out.input_ids;
  return out;
}

CausalLM fixture_model(const std::string& device = "cpu") {
  set_log_level(LogLevel::kWarn);
  return AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"),
                                               {.dtype = DType::f32, .device_map = device});
}

TrainingArguments small_args(const std::string& name) {
  TrainingArguments a;
  a.output_dir = (fs::temp_directory_path() / ("tfm_trainer_" + name)).string();
  fs::remove_all(a.output_dir);
  a.per_device_train_batch_size = 2;
  a.learning_rate = 1e-2;
  a.weight_decay = 0.1;
  a.warmup_steps = 1;
  a.max_steps = 4;
  a.logging_steps = 1;
  a.save_steps = 0;
  a.disable_tqdm = true;
  return a;
}

std::vector<float> weights_of(const std::string& dir) {
  return Checkpoint::open(dir).tensor("model.layers.1.mlp.down_proj.weight").to_f32_vector();
}

std::vector<double> logged_losses(const std::string& output_dir) {
  std::vector<double> losses;
  std::ifstream in(fs::path(output_dir) / "logs.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (entry.contains("loss")) losses.push_back(entry["loss"].get<double>());
  }
  return losses;
}

TEST(Trainer, ResumeContinuesTheRunExactly) {
  TrainingArguments whole = small_args("whole");
  whole.save_steps = 2;
  CausalLM model = fixture_model();
  Trainer(model, whole, random_rows(10, 12, 1)).train();

  TrainingArguments resumed = small_args("resumed");
  resumed.resume_from_checkpoint = (fs::path(whole.output_dir) / "checkpoint-2").string();
  CausalLM fresh = fixture_model();
  Trainer(fresh, resumed, random_rows(10, 12, 1)).train();

  EXPECT_EQ(weights_of(resumed.output_dir), weights_of(whole.output_dir));
  const std::vector<double> a = logged_losses(whole.output_dir);
  const std::vector<double> b = logged_losses(resumed.output_dir);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);  // steps 3 and 4
  EXPECT_EQ(b[0], a[2]);
  EXPECT_EQ(b[1], a[3]);
  EXPECT_EQ(read_trainer_state(resumed.output_dir).log_history.size(),
            read_trainer_state(whole.output_dir).log_history.size());
}

// On an accelerator (where one is present: cuda with a GPU, pjrt with the test plugin; skipped,
// and said so, where not): master weights, gradients and AdamW state on the device give the CPU
// run's losses (the CPU's steps match torch: tests/models), with clipping and weight decay, and a
// resumed run on the device continues its own exactly.
class TrainerOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainerOnDevice, FollowsTheCpuRunAndResumes) {
  const std::string kind = GetParam();
  if (!testing::device_present(kind)) GTEST_SKIP() << "no " << kind << " device present";
  TrainingArguments on_cpu = small_args("cpu");
  on_cpu.max_grad_norm = 1.0;
  CausalLM cpu_model = fixture_model();
  Trainer(cpu_model, on_cpu, random_rows(10, 12, 1)).train();

  TrainingArguments whole = small_args(kind + "_whole");
  whole.max_grad_norm = 1.0;
  whole.save_steps = 2;
  CausalLM device_model = fixture_model(kind);
  Trainer(device_model, whole, random_rows(10, 12, 1)).train();
  const std::vector<double> want = logged_losses(on_cpu.output_dir);
  const std::vector<double> got = logged_losses(whole.output_dir);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << i;
  const std::vector<float> cpu_weights = weights_of(on_cpu.output_dir);
  const std::vector<float> device_weights = weights_of(whole.output_dir);
  ASSERT_EQ(device_weights.size(), cpu_weights.size());
  for (size_t i = 0; i < cpu_weights.size(); ++i) {
    ASSERT_NEAR(device_weights[i], cpu_weights[i], 1e-4) << "saved weight element " << i;
  }

  TrainingArguments resumed = small_args(kind + "_resumed");
  resumed.max_grad_norm = 1.0;
  resumed.resume_from_checkpoint = (fs::path(whole.output_dir) / "checkpoint-2").string();
  CausalLM fresh = fixture_model(kind);
  Trainer(fresh, resumed, random_rows(10, 12, 1)).train();
  const std::vector<double> continued = logged_losses(resumed.output_dir);
  ASSERT_EQ(continued.size(), 2u);
  EXPECT_EQ(continued[0], got[2]);
  EXPECT_EQ(continued[1], got[3]);
  EXPECT_EQ(weights_of(resumed.output_dir), weights_of(whole.output_dir));
}

INSTANTIATE_TEST_SUITE_P(Accelerators, TrainerOnDevice, ::testing::Values("cuda", "pjrt"),
                         [](const auto& info) { return info.param; });

TEST(Trainer, AccumulationEqualsTheLargerBatch) {
  TrainingArguments big = small_args("big");
  big.per_device_train_batch_size = 4;
  big.max_steps = 1;
  CausalLM m1 = fixture_model();
  Trainer(m1, big, random_rows(8, 12, 2)).train();

  TrainingArguments accumulated = small_args("accumulated");
  accumulated.per_device_train_batch_size = 2;
  accumulated.gradient_accumulation_steps = 2;
  accumulated.max_steps = 1;
  CausalLM m2 = fixture_model();
  Trainer(m2, accumulated, random_rows(8, 12, 2)).train();

  const std::vector<float> a = weights_of(big.output_dir), b = weights_of(accumulated.output_dir);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  EXPECT_NEAR(logged_losses(big.output_dir)[0], logged_losses(accumulated.output_dir)[0], 1e-6);
}

TEST(Trainer, KeepsTheNewestCheckpoints) {
  TrainingArguments a = small_args("rotate");
  a.save_steps = 1;
  a.save_total_limit = 2;
  CausalLM model = fixture_model();
  Trainer(model, a, random_rows(10, 12, 3)).train();
  const std::vector<fs::path> kept = list_checkpoints(a.output_dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].filename(), "checkpoint-3");
  EXPECT_EQ(kept[1].filename(), "checkpoint-4");
  EXPECT_TRUE(fs::exists(kept[1] / "optimizer.safetensors"));
  EXPECT_EQ(read_trainer_state(kept[1]).global_step, 4);
}

TEST(Trainer, SavedModelIsTheTrainedOne) {
  TrainingArguments a = small_args("saved");
  CausalLM model = fixture_model();
  const TokenRows rows = random_rows(10, 12, 4);
  Trainer trainer(model, a, rows, rows);
  const TrainOutput out = trainer.train();
  EXPECT_EQ(out.global_step, 4);
  ASSERT_TRUE(out.eval_loss.has_value());
  CausalLM reloaded = AutoModelForCausalLM::from_pretrained(a.output_dir, {.device_map = "cpu"});
  const Tensor ids = testing::int_matrix(testing::reference("qwen3")["input_ids"]);
  EXPECT_EQ(reloaded.forward(ids).to_f32_vector(), model.forward(ids).to_f32_vector());
}

// The arguments of a 4-step run, named `name`, that saved a checkpoint every `save_steps`, after
// running it.
TrainingArguments trained_saving_every(const std::string& name, int64_t save_steps) {
  TrainingArguments args = small_args(name);
  args.save_steps = save_steps;
  CausalLM model = fixture_model();
  Trainer(model, args, random_rows(10, 12, 1)).train();
  return args;
}

// A checkpoint is complete only while every file its manifest lists is there, whole: a truncated,
// altered or missing file, or no manifest (a save cut short), each said by name.
TEST(Trainer, ACheckpointIsCompleteOnlyWhole) {
  const TrainingArguments args = trained_saving_every("complete", 2);
  const fs::path dir = fs::path(args.output_dir) / "checkpoint-2";
  EXPECT_EQ(incomplete(dir), std::nullopt);
  const auto damaged = [&](const std::function<void(const fs::path&)>& damage) {
    const fs::path copy = fs::path(args.output_dir) / "damaged";
    fs::remove_all(copy);
    fs::copy(dir, copy);
    damage(copy);
    return incomplete(copy).value_or("(complete)");
  };
  EXPECT_THAT(damaged([](const fs::path& d) { fs::resize_file(d / "model.safetensors", 100); }),
              ::testing::HasSubstr("'model.safetensors' has 100 bytes"));
  EXPECT_THAT(damaged([](const fs::path& d) {
                std::fstream f(d / "optimizer.safetensors", std::ios::in | std::ios::out);
                f.seekp(-1, std::ios::end);
                f.put('\x7f');
              }),
              ::testing::HasSubstr("'optimizer.safetensors' does not match its checksum"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::remove(d / "trainer_state.json"); }),
              ::testing::HasSubstr("'trainer_state.json' is missing"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::remove(d / kManifestFile); }),
              ::testing::HasSubstr("no checkpoint_manifest.json"));
}

// "last" passes over an incomplete newest checkpoint to the newest complete one (where a save was
// cut short), and an incomplete folder named outright is refused, saying why.
TEST(Trainer, ResumeTakesTheNewestCompleteCheckpoint) {
  const TrainingArguments args = trained_saving_every("newest_complete", 1);
  const fs::path newest = fs::path(args.output_dir) / "checkpoint-4";
  fs::remove(newest / kManifestFile);
  EXPECT_EQ(resolve_checkpoint("last", args.output_dir),
            fs::path(args.output_dir) / "checkpoint-3");
  EXPECT_THAT(
      [&] { resolve_checkpoint(newest.string(), args.output_dir); },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("is not a complete checkpoint")));
}

// Rotation keeps the checkpoint just saved even where an earlier run left one of a later step.
// A run resumed from an earlier checkpoint of a folder that holds later ones: rotation removes
// the later ones before the checkpoint it has just saved.
TEST(Trainer, RotationKeepsTheCheckpointJustSaved) {
  TrainingArguments args = small_args("rotation_stale");
  args.save_steps = 2;
  args.max_steps = 6;
  CausalLM model = fixture_model();
  Trainer(model, args, random_rows(12, 12, 1)).train();
  const fs::path dir(args.output_dir);
  ASSERT_EQ(
      list_checkpoints(dir),
      (std::vector<fs::path>{dir / "checkpoint-2", dir / "checkpoint-4", dir / "checkpoint-6"}));
  args.resume_from_checkpoint = (dir / "checkpoint-2").string();
  args.max_steps = 4;
  args.save_total_limit = 1;
  CausalLM again = fixture_model();
  Trainer(again, args, random_rows(12, 12, 1)).train();
  EXPECT_EQ(list_checkpoints(dir), std::vector<fs::path>{dir / "checkpoint-4"});
}

// A run that does not resume refuses a folder holding another run, naming what is there and the
// two ways on; overwrite_output_dir removes that run's files and trains afresh.
TEST(Trainer, AnEarlierRunInOutputDirIsRefusedOrOverwritten) {
  TrainingArguments args = small_args("earlier_run");
  args.save_steps = 2;
  CausalLM model = fixture_model();
  Trainer(model, args, random_rows(8, 12, 1)).train();
  const fs::path dir(args.output_dir);
  fs::create_directories(dir / "checkpoint-900");  // a longer earlier run's
  CausalLM again = fixture_model();
  EXPECT_THAT([&] { Trainer(again, args, random_rows(8, 12, 1)).train(); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(
                  ::testing::HasSubstr("output_dir '" + args.output_dir + "' holds an earlier"),
                  ::testing::HasSubstr("checkpoint-2, checkpoint-4, checkpoint-900"),
                  ::testing::HasSubstr("trainer_state.json, logs.jsonl"),
                  ::testing::HasSubstr("--resume_from_checkpoint last"),
                  ::testing::HasSubstr("--overwrite_output_dir"))));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-900")) << "refused, nothing removed";

  args.overwrite_output_dir = true;
  args.save_steps = 3;
  CausalLM fresh = fixture_model();
  Trainer(fresh, args, random_rows(8, 12, 1)).train();
  EXPECT_EQ(list_checkpoints(dir), std::vector<fs::path>{dir / "checkpoint-3"});
  std::ifstream log(dir / "logs.jsonl");
  int64_t first_step = -1;
  for (std::string line; std::getline(log, line) && first_step < 0;) {
    first_step = nlohmann::json::parse(line).value("step", int64_t{-1});
  }
  EXPECT_EQ(first_step, 1) << "the log starts with this run";
}

// The final save failing (here a folder where model.safetensors goes) keeps the last step as a
// checkpoint, which `last` resumes, and says so; a run that saved that step already says that.
TEST(Trainer, AFailedFinalSaveKeepsTheLastStep) {
  TrainingArguments args = small_args("final_save_fails");
  const fs::path dir(args.output_dir);
  fs::create_directories(dir / "model.safetensors" / "in_the_way");
  CausalLM model = fixture_model();
  EXPECT_THAT([&] { Trainer(model, args, random_rows(8, 12, 1)).train(); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(
                  ::testing::HasSubstr("the final save into output_dir '" + args.output_dir +
                                       "' failed: "),
                  ::testing::HasSubstr("model.safetensors"),
                  ::testing::HasSubstr("the run's last state is saved as checkpoint-4 instead"))));
  EXPECT_EQ(resolve_checkpoint("last", dir), dir / "checkpoint-4");
  EXPECT_EQ(read_trainer_state(dir / "checkpoint-4").global_step, 4);

  fs::remove_all(dir / "checkpoint-4");
  fs::remove(dir / "logs.jsonl");
  fs::remove(dir / "trainer_state.json");
  args.save_steps = 2;
  CausalLM again = fixture_model();
  EXPECT_THAT([&] { Trainer(again, args, random_rows(8, 12, 1)).train(); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                  "checkpoint-4, saved at this step, holds the run's last state")));
}

// An output_dir that cannot be a folder (a file is there; under a file) is said before the first
// step, naming the folder.
TEST(Trainer, UnusableOutputDirIsSaidFirst) {
  const fs::path file = fs::temp_directory_path() / "tfm_trainer_not_a_folder";
  std::ofstream(file) << "x";
  for (const fs::path& dir : {file, file / "below"}) {
    TrainingArguments args = small_args("unusable");
    args.output_dir = dir.string();
    CausalLM model = fixture_model();
    Trainer trainer(model, args, random_rows(4, 12, 1));
    EXPECT_THAT([&] { trainer.train(); },
                ::testing::ThrowsMessage<Error>(
                    ::testing::AllOf(::testing::HasSubstr("output_dir '" + dir.string() + "'"),
                                     ::testing::HasSubstr("cannot be made a folder"))));
  }
  fs::remove(file);
}

TEST(Trainer, RejectsBadArguments) {
  TrainingArguments a = small_args("bad");
  a.gradient_accumulation_steps = 0;
  CausalLM model = fixture_model();
  EXPECT_THROW(Trainer(model, a, random_rows(4, 12, 5)), Error);
  a = small_args("bad");
  a.resume_from_checkpoint = "last";
  EXPECT_THROW(Trainer(model, a, random_rows(4, 12, 5)).train(), Error);
  a.overwrite_output_dir = true;
  EXPECT_THAT([&] { Trainer(model, a, random_rows(4, 12, 5)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                  "overwrite_output_dir (start over) and resume_from_checkpoint (continue) "
                  "contradict")));
  // A learning rate of inf trains to NaN and saves it.
  a = small_args("bad");
  a.learning_rate = std::numeric_limits<double>::infinity();
  EXPECT_THAT([&] { Trainer(model, a, random_rows(4, 12, 5)); },
              ::testing::ThrowsMessage<Error>(
                  ::testing::HasSubstr("learning_rate must be a finite number >= 0, got inf")));
  // As transformers' Trainer: an evaluation schedule needs evaluation data.
  a = small_args("bad");
  a.eval_steps = 2;
  EXPECT_THAT([&] { Trainer(model, a, random_rows(4, 12, 5)); },
              ::testing::ThrowsMessage<Error>(
                  ::testing::HasSubstr("eval_steps 2 asks for evaluation, but there is no")));
  EXPECT_NO_THROW(Trainer(model, a, random_rows(4, 12, 5), random_rows(2, 12, 6)));
  // Rows of another tokenizer's ids (beyond the fixture's 1024) are said before any step.
  TokenRows foreign = random_rows(4, 12, 5);
  foreign.input_ids[7] = 5000;
  EXPECT_THAT([&] { Trainer(model, small_args("bad"), foreign); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                  "training data holds token id 5000, outside the model's vocab_size 1024")));
}

}  // namespace
}  // namespace tfm::training
