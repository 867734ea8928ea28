#include "backends/cuda/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "backends/cuda/cuda_status.h"
#include "tfm/tensor.h"

namespace tfm::cuda {
namespace {

constexpr size_t kRowsShown = 25;

}  // namespace

StepProfile::StepProfile(const graph::Graph& graph, const std::vector<graph::ValueId>& schedule)
    : graph_(graph), schedule_(schedule), events_(schedule.size() + 1) {
  for (cudaEvent_t& e : events_) TFM_CUDA(cudaEventCreate(&e));
}

StepProfile::~StepProfile() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StepProfile::mark(size_t i, cudaStream_t stream) const {
  TFM_CUDA(cudaEventRecord(events_[i], stream));
}

void StepProfile::report() const {
  struct Total {
    float ms = 0.f;
    int count = 0;
  };
  std::map<std::string, Total> by_kind;
  float all = 0.f;
  for (size_t i = 0; i < schedule_.size(); ++i) {
    float ms = 0.f;
    TFM_CUDA(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    const graph::Node& n = graph_.nodes[static_cast<size_t>(schedule_[i])];
    Total& t = by_kind[std::string(graph::op_name(n.op)) + " " + shape_str(n.shape) + " " +
                       std::string(dtype_name(n.dtype))];
    t.ms += ms;
    ++t.count;
    all += ms;
  }
  std::vector<std::pair<std::string, Total>> rows(by_kind.begin(), by_kind.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::fprintf(stderr, "[tfm profile] %.3f ms in %zu steps\n", all, schedule_.size());
  for (size_t i = 0; i < std::min(rows.size(), kRowsShown); ++i) {
    const auto& [kind, t] = rows[i];
    std::fprintf(stderr, "[tfm profile] %9.3f ms %5.1f%% %5d x %s\n", t.ms,
                 all > 0.f ? 100.f * t.ms / all : 0.f, t.count, kind.c_str());
  }
}

}  // namespace tfm::cuda
