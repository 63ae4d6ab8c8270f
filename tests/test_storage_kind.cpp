// The storage guard at the tensor edge: which tensors may be read, a clear error from
// tensor_stats for the others, and the observer recording their calls without reading them.
#include <ampscope/profiler/observer.h>
#include <ampscope/profiler/tensor_stats.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace {

using ampscope::StorageKind;

struct Case {
  const char* name;
  StorageKind kind;
  at::Tensor (*make)();
};

const Case kCases[] = {
    {"meta", StorageKind::kMeta,
     [] {
       return at::empty({4, 4}, at::TensorOptions().device(at::kMeta));
     }},
    {"sparse", StorageKind::kSparse,
     [] {
       return at::randn({4, 4}).to_sparse();
     }},
    {"nested", StorageKind::kNested,
     [] {
       return at::_nested_tensor_from_tensor_list({at::randn({2, 3}), at::randn({4, 3})});
     }},
    {"quantized", StorageKind::kQuantized,
     [] {
       return at::quantize_per_tensor(at::randn({4, 4}), 0.1, 0, at::kQInt8);
     }},
    {"complex", StorageKind::kComplex,
     [] {
       return at::randn({4, 4}, at::kComplexFloat);
     }},
};

TEST(StorageKind, PlainTensorsAreReadable) {
  EXPECT_EQ(ampscope::storage_kind(at::randn({3, 3})), StorageKind::kReadable);
  EXPECT_TRUE(ampscope::has_readable_storage(at::randn({3, 3}).t()));
  EXPECT_TRUE(ampscope::has_readable_storage(at::empty({0}, at::kHalf)));
  EXPECT_TRUE(ampscope::stats_supported(at::randn({3})));
}

TEST(StorageKind, OtherKindsAreNamedAndNeverRead) {
  for (const Case& c : kCases) {
    const at::Tensor t = c.make();
    EXPECT_EQ(ampscope::storage_kind(t), c.kind) << c.name;
    EXPECT_FALSE(ampscope::has_readable_storage(t)) << c.name;
    EXPECT_FALSE(ampscope::stats_supported(t)) << c.name;
    try {
      ampscope::tensor_stats(t);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const c10::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("ampscope::tensor_stats: cannot read"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(StorageKind, SkippedReadsAreCountedPerKind) {
  ampscope::reset_storage_skips();
  EXPECT_TRUE(ampscope::storage_skip_notes().empty());
  ampscope::stats_supported(kCases[0].make());
  ampscope::stats_supported(kCases[0].make());
  ampscope::stats_supported(kCases[1].make());
  ampscope::stats_supported(at::arange(3));  // integers: nothing to say, not counted
  const auto notes = ampscope::storage_skip_notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].rfind("2 tensor reads skipped: meta tensors", 0), 0u) << notes[0];
  EXPECT_EQ(notes[1].rfind("1 tensor reads skipped: sparse", 0), 0u) << notes[1];
}

TEST(StorageKind, ObserverRecordsCallsOfUnreadableTensorsWithoutStats) {
  ampscope::Observer::start({});
  const at::Tensor m = kCases[0].make();
  at::Tensor y = m * 2.0;
  y.add_(1.0);  // the in-place input check
  const at::Tensor plain = at::ones({3}) * 2.0;
  ampscope::Observer::stop();
  const auto snap = ampscope::Observer::snapshot();
  std::int64_t meta_calls = 0, plain_count = 0;
  for (const auto& [key, agg] : snap.entries) {
    const std::string op = snap.op_names[key.op];
    if (op == "aten::add_") {
      meta_calls += agg.calls;
      EXPECT_EQ(agg.stats.count, 0);
    }
    if (op == "aten::mul" && agg.stats.count > 0) plain_count += agg.stats.count;
  }
  EXPECT_EQ(meta_calls, 1);
  EXPECT_EQ(plain_count, 3);  // the plain op beside it is measured as usual
  bool noted = false;
  for (const auto& n : snap.notes) noted = noted || n.find("meta tensors") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
