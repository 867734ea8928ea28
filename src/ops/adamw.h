// AdamW's per-element update, as torch.optim.AdamW computes it (decoupled weight decay, bias
// correction, eps added after the square root), shared by every backend's optimizer kernel so
// the CPU and a GPU give the same bits.
#pragma once

#include <math.h>

#ifdef __CUDACC__
#define TFM_HOST_DEVICE __host__ __device__
#else
#define TFM_HOST_DEVICE
#endif

namespace tfm::ops {

// The per-step scalars, formed in double and rounded to f32 once, as torch does with Python
// floats applied to f32 tensors.
struct AdamWScalars {
  float decay;        // 1 - lr * weight_decay, for the elements that decay
  float lerp_coeff;   // see adamw_update()
  bool small_weight;  // |1 - beta1| < 0.5
  float beta2;
  float sq_weight;  // 1 - beta2
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / bias_correction1
  // Gradient clipping's coefficient (training::clip_coefficient), 1 without: each gradient is
  // read as g * grad_scale, the bits torch's clip_grad_norm_ leaves in it before the update.
  float grad_scale = 1.f;
};

// The scalars as the optimizer graph's kAdamW reads them: graph::kAdamWScalars floats, a step's
// forward input (host to device each step, as the training step's ids are).
// Where each scalar lies among them.
enum AdamWScalarIndex : int {
  kAdamWDecay,
  kAdamWLerpCoeff,
  kAdamWSmallWeight,
  kAdamWBeta2,
  kAdamWSqWeight,
  kAdamWBiasCorrection2Sqrt,
  kAdamWEps,
  kAdamWNegStepSize,
  kAdamWGradScale,
  kAdamWScalarCount,
};
inline void pack(const AdamWScalars& s, float* out) {
  out[kAdamWDecay] = s.decay;
  out[kAdamWLerpCoeff] = s.lerp_coeff;
  out[kAdamWSmallWeight] = s.small_weight ? 1.f : 0.f;
  out[kAdamWBeta2] = s.beta2;
  out[kAdamWSqWeight] = s.sq_weight;
  out[kAdamWBiasCorrection2Sqrt] = s.bias_correction2_sqrt;
  out[kAdamWEps] = s.eps;
  out[kAdamWNegStepSize] = s.neg_step_size;
  out[kAdamWGradScale] = s.grad_scale;
}
TFM_HOST_DEVICE inline AdamWScalars unpack_adamw_scalars(const float* in) {
  return {in[kAdamWDecay], in[kAdamWLerpCoeff],   in[kAdamWSmallWeight] != 0.f,
          in[kAdamWBeta2], in[kAdamWSqWeight],    in[kAdamWBiasCorrection2Sqrt],
          in[kAdamWEps],   in[kAdamWNegStepSize], in[kAdamWGradScale]};
}

// x * y rounded to f32 before what follows uses it, as torch rounds each op's result: never
// fused with a later add (nvcc fuses where it can; the CPU build compiles the optimizer with
// -ffp-contract=off).
TFM_HOST_DEVICE inline float rounded_product(float x, float y) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}

// The elementwise work in f32, in torch's op order and with the fused multiply-adds of its
// vectorized CPU kernels: lerp_ is fma(w, g - m, m) for |w| < 0.5, else fma(w - 1, g - m, g),
// keeping precision on the side w is close to; addcmul_ is fma(c * g, g, v * beta2). The only
// difference left is sqrt: ours is correctly rounded, torch's vectorized one up to ~0.75 ulp off.
// `decay` is s.decay, or 1 (exactly: the value is unchanged) where weight decay does not apply.
TFM_HOST_DEVICE inline void adamw_update(const AdamWScalars& s, float decay, float& p,
                                         float unscaled_g, float& m, float& v) {
  const float g = rounded_product(unscaled_g, s.grad_scale);
  const float param = rounded_product(p, decay);
  m = fmaf(s.lerp_coeff, g - m, s.small_weight ? m : g);
  v = fmaf(s.sq_weight * g, g, v * s.beta2);
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  p = param + s.neg_step_size * m / denom;
}

}  // namespace tfm::ops
