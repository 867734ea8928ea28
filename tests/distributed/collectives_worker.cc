// One rank of the collectives test: every collective on values whose result has a closed form.
//   collectives_worker check            (under tfmrun) prints "rank R: ok"
//   collectives_worker die RANK          that rank exits at once; the job must end with an error
//   collectives_worker stall RANK        that rank joins, then never calls a collective: the
//                                        others must time out (3 s) with an error, not hang
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"

namespace {

using tfm::Tensor;

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

void check(tfm::distributed::ProcessGroup& group) {
  const int r = group.rank(), n = group.size();
  // all_reduce: element i of rank r holds r + i; the sum over ranks is n*i + n(n-1)/2.
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(r) + static_cast<float>(i);
  Tensor t = Tensor::from_vector(values, {1000});
  group.all_reduce(t);
  const std::vector<float> sum = t.to_f32_vector();
  for (size_t i = 0; i < sum.size(); ++i) {
    expect(sum[i] == static_cast<float>(n * static_cast<int>(i) + n * (n - 1) / 2), "all_reduce");
  }
  // all_gather: rank r contributes [r, 10r, 100r].
  Tensor mine = Tensor::from_vector(std::vector<float>{1.f * r, 10.f * r, 100.f * r}, {3});
  Tensor all = Tensor::zeros({3 * n}, tfm::DType::f32);
  group.all_gather(mine, all);
  const std::vector<float> gathered = all.to_f32_vector();
  for (int q = 0; q < n; ++q) {
    expect(
        gathered[3 * q] == q && gathered[3 * q + 1] == 10.f * q && gathered[3 * q + 2] == 100.f * q,
        "all_gather");
  }
  // reduce_scatter: every rank holds [0, 1, ..., 2n-1] + r; rank r keeps elements 2r, 2r+1 summed.
  std::vector<float> full(static_cast<size_t>(2 * n));
  for (int i = 0; i < 2 * n; ++i) full[static_cast<size_t>(i)] = static_cast<float>(i + r);
  Tensor part = Tensor::zeros({2}, tfm::DType::f32);
  group.reduce_scatter(Tensor::from_vector(full, {2 * n}), part);
  const std::vector<float> got = part.to_f32_vector();
  for (int j = 0; j < 2; ++j) {
    expect(got[static_cast<size_t>(j)] == static_cast<float>(n * (2 * r + j) + n * (n - 1) / 2),
           "reduce_scatter");
  }
  // all_to_all: rank r sends 100r + q (twice) to rank q, so it receives 100q + r from rank q.
  std::vector<float> send(static_cast<size_t>(2 * n)), received(send.size());
  for (int q = 0; q < n; ++q) {
    send[static_cast<size_t>(2 * q)] = send[static_cast<size_t>(2 * q + 1)] =
        static_cast<float>(100 * r + q);
  }
  group.all_to_all(send.data(), 2, received.data());
  for (int q = 0; q < n; ++q) {
    expect(received[static_cast<size_t>(2 * q)] == static_cast<float>(100 * q + r) &&
               received[static_cast<size_t>(2 * q + 1)] == static_cast<float>(100 * q + r),
           "all_to_all");
  }
  // broadcast from the last rank.
  Tensor b = Tensor::from_vector(std::vector<float>{static_cast<float>(r), 7.f}, {2});
  group.broadcast(b, n - 1);
  expect(b.to_f32_vector() == std::vector<float>{static_cast<float>(n - 1), 7.f}, "broadcast");
  group.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    tfm::distributed::ProcessGroupOptions options =
        tfm::distributed::ProcessGroup::options_from_environment();
    const int chosen = argc > 2 ? std::atoi(argv[2]) : -1;
    if (mode != "check") options.timeout = std::chrono::seconds(3);
    if (mode == "die" && options.rank == chosen) return 7;
    tfm::distributed::ProcessGroup group(options);
    if (mode == "stall" && options.rank == chosen)
      std::this_thread::sleep_for(std::chrono::minutes(1));
    check(group);
    std::printf("rank %d: ok\n", group.rank());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
