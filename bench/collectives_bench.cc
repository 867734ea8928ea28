// All-reduce throughput through the collective graph node, the path tensor parallelism and FSDP
// take: gloo on the CPU, NCCL on CUDA. Under tfmrun (or torchrun) every rank takes part; started
// alone it is a world of one rank, which is what a one-GPU machine allows and still proves the
// NCCL path builds, starts and runs inside a captured graph. Rank 0 prints JSON.
//   collectives_bench [--device cpu|cuda] [--mib 1,16,256] [--iters 20]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "fusion/plan.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "tfm/device.h"
#include "tfm/error.h"

namespace {

const char* flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

std::shared_ptr<tfm::distributed::ProcessGroup> world() {
  tfm::distributed::ProcessGroupOptions options;
  if (std::getenv("RANK") != nullptr) {
    options = tfm::distributed::ProcessGroup::options_from_environment();
  } else {
    options.master_port = 29533;
  }
  return std::make_shared<tfm::distributed::ProcessGroup>(options);
}

// Milliseconds per all_reduce of `count` floats that live on `device` (a state buffer, so only
// the one element the graph returns crosses to the host).
double all_reduce_ms(const std::shared_ptr<tfm::distributed::ProcessGroup>& group,
                     tfm::Device device, int64_t count, int iters) {
  tfm::graph::Builder b;
  const auto x = b.state("x", {count}, tfm::DType::f32);
  b.output(b.view(b.all_reduce(x, tfm::graph::world_group(group)), 0, {1}));
  auto exe = tfm::graph::backend_for(device).compile(b.finish());
  const std::vector<tfm::Tensor> inputs{tfm::Tensor::zeros({count}, tfm::DType::f32).to(device)};
  exe->run(inputs).outputs;  // the first run captures the graph and starts the NCCL communicator
  group->barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) exe->run(inputs).outputs;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         iters;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const tfm::Device device = tfm::resolve_device(flag(argc, argv, "--device", "cpu"));
    const int iters = std::atoi(flag(argc, argv, "--iters", "20"));
    std::vector<int64_t> mib;
    std::stringstream list(flag(argc, argv, "--mib", "1,16,256"));
    for (std::string item; std::getline(list, item, ',');) mib.push_back(std::stoll(item));
    const auto group = world();
    const double ranks = group->size();
    std::string results;
    for (int64_t m : mib) {
      const int64_t bytes = m << 20;
      const double ms = all_reduce_ms(group, device, bytes / 4, iters);
      const double algbw = static_cast<double>(bytes) / (ms * 1e6);  // GB/s
      char entry[256];
      std::snprintf(entry, sizeof entry,
                    "%s{\"mib\": %ld, \"ms\": %.3f, \"algbw_gbps\": %.2f, \"busbw_gbps\": %.2f}",
                    results.empty() ? "" : ", ", static_cast<long>(m), ms, algbw,
                    algbw * 2 * (ranks - 1) / ranks);
      results += entry;
    }
    if (group->rank() == 0) {
      std::printf(
          "{\"device\": \"%s\", \"world_size\": %d, \"op\": \"all_reduce\", \"iters\": %d, "
          "\"results\": [%s]}\n",
          device.str().c_str(), group->size(), iters, results.c_str());
    }
    return 0;
  } catch (const tfm::Error& e) {
    std::fprintf(stderr, "collectives_bench: %s\n", e.what());
    return 1;
  }
}
