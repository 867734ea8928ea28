// The same probe as upward_include.cc, built the same way, with the graph layer's own headers and
// those of the layer below it: it builds, so the upward probe fails for its include alone.
#include "graph/builder.h"
#include "tfm/tensor.h"
