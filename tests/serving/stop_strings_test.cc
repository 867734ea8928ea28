// Stop strings as OpenAI cuts them: the text ends before the first stop string, which is left
// out; while streaming, a possible start of one is held back until decided. Expected texts are
// worked out by hand from the pieces.
#include "serving/stop_strings.h"

#include <gtest/gtest.h>

namespace tfm::serving {
namespace {

std::string feed(StopStrings& s, const std::vector<std::string>& pieces,
                 std::vector<std::string>* sent) {
  std::string all;
  for (const std::string& p : pieces) {
    const std::string out = s.put(p);
    if (sent) sent->push_back(out);
    all += out;
  }
  return all + s.finish();
}

TEST(StopStrings, AStopAcrossPiecesCutsTheText) {
  StopStrings s({"be a"});
  std::vector<std::string> sent;
  EXPECT_EQ(feed(s, {"I'll", " be", " a", " man"}, &sent), "I'll ");
  EXPECT_TRUE(s.stopped());
  // "be" may begin "be a": held back, then dropped with the stop string.
  EXPECT_EQ(sent, (std::vector<std::string>{"I'll", " ", "", ""}));
}

TEST(StopStrings, HeldTextIsSentOnceItCannotStartAStop) {
  StopStrings s({"END"});
  std::vector<std::string> sent;
  EXPECT_EQ(feed(s, {"the E", "N", "d of it"}, &sent), "the ENd of it");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(sent, (std::vector<std::string>{"the ", "", "ENd of it"}));
}

TEST(StopStrings, TheEarliestOfSeveralStopsWins) {
  StopStrings s({"world", "lo"});
  EXPECT_EQ(feed(s, {"hello world"}, nullptr), "hel");
}

TEST(StopStrings, HeldTextComesOutWhenTheSequenceEnds) {
  StopStrings s({"\n\n"});
  EXPECT_EQ(feed(s, {"line\n"}, nullptr), "line\n");
  EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, NoStopsPassEverythingAtOnce) {
  StopStrings s({});
  EXPECT_EQ(s.put("abc"), "abc");
  EXPECT_EQ(s.finish(), "");
}

}  // namespace
}  // namespace tfm::serving
