// The sentinel's scan (has_nonfinite) against torch's own isfinite, for every dtype it reads and
// the layouts op outputs and incoming gradients come in: contiguous, transposed, permuted,
// expanded (stride 0), sliced with gaps, and sizes that end mid-block.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "../profiler/src/nonfinite_scan.h"

namespace {

using ampscope::detail::has_nonfinite;

bool oracle(const at::Tensor& t) { return !torch::isfinite(t).all().item<bool>(); }

/// The layouts of `base` (2-D, at least 3 x 4) the scan must handle.
std::vector<at::Tensor> layouts(const at::Tensor& base) {
  return {base,
          base.t(),
          base.unsqueeze(0).permute({2, 0, 1}),
          base.slice(0, 0, base.size(0), 2).slice(1, 1, base.size(1), 3),
          base.select(1, 1).unsqueeze(1).expand({base.size(0), 5}),
          base.narrow(0, 1, 1).expand({4, base.size(1)})};
}

TEST(NonFiniteScan, MatchesTorchIsFiniteForEveryDtypeAndLayout) {
  torch::manual_seed(3);
  const double bad[] = {std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  int checked = 0, positives = 0;
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16}) {
    for (std::int64_t cols : {4, 37, 1500}) {
      at::Tensor clean = torch::randn({7, cols}).to(dtype);
      for (const at::Tensor& t : layouts(clean)) {
        EXPECT_FALSE(has_nonfinite(t)) << dtype << " cols " << cols;
        ++checked;
      }
      for (double v : bad) {
        for (std::int64_t r = 0; r < 7; ++r) {  // every row: some layouts see it, some do not
          at::Tensor dirty = clean.clone();
          dirty.index_put_({r, (r * 13) % cols}, v);
          for (const at::Tensor& t : layouts(dirty)) {
            const bool want = oracle(t);
            EXPECT_EQ(has_nonfinite(t), want)
                << dtype << " cols " << cols << " row " << r << " " << v;
            positives += want;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(positives, checked / 4);  // both answers were exercised
}

TEST(NonFiniteScan, LargeValuesAreFiniteAndEmptyOrIntegerTensorsAreNot) {
  // The largest finite values have all exponent bits but one set.
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, 65504.0, torch::kFloat16)));
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, 3.3895e38, torch::kBFloat16)));
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, std::numeric_limits<float>::max())));
  EXPECT_FALSE(has_nonfinite(torch::empty({0})));
  EXPECT_FALSE(has_nonfinite(torch::ones({5}, torch::kInt32)));
}

}  // namespace
