// Chat templates that would run until killed or recurse without bound stop with an error: ranges
// as Jinja's sandbox (transformers renders templates in one) limits them, with its message; loops,
// output and nesting bounded, each said by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tfm/error.h"
#include "tokenizer/jinja/interpreter.h"

namespace tfm::jinja {
namespace {

using ::testing::HasSubstr;

std::string render_text(const std::string& source) { return render(parse(source), {}); }

std::string error_of(const std::string& source) {
  try {
    render_text(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "(rendered)";
}

std::string repeated(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

// jinja2.sandbox: `if len(rng) > MAX_RANGE: raise OverflowError("Range too big. The sandbox blocks
// ranges larger than MAX_RANGE (100000).")`, MAX_RANGE = 100000.
TEST(TemplateLimits, RangesAsJinjasSandbox) {
  EXPECT_THAT(
      error_of("{% for i in range(100000000) %}{% endfor %}"),
      HasSubstr("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."));
  EXPECT_THAT(error_of("{{ range(0, 300001, 3) | length }}"), HasSubstr("Range too big"));
  EXPECT_EQ(render_text("{{ range(100000) | length }}"), "100000");
  EXPECT_EQ(render_text("{{ range(0, 300000, 3) | length }}"), "100000");
}

TEST(TemplateLimits, LoopsAndOutputAreBounded) {
  EXPECT_THAT(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                       "{% endfor %}"),
              HasSubstr("loops ran past 1000000 iterations"));
  EXPECT_THAT(error_of("{% for i in range(100000) %}{% for j in range(100) %}" +
                       std::string(1000, 'x') + "{% endfor %}{% endfor %}"),
              HasSubstr("output past 64 MiB"));
}

TEST(TemplateLimits, NestingIsBounded) {
  const std::string deep = "nested deeper than 128 levels";
  EXPECT_THAT(error_of("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"),
              HasSubstr(deep));
  EXPECT_THAT(error_of("{{ 1" + repeated(" + 1", 100000) + " }}"), HasSubstr(deep));
  EXPECT_THAT(error_of("{{ " + repeated("not ", 100000) + "true }}"), HasSubstr(deep));
  EXPECT_THAT(error_of(repeated("{% if true %}", 10000) + repeated("{% endif %}", 10000)),
              HasSubstr("blocks nested deeper than 128 levels"));
  EXPECT_EQ(render_text("{{ 1" + repeated(" + 1", 100) + " }}"), "101");
  EXPECT_EQ(render_text("{{ " + std::string(100, '(') + "7" + std::string(100, ')') + " }}"), "7");
}

}  // namespace
}  // namespace tfm::jinja
