#include "tfm/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tfm/error.h"

namespace tfm {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;
using testing::ThrowsMessage;

TEST(TensorTest, EmptyHasShapeStridesAndBytes) {
  const Tensor t = Tensor::empty({2, 3, 4}, bf16);
  EXPECT_TRUE(t.defined());
  EXPECT_THAT(t.shape(), ElementsAre(2, 3, 4));
  EXPECT_THAT(t.strides(), ElementsAre(12, 4, 1));
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.is_borrowed());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
}

TEST(TensorTest, DefaultTensorIsUndefined) { EXPECT_FALSE(Tensor().defined()); }

TEST(TensorTest, ScalarHasOneElement) {
  const Tensor t = Tensor::zeros({}, f32);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.to_f32_vector(), std::vector<float>{0.0f});
}

TEST(TensorTest, ZerosAreZero) {
  const Tensor t = Tensor::zeros({3, 5}, i64);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data_as<int64_t>()[i], 0);
}

TEST(TensorTest, DimOutOfRangeNamesTheShape) {
  const Tensor t = Tensor::empty({2, 3}, f32);
  EXPECT_THAT([&] { t.dim(2); }, ThrowsMessage<Error>(HasSubstr("[2, 3]")));
  EXPECT_THAT([&] { t.dim(-3); }, ThrowsMessage<Error>(HasSubstr("axis -3")));
}

TEST(TensorTest, NegativeDimensionIsAnError) {
  EXPECT_THAT(
      [] {
        Tensor::empty({2, -1}, f32);
      },
      ThrowsMessage<Error>(HasSubstr("negative dimension")));
}

TEST(TensorTest, FromVectorChecksTheCount) {
  const Tensor t = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), i32);
  EXPECT_EQ(t.data_as<int32_t>()[5], 6);
  EXPECT_THAT(
      [] {
        Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2});
      },
      ThrowsMessage<Error>(HasSubstr("3 values do not fill a tensor of shape [2, 2]")));
}

TEST(TensorTest, ViewSharesStorage) {
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = t.view({3, 2});
  EXPECT_THAT(v.shape(), ElementsAre(3, 2));
  EXPECT_THAT(v.strides(), ElementsAre(2, 1));
  EXPECT_EQ(v.data(), t.data());
  v.data_as<float>()[0] = 42.0f;
  EXPECT_EQ(t.data_as<float>()[0], 42.0f);
  EXPECT_THAT([&] { t.view({4, 2}); }, ThrowsMessage<Error>(HasSubstr("cannot view shape [2, 3]")));
}

TEST(TensorTest, SliceIsAViewOfRows) {
  const Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  const Tensor s = t.slice(1, 3);
  EXPECT_THAT(s.shape(), ElementsAre(2, 2));
  EXPECT_EQ(s.data(), t.data_as<float>() + 2);
  EXPECT_THAT(s.to_f32_vector(), ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(s.slice(1, 2).to_f32_vector(), ElementsAre(4, 5));
  EXPECT_THAT(s.view({4}).to_f32_vector(), ElementsAre(2, 3, 4, 5));
  EXPECT_EQ(t.slice(4, 4).numel(), 0);
}

TEST(TensorTest, SliceOutOfRangeIsAnError) {
  const Tensor t = Tensor::empty({4, 2}, f32);
  EXPECT_THAT([&] { t.slice(2, 5); }, ThrowsMessage<Error>(HasSubstr("slice [2, 5)")));
  EXPECT_THAT([&] { t.slice(-1, 2); }, ThrowsMessage<Error>(HasSubstr("out of range")));
  EXPECT_THAT([&] { t.slice(3, 2); }, ThrowsMessage<Error>(HasSubstr("out of range")));
  EXPECT_THAT([] { Tensor::zeros({}, f32).slice(0, 1); },
              ThrowsMessage<Error>(HasSubstr("out of range")));
}

TEST(TensorTest, BorrowKeepsTheOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor t = Tensor::borrow(owner->data() + 1, {3}, f32, owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_TRUE(t.is_borrowed());
  EXPECT_THAT(t.to_f32_vector(), ElementsAre(2, 3, 4));
  Tensor row = t.slice(1, 2);  // views share the owner too
  t = Tensor();
  EXPECT_FALSE(watch.expired());
  EXPECT_THAT(row.to_f32_vector(), ElementsAre(3));
  row = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(TensorTest, CloneOwnsACopy) {
  auto owner = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{7, 8});
  const Tensor borrowed = Tensor::borrow(owner->data(), {2}, i32, owner);
  Tensor copy = borrowed.clone();
  EXPECT_FALSE(copy.is_borrowed());
  EXPECT_NE(copy.data(), borrowed.data());
  copy.data_as<int32_t>()[0] = 1;
  EXPECT_EQ((*owner)[0], 7);
}

TEST(TensorTest, DtypeMismatchIsAnError) {
  Tensor t = Tensor::empty({2}, bf16);
  EXPECT_THAT([&] { t.data_as<float>(); },
              ThrowsMessage<Error>(HasSubstr("tensor of dtype bf16 accessed as f32")));
  EXPECT_THAT([&] { t.data_as<int64_t>(); }, ThrowsMessage<Error>(HasSubstr("accessed as i64")));
  EXPECT_NO_THROW(t.data_as<uint16_t>());
  const Tensor ints = Tensor::empty({2}, i32);
  EXPECT_THAT([&] { ints.data_as<uint16_t>(); }, ThrowsMessage<Error>(HasSubstr("dtype i32")));
}

TEST(TensorTest, ToConvertsDtype) {
  const Tensor t = Tensor::from_vector(std::vector<float>{1.0f, -2.5f, 65504.0f}, {3});
  const Tensor h = t.to(f16);
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_THAT(std::vector<uint16_t>(h.data_as<uint16_t>(), h.data_as<uint16_t>() + 3),
              ElementsAre(0x3C00u, 0xC100u,
                          0x7BFFu));  // IEEE half patterns of 1, -2.5, 65504
  EXPECT_THAT(h.to_f32_vector(), ElementsAre(1.0f, -2.5f, 65504.0f));
  EXPECT_EQ(t.to(f32).data(), t.data());  // same dtype: no copy
}

TEST(TensorTest, CopyFromChecksShape) {
  Tensor dst = Tensor::empty({2, 2}, f32);
  EXPECT_THAT([&] { dst.copy_from(Tensor::empty({4}, f32)); },
              ThrowsMessage<Error>(HasSubstr("copy_from: shape [4] into [2, 2]")));
}

TEST(TensorTest, ShapeHelpers) {
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({1, 2}), "[1, 2]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0, 2}), 0);
}

}  // namespace
}  // namespace tfm
