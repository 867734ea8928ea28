#include "backends/cpu/bf16_gemm.h"

#include <algorithm>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// c (f32 or bf16 values) = a b, added to c when `accumulate`.
void matmul(int64_t m, int64_t n, int64_t k, Bf16Matrix a, Bf16Matrix b, void* c,
            dnnl::memory::data_type c_type, int64_t ldc, bool accumulate, const char* op) {
  using dnnl::memory;
  try {
    const memory::desc a_md({m, k}, memory::data_type::bf16, memory::dims{a.row, a.col});
    const memory::desc b_md({k, n}, memory::data_type::bf16, memory::dims{b.row, b.col});
    const memory::desc c_md({m, n}, c_type, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.f);
      attr.set_post_ops(sum);
    }
    // oneDNN keeps made primitives in its own cache, keyed by these descriptions: a shape seen
    // before costs a look-up, not a kernel generation.
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine());
    dnnl::stream stream(engine());
    dnnl::matmul(pd).execute(
        stream, {{DNNL_ARG_SRC, memory(a_md, engine(), const_cast<uint16_t*>(a.data))},
                 {DNNL_ARG_WEIGHTS, memory(b_md, engine(), const_cast<uint16_t*>(b.data))},
                 {DNNL_ARG_DST, memory(c_md, engine(), c)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("[") + op + "] oneDNN bf16 matmul failed (" + e.what() + ") for M=" +
                std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
}

}  // namespace

void bf16_gemm(int64_t m, int64_t n, int64_t k, Bf16Matrix a, Bf16Matrix b, float* c, int64_t ldc,
               bool accumulate, const char* op) {
  matmul(m, n, k, a, b, c, dnnl::memory::data_type::f32, ldc, accumulate, op);
}

void bf16_gemm_rounded(int64_t m, int64_t n, int64_t k, Bf16Matrix a, Bf16Matrix b, uint16_t* c,
                       int64_t ldc, const char* op) {
  matmul(m, n, k, a, b, c, dnnl::memory::data_type::bf16, ldc, false, op);
}

void round_to_bf16(const float* x, int64_t count, uint16_t* out) {
  const auto round = vector_kernels().round_bf16;
  constexpr int64_t kBlock = 1 << 14;
#pragma omp parallel for schedule(static) if (count >= 2 * kBlock)
  for (int64_t at = 0; at < count; at += kBlock) {
    round(x + at, out + at, std::min(kBlock, count - at));
  }
}

const uint16_t* rounded_to_bf16(const float* x, int64_t count) {
  thread_local Bf16Scratch rounded;
  rounded.resize(static_cast<size_t>(count));
  round_to_bf16(x, count, rounded.data());
  return rounded.data();
}

}  // namespace tfm::cpu
