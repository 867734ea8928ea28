// One rank of the tensor-parallel tests (started by tfmrun from tensor_parallel_test.cc): loads a
// fixture split by a DistributedConfig and, in the same process, whole.
//   infer: the split model's logits must equal the whole model's within 1e-5, its greedy ids
//          transformers' (the fixture's reference.json), and its weights take about 1/tp;
//   train: 5 AdamW steps on one global batch (its rows split over the FSDP ranks, each updating
//          its shard of the parameters, the loss taken in chunks of rows) must give the whole
//          model's losses within 1e-5 relative.
// Prints "rank R: ok" or the failure, and exits non-zero on failure.
//   kill:  the last rank kills itself after loading; the others run `infer` into the dead peer.
//   tfm_tensor_parallel_worker infer|train|kill FIXTURE_DIR TP_SIZE FSDP_SIZE [EP_SIZE]
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "api/causal_lm_access.h"
#include "distributed/parallel_groups.h"
#include "models/causal_lm.h"
#include "tfm/log.h"
#include "tfm/model.h"
#include "training/adamw.h"
#include "training/causal_lm_batch.h"

namespace {

tfm::Tensor int_matrix(const nlohmann::json& rows) {
  std::vector<int64_t> values;
  for (const auto& row : rows)
    for (const auto& v : row) values.push_back(v.get<int64_t>());
  return tfm::Tensor::from_vector(
      values, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

float max_abs_diff(const tfm::Tensor& a, const tfm::Tensor& b) {
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  if (x.size() != y.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

// Rows [first, first + count) of a [rows, cols] i64 matrix.
tfm::Tensor rows_of(const tfm::Tensor& m, int64_t first, int64_t count) {
  return m.slice(first, first + count).clone();
}

// `count` rows taken in turn from the fixture's rows and the same tokens reversed.
tfm::Tensor global_batch(const tfm::Tensor& ids, int64_t count) {
  const int64_t rows = ids.dim(0), cols = ids.dim(1);
  tfm::Tensor out = tfm::Tensor::empty({count, cols}, tfm::DType::i64);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t source = r % rows;
    const bool reversed = (r / rows) % 2 == 1;
    for (int64_t c = 0; c < cols; ++c) {
      out.data_as<int64_t>()[r * cols + (reversed ? cols - 1 - c : c)] =
          ids.data_as<int64_t>()[source * cols + c];
    }
  }
  return out;
}

// The inputs of one share of `batch`'s rows, its loss scaled for the whole batch's targets.
tfm::TrainInputs share_of(const tfm::Tensor& batch, int share, int shares) {
  const int64_t rows = batch.dim(0) / shares, targets = batch.dim(0) * (batch.dim(1) - 1);
  const tfm::Tensor ids = rows_of(batch, share * rows, rows);
  const tfm::Tensor mask = tfm::Tensor::from_vector(
      std::vector<int64_t>(static_cast<size_t>(ids.numel()), 1), ids.shape());
  return tfm::training::make_train_inputs(ids, mask, ids, targets);
}

// Mean losses of 5 AdamW steps; `data_parallel` (when given) sums the losses over the FSDP ranks,
// each of which trains on its share of the rows (the gradients come summed onto its shards). One
// process takes the same shares one after the other, summing their gradients (a routers'
// load-balancing loss is of each share's rows, as transformers' Trainer computes it per rank).
std::vector<double> train(tfm::CausalLM& model, const tfm::Tensor& batch,
                          tfm::distributed::ProcessGroup* data_parallel, int shares) {
  const int64_t targets = batch.dim(0) * (batch.dim(1) - 1);
  std::vector<tfm::TrainInputs> inputs;
  if (data_parallel) {
    inputs.push_back(share_of(batch, data_parallel->rank(), shares));
  } else {
    for (int s = 0; s < shares; ++s) inputs.push_back(share_of(batch, s, shares));
  }
  std::vector<tfm::Tensor*> params;
  tfm::CausalLMAccess::impl(model).for_each_weight(
      [&](const std::string&, tfm::Tensor& t, const tfm::Shape&) { params.push_back(&t); });
  std::vector<tfm::training::AdamW> optimizers;
  for (tfm::Tensor* p : params) {
    optimizers.emplace_back(std::vector<tfm::training::ParamSegment>{{0, p->numel(), true}},
                            p->numel(),
                            tfm::training::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
  }
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    tfm::LossAndGrads out = tfm::CausalLMAccess::impl(model).train_step(inputs[0], false);
    for (size_t s = 1; s < inputs.size(); ++s) {
      const tfm::LossAndGrads more = tfm::CausalLMAccess::impl(model).train_step(inputs[s], false);
      out.loss_sum += more.loss_sum;
      for (size_t i = 0; i < out.grads.size(); ++i) {
        float* g = out.grads[i].data_as<float>();
        const float* h = more.grads[i].data_as<float>();
        for (int64_t k = 0; k < out.grads[i].numel(); ++k) g[k] += h[k];
      }
    }
    tfm::Tensor loss =
        tfm::Tensor::from_vector(std::vector<float>{static_cast<float>(out.loss_sum)}, {1});
    if (data_parallel) data_parallel->all_reduce(loss);
    losses.push_back(loss.to_f32_vector()[0] / static_cast<double>(targets));
    for (size_t i = 0; i < params.size(); ++i) {
      optimizers[i].step(
          {params[i]->data_as<float>(), static_cast<size_t>(params[i]->numel())},
          {out.grads[i].data_as<float>(), static_cast<size_t>(out.grads[i].numel())});
    }
  }
  return losses;
}

int check_training(tfm::CausalLM& whole, tfm::CausalLM& parts, const nlohmann::json& ref,
                   const tfm::DistributedConfig& split, const char* rank) {
  // Four rows, or three over three FSDP ranks: each rank trains on the same number of rows.
  const tfm::Tensor batch =
      global_batch(int_matrix(ref["input_ids"]), split.fsdp_size == 3 ? 3 : 4);
  const std::vector<double> want = train(whole, batch, nullptr, split.fsdp_size);
  // The split model's loss also runs in chunks of 5 token rows (the whole model's in one).
  tfm::CausalLMAccess::impl(parts).set_loss_chunk_rows(5);
  tfm::distributed::ProcessGroup* fsdp =
      split.fsdp_size > 1 ? tfm::distributed::parallel_groups(split).fsdp.get() : nullptr;
  const std::vector<double> got = train(parts, batch, fsdp, split.fsdp_size);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::fabs(want[i]));
  }
  std::printf("rank %s: losses %.6f -> %.6f (one process %.6f -> %.6f), worst relative diff %.3g\n",
              rank, got.front(), got.back(), want.front(), want.back(), worst);
  // The losses must move, or the comparison would prove nothing about the updates.
  if (worst > 1e-5 || std::fabs(want.back() - want.front()) < 1e-3) return 1;
  std::printf("rank %s: ok\n", rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s infer|train|kill FIXTURE_DIR TP_SIZE FSDP_SIZE [EP_SIZE]\n",
                 argv[0]);
    return 2;
  }
  const char* rank = std::getenv("RANK");
  try {
    tfm::set_log_level(tfm::LogLevel::kWarn);
    const std::string mode = argv[1], dir = argv[2];
    std::ifstream file(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(file);
    const tfm::DistributedConfig split{std::atoi(argv[3]), std::atoi(argv[4]),
                                       argc == 6 ? std::atoi(argv[5]) : 1};
    tfm::CausalLM whole = tfm::AutoModelForCausalLM::from_pretrained(
        dir, {.dtype = tfm::DType::f32, .device_map = "cpu"});
    tfm::CausalLM parts = tfm::AutoModelForCausalLM::from_pretrained(
        dir, {.dtype = tfm::DType::f32, .device_map = "cpu", .distributed = split});
    if (mode == "train") return check_training(whole, parts, ref, split, rank);
    // A rank killed mid-run: the last one dies once its slices are loaded, the others go on into
    // a forward pass whose collectives need it.
    if (mode == "kill" && std::atoi(rank) + 1 == split.tp_size * split.fsdp_size) {
      std::raise(SIGKILL);
    }

    const tfm::Tensor ids = int_matrix(ref["input_ids"]);
    const tfm::Tensor want = whole.forward(ids);
    const float compiled = max_abs_diff(parts.forward(ids), want);
    const float eager = max_abs_diff(parts.forward(ids, nullptr, true, true), want);

    const tfm::Tensor padded = int_matrix(ref["padded_input_ids"]);
    const tfm::Tensor mask = int_matrix(ref["padded_attention_mask"]);
    tfm::GenerationConfig gc;
    gc.max_new_tokens = 16;
    const std::vector<float> greedy = parts.generate(padded, &mask, gc).to_f32_vector();
    const bool greedy_ok = greedy == int_matrix(ref["greedy_16"]).to_f32_vector();

    // Each rank holds about 1/(tp x fsdp) of the weights: norms are whole on every
    // tensor-parallel rank, and KV heads fewer than those ranks are held twice or more.
    const double share =
        static_cast<double>(parts.weight_bytes()) / static_cast<double>(whole.weight_bytes());
    const bool memory_ok = share <= 1.25 / (split.tp_size * split.fsdp_size);
    std::printf(
        "rank %s: logits max diff %.3g compiled, %.3g eager; greedy %s; weights %.3f of one "
        "process's\n",
        rank, compiled, eager, greedy_ok ? "equal" : "DIFFERENT", share);
    if (compiled > 1e-5f || eager > 1e-5f || !greedy_ok || !memory_ok) return 1;
    std::printf("rank %s: ok\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s error: %s\n", rank ? rank : "?", e.what());
    return 1;
  }
}
