// Planted in the graph layer, this include of the models layer above it must fail to build: the
// graph library's include path holds its own layer's root and core's, not models' (see
// cmake/layers.cmake and the Layering tests in tests/CMakeLists.txt).
#include "models/decoder.h"
