// The mesh a compile gets (graph/mesh.h): a graph's collectives must run in groups of the mesh's
// ranks, this rank's group the one its communicator joins.
#include "graph/mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph/builder.h"
#include "tfm/error.h"

namespace tfm::graph {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// A communicator that only says who it is: the checks run no collective.
class Member : public Communicator {
 public:
  Member(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const float*, size_t, float*) override {}
  void reduce_scatter_sum(const float*, size_t, float*) override {}
  void all_to_all(const float*, size_t, float*) override {}
  void broadcast_bytes(void*, size_t, int) override {}
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1); }

 private:
  int rank_, size_;
};

// One all_reduce over tensor-parallel pairs of a 2 x 2 job, seen by world rank 3 (the second of
// the pair {2, 3}).
Graph reduced(std::vector<std::vector<int>> groups, int rank_in_group) {
  Builder b;
  const auto group = std::make_shared<const CollectiveGroup>(
      CollectiveGroup{"tp", std::move(groups), std::make_shared<Member>(rank_in_group, 2)});
  b.output(b.all_reduce(b.input("x", {4}, DType::f32), group));
  return b.finish();
}

const Mesh kFour{3, {kCpu, kCpu, kCpu, kCpu}};

TEST(MeshTest, GroupsOfTheMeshsRanksPass) {
  EXPECT_NO_THROW(check_mesh(reduced({{0, 1}, {2, 3}}, 1), kFour));
}

TEST(MeshTest, ARankOutsideTheMeshIsAnError) {
  EXPECT_THAT(
      [] {
        check_mesh(reduced({{0, 1}, {2, 5}}, 1), kFour);
      },
      ThrowsMessage<Error>(HasSubstr("names rank 5 of a mesh of 4 devices")));
}

TEST(MeshTest, ThisRankMustBeWhereItsCommunicatorSays) {
  EXPECT_THAT(
      [] {
        check_mesh(reduced({{0, 1}, {2, 3}}, 0), kFour);
      },
      ThrowsMessage<Error>(HasSubstr("rank 3 is in no group at its place 0")));
}

TEST(MeshTest, GroupsOfAnotherSizeAreAnError) {
  EXPECT_THAT(
      [] {
        check_mesh(reduced({{0, 1, 2}}, 1), kFour);
      },
      ThrowsMessage<Error>(HasSubstr("a group of 3 ranks in collectives of 2")));
}

}  // namespace
}  // namespace tfm::graph
