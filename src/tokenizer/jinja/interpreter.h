// Renders a parsed template against a context of variables.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace tfm::jinja {

std::string render(const std::vector<Node>& nodes, Object context);

}  // namespace tfm::jinja
