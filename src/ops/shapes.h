// Shape rules of every op: what a node's output shape is, or an Error naming the op and the
// offending shapes. The builder calls these; backends trust them.
#pragma once

#include "tfm/tensor.h"

namespace tfm::ops {

Shape embedding_shape(const Shape& table, const Shape& ids);
Shape linear_shape(const Shape& x, const Shape& w, const Shape* bias);
Shape rms_norm_shape(const Shape& x, const Shape& w);
Shape rope_shape(const Shape& x, const Shape& positions, const Shape& inv_freq);
Shape cache_write_shape(const Shape& cache, const Shape& update, const Shape& slots);
Shape attention_shape(const Shape& q, const Shape& k, const Shape& v, const Shape& mask,
                      const Shape& slots);
Shape slice_seq_shape(const Shape& x, int64_t start, int64_t length);
Shape elementwise_shape(const char* op, const Shape& a, const Shape& b);

}  // namespace tfm::ops
