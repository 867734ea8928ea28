// Switches of a kernel backend's choices, for measuring what each is worth (bench/cuda_check.sh);
// the defaults are the choices tfm makes. The CPU backend has none; CUDA honours these.
#pragma once

#include <cstdint>

namespace tfm {

struct KernelOptions {
  // Attention's backward pass under bf16 autocast flash-style (else as tensor-core products).
  bool flash_attention_grad = true;
  // Scratch the flash backward's dk/dv kernel may keep the scores' gradients in for the dq kernel;
  // batch rows past it run in turns, and 0 (or a row past it) takes the dq kernel that runs the
  // products again.
  int64_t saved_score_grad_mib = 512;
  // Each compiled step timed between events, one by one (no CUDA Graph), and a table of where the
  // time went printed after each run.
  bool profile = false;
};

}  // namespace tfm
