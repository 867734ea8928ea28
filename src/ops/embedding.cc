#include <algorithm>

#include "graph/op_args.h"
#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

namespace tfm::ops::reference {

void embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t count,
               float* out) {
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error("[embedding] token id " + std::to_string(ids[i]) + " outside vocabulary of " +
                  std::to_string(vocab));
    }
    std::copy_n(table + ids[i] * hidden, hidden, out + i * hidden);
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

InputGrads embedding_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::EmbeddingArgs a = graph::embedding_args(n);
  const int64_t vocab = b.shape(a.table)[0];
  const graph::ValueId d_table = b.embedding_grad(dy, a.ids, vocab);
  return {n.shard ? b.as_vocab_shard(d_table, n) : d_table, -1};
}

}  // namespace tfm::ops
