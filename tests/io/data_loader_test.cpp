// DataLoader (order, shuffling, resume, prefetch thread, shutdown, errors), ArrayDataset,
// TextDataset and ProgressBar.
#include "kiln/io/data_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/io/progress.h"

namespace kiln::io {
namespace {

using namespace std::chrono_literals;
using Indices = std::vector<int64_t>;

constexpr int64_t kN = 23;

// Sample i: x = [10 i, 10 i + 1], y = i, so a batch's fields can be checked against its indices.
std::vector<Array> fields() {
  std::vector<int32_t> x, y;
  for (int32_t i = 0; i < kN; ++i) {
    x.push_back(10 * i);
    x.push_back(10 * i + 1);
    y.push_back(i);
  }
  return {Array(x, {kN, 2}), Array(y, {kN})};
}

void expect_consistent(const Batch& b) {
  ASSERT_EQ(b.arrays.size(), 2u);
  EXPECT_EQ(b[0].shape(), (Shape{b.size(), 2}));
  const std::vector<int64_t> x = b[0].to_vector<int64_t>(), y = b[1].to_vector<int64_t>();
  ASSERT_EQ(y.size(), b.indices.size());
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(y[i], b.indices[i]);
    EXPECT_EQ(x[2 * i], 10 * b.indices[i]);
    EXPECT_EQ(x[2 * i + 1], 10 * b.indices[i] + 1);
  }
}

// The indices of every batch of epoch e, through range-for.
std::vector<Indices> epoch_batches(DataLoader& loader, int64_t e) {
  std::vector<Indices> out;
  int64_t expected_index = loader.position().epoch == e ? loader.position().batch : 0;
  for (const Batch& b : loader.epoch(e)) {
    EXPECT_EQ(b.epoch, e);
    EXPECT_EQ(b.index, expected_index++);
    expect_consistent(b);
    out.push_back(b.indices);
  }
  return out;
}

Indices flatten(const std::vector<Indices>& batches) {
  Indices all;
  for (const Indices& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

template <class F>
bool wait_until(F pred, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// ---- ArrayDataset ----

TEST(ArrayDataset, GathersRowsOfEveryField) {
  // A transposed (non-contiguous) field is made contiguous once.
  const Array t = transpose(reshape(arange(0, 6, 1, int32), {2, 3}));  // rows [0,3] [1,4] [2,5]
  ArrayDataset ds({t, Array({true, false, true})});
  EXPECT_EQ(ds.size(), 3);
  const Indices idx = {2, 0, 2};
  const std::vector<Array> b = ds.get_batch(idx);
  EXPECT_EQ(b[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(b[0].to_vector<int>(), (std::vector<int>{2, 5, 0, 3, 2, 5}));
  EXPECT_EQ(b[1].dtype(), bool_);
  EXPECT_EQ(b[1].to_vector<int>(), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(ds.get_batch(Indices{})[0].shape(), (Shape{0, 2}));
}

TEST(ArrayDataset, Errors) {
  EXPECT_THROW(ArrayDataset({}), ValueError);
  EXPECT_THROW(ArrayDataset({Array()}), ValueError);
  EXPECT_THROW(ArrayDataset({Array(1.0f)}), ShapeError);
  try {
    ArrayDataset({zeros({4, 2}), zeros({5})});
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("common first axis: (4,2), (5,)"), std::string::npos) << e.what();
  }
  ArrayDataset ds({zeros({4, 2})});
  EXPECT_THROW(ds.get_batch(Indices{4}), ValueError);
  EXPECT_THROW(ds.get_batch(Indices{-1}), ValueError);
}

// ---- order, batching, shuffling ----

TEST(DataLoader, SequentialBatchesAndLastPartialBatch) {
  DataLoader loader(fields(), {.batch_size = 5});
  EXPECT_EQ(loader.size(), kN);
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  const std::vector<Indices> batches = epoch_batches(loader, 0);
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches[4], (Indices{20, 21, 22}));
  Indices all = flatten(batches), want(kN);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);
  EXPECT_EQ(loader.position(), (DataPosition{1, 0}));
}

TEST(DataLoader, DropLast) {
  DataLoader loader(fields(), {.batch_size = 5, .shuffle = true, .seed = 3, .drop_last = true});
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int64_t e = 0; e < 3; ++e) {
    const std::vector<Indices> batches = epoch_batches(loader, e);
    ASSERT_EQ(batches.size(), 4u);
    for (const Indices& b : batches) EXPECT_EQ(b.size(), 5u);
    // The 20 samples are distinct, and the 3 left out are the end of the epoch's permutation.
    const Indices all = flatten(batches);
    EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 20u);
  }
}

TEST(DataLoader, ShuffleVisitsEverySampleOncePerEpochInANewOrder) {
  const DataLoaderOptions o{.batch_size = 4, .shuffle = true, .seed = 42};
  DataLoader a(fields(), o);
  std::vector<Indices> orders;
  for (int64_t e = 0; e < 4; ++e) {
    const Indices order = flatten(epoch_batches(a, e));
    Indices sorted = order, want(kN);
    std::sort(sorted.begin(), sorted.end());
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want) << "epoch " << e;
    orders.push_back(order);
  }
  for (size_t i = 0; i < orders.size(); ++i)
    for (size_t j = i + 1; j < orders.size(); ++j) EXPECT_NE(orders[i], orders[j]) << i << " vs " << j;

  // Deterministic from (seed, epoch): another loader, epochs visited in another order.
  DataLoader b(fields(), o);
  EXPECT_EQ(flatten(epoch_batches(b, 2)), orders[2]);
  EXPECT_EQ(flatten(epoch_batches(b, 0)), orders[0]);
  EXPECT_EQ(b.batch_indices(3, 1), Indices(orders[3].begin() + 4, orders[3].begin() + 8));
  // Another seed gives another order.
  DataLoader c(fields(), {.batch_size = 4, .shuffle = true, .seed = 43});
  EXPECT_NE(flatten(epoch_batches(c, 0)), orders[0]);
}

TEST(DataLoader, NextCrossesEpochsAndMatchesBatchIndices) {
  DataLoader loader(fields(), {.batch_size = 10, .shuffle = true, .seed = 1});
  ASSERT_EQ(loader.batches_per_epoch(), 3);
  for (int64_t k = 0; k < 8; ++k) {
    EXPECT_EQ(loader.position(), (DataPosition{k / 3, k % 3}));
    const Batch b = loader.next();
    EXPECT_EQ(b.epoch, k / 3);
    EXPECT_EQ(b.index, k % 3);
    EXPECT_EQ(b.size(), k % 3 == 2 ? 3 : 10);
    EXPECT_EQ(b.indices, loader.batch_indices(b.epoch, b.index));
    expect_consistent(b);
  }
}

TEST(DataLoader, PrefetchDepthDoesNotChangeTheStream) {
  auto stream = [](int prefetch) {
    DataLoader loader(fields(), {.batch_size = 6, .shuffle = true, .seed = 9, .prefetch = prefetch});
    Indices all;
    for (int k = 0; k < 10; ++k) {
      const Batch b = loader.next();
      all.insert(all.end(), b.indices.begin(), b.indices.end());
    }
    return all;
  };
  const Indices ref = stream(0);
  EXPECT_EQ(stream(1), ref);
  EXPECT_EQ(stream(2), ref);
  EXPECT_EQ(stream(7), ref);
}

// ---- position and resume ----

TEST(DataLoader, ResumeFromASavedPositionReproducesTheRemainingBatches) {
  const DataLoaderOptions o{.batch_size = 4, .shuffle = true, .seed = 5, .transform = to_float(0, 0.5)};
  DataLoader first(fields(), o);
  for (int k = 0; k < 9; ++k) first.next();  // into the second epoch (6 batches per epoch)
  const DataPosition saved = first.position();
  EXPECT_EQ(saved, (DataPosition{1, 3}));
  std::vector<Batch> rest;
  for (int k = 0; k < 8; ++k) rest.push_back(first.next());

  DataLoader resumed(fields(), o);
  resumed.set_position(saved);
  EXPECT_EQ(resumed.position(), saved);
  for (const Batch& want : rest) {
    const Batch got = resumed.next();
    EXPECT_EQ(got.epoch, want.epoch);
    EXPECT_EQ(got.index, want.index);
    EXPECT_EQ(got.indices, want.indices);
    EXPECT_EQ(got[0].to_vector<float>(), want[0].to_vector<float>());
    EXPECT_EQ(got[1].to_vector<int>(), want[1].to_vector<int>());
  }
}

TEST(DataLoader, EpochRangeContinuesARestoredPosition) {
  DataLoader ref(fields(), {.batch_size = 5, .shuffle = true, .seed = 11});
  const std::vector<Indices> epoch2 = epoch_batches(ref, 2);

  DataLoader loader(fields(), {.batch_size = 5, .shuffle = true, .seed = 11});
  loader.set_position({2, 3});
  EXPECT_EQ(epoch_batches(loader, 2), std::vector<Indices>(epoch2.begin() + 3, epoch2.end()));
  EXPECT_EQ(loader.position(), (DataPosition{3, 0}));
  // A finished epoch asked for again starts over.
  EXPECT_EQ(epoch_batches(loader, 2), epoch2);
  // Another epoch starts at its batch 0 even from mid-epoch.
  loader.set_position({2, 1});
  EXPECT_EQ(epoch_batches(loader, 4).size(), 5u);
  // Leaving the loop early keeps the position for the next loop.
  for (const Batch& b : loader.epoch(2))
    if (b.index == 1) break;
  EXPECT_EQ(loader.position(), (DataPosition{2, 2}));
  EXPECT_EQ(epoch_batches(loader, 2), std::vector<Indices>(epoch2.begin() + 2, epoch2.end()));
}

TEST(DataLoader, SetPositionChecksAndNormalizes) {
  DataLoader loader(fields(), {.batch_size = 5});
  EXPECT_THROW(loader.set_position({-1, 0}), ValueError);
  EXPECT_THROW(loader.set_position({0, 6}), ValueError);
  EXPECT_THROW(loader.set_position({0, -1}), ValueError);
  EXPECT_THROW(loader.epoch(-1), ValueError);
  EXPECT_THROW(loader.batch_indices(0, 7), ValueError);
  loader.set_position({4, 5});  // the end of epoch 4 is the start of epoch 5
  EXPECT_EQ(loader.position(), (DataPosition{5, 0}));
  EXPECT_EQ(loader.next().epoch, 5);
}

TEST(DataLoader, SetPositionWhileBatchesAreInFlightDropsThem) {
  std::atomic<int> calls{0};
  DataLoader loader(fields(), {.batch_size = 3,
                               .shuffle = true,
                               .seed = 2,
                               .transform =
                                   [&](std::vector<Array> f) {
                                     ++calls;
                                     std::this_thread::sleep_for(2ms);
                                     return f;
                                   },
                               .prefetch = 3});
  loader.next();
  ASSERT_TRUE(wait_until([&] { return calls.load() >= 2; }));
  loader.set_position({3, 5});
  const Batch b = loader.next();
  EXPECT_EQ(b.epoch, 3);
  EXPECT_EQ(b.index, 5);
  EXPECT_EQ(b.indices, loader.batch_indices(3, 5));
  expect_consistent(b);
  EXPECT_EQ(loader.next().index, 6);
}

// ---- the prefetch thread ----

TEST(DataLoader, PrefetchThreadRunsAheadWhileTheConsumerHoldsABatch) {
  // Batch 1's transform waits until the consumer is "training" on batch 0 (has it and has not
  // asked for more): it can only finish if it runs beside the consumer, not inside next().
  std::atomic<bool> training{false};
  std::atomic<int> transformed{0};
  DataLoader loader(fields(), {.batch_size = 2,
                               .transform =
                                   [&](std::vector<Array> f) {
                                     if (transformed.load() == 1) {
                                       EXPECT_TRUE(wait_until([&] { return training.load(); }));
                                     }
                                     std::this_thread::sleep_for(1ms);  // a slow transform
                                     ++transformed;
                                     return f;
                                   },
                               .prefetch = 3});
  EXPECT_EQ(loader.batches_prepared(), 0);  // nothing runs before the first next()
  const Batch b0 = loader.next();
  training = true;
  // The producer fills the queue (1 delivered + 3 queued) without another call...
  ASSERT_TRUE(wait_until([&] { return loader.batches_prepared() == 4; }));
  // ...and no further: the queue is bounded by `prefetch`.
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(loader.batches_prepared(), 4);
  EXPECT_EQ(transformed.load(), 4);
  training = false;
  EXPECT_EQ(loader.next().index, 1);
  ASSERT_TRUE(wait_until([&] { return loader.batches_prepared() == 5; }));
  EXPECT_EQ(b0.index, 0);
}

TEST(DataLoader, TransformRunsOnThePrefetchThread) {
  std::atomic<bool> on_caller{false};
  const auto caller = std::this_thread::get_id();
  DataLoader loader(fields(), {.batch_size = 4, .transform = [&](std::vector<Array> f) {
                                 if (std::this_thread::get_id() == caller) on_caller = true;
                                 f[0] = astype(f[0], float32) * 2.0f;
                                 return f;
                               }});
  const Batch b = loader.next();
  EXPECT_FALSE(on_caller.load());
  EXPECT_TRUE(b[0].is_available());  // evaluated by the prefetch thread
  EXPECT_EQ(b[0].to_vector<float>(), (std::vector<float>{0, 2, 20, 22, 40, 42, 60, 62}));
}

TEST(DataLoader, ToFloatScalesImages) {
  std::vector<uint8_t> pixels = {0, 51, 255, 102, 204, 1};
  DataLoader loader({Array(pixels, {3, 2}), Array({7, 8, 9})}, {.batch_size = 2, .transform = to_float()});
  const Batch b = loader.next();
  EXPECT_EQ(b[0].dtype(), float32);
  const std::vector<float> v = b[0].to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(v[i], pixels[i] / 255.0f);
  EXPECT_EQ(b[1].dtype(), int32);
  EXPECT_EQ(b[1].to_vector<int>(), (std::vector<int>{7, 8}));

  DataLoader bad({Array(pixels, {3, 2})}, {.transform = to_float(1)});
  EXPECT_THROW(bad.next(), ValueError);
}

struct TransformFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(DataLoader, TransformExceptionsAreRethrownAtNextAndTheBatchIsRetried) {
  for (int prefetch : {0, 2}) {
    std::atomic<int> failures{2};  // batch 2 fails twice, then works
    DataLoader loader(fields(), {.batch_size = 5,
                                 .transform =
                                     [&](std::vector<Array> f) {
                                       if (f[1].to_vector<int>()[0] == 10 && failures.fetch_sub(1) > 0)
                                         throw TransformFailure("no batch at 10");
                                       return f;
                                     },
                                 .prefetch = prefetch});
    EXPECT_EQ(loader.next().index, 0);
    EXPECT_EQ(loader.next().index, 1);
    try {
      loader.next();
      ADD_FAILURE() << "prefetch " << prefetch;
    } catch (const TransformFailure& e) {
      EXPECT_STREQ(e.what(), "no batch at 10");
    }
    EXPECT_EQ(loader.position(), (DataPosition{0, 2}));
    EXPECT_THROW(loader.next(), TransformFailure);  // tried again, fails again
    const Batch b = loader.next();
    EXPECT_EQ(b.index, 2);
    expect_consistent(b);
    EXPECT_EQ(loader.next().index, 3);
  }
}

// A generic source: sample i is (i * i) as int64, and one index that cannot be read.
class Squares : public BatchSource {
 public:
  explicit Squares(int64_t n, int64_t broken = -1) : n_(n), broken_(broken) {}
  int64_t size() const override { return n_; }
  std::vector<Array> get_batch(std::span<const int64_t> indices) const override {
    std::vector<int64_t> v;
    for (int64_t i : indices) {
      if (i == broken_) throw KeyError::of("Squares", "unreadable sample", "{}", i);
      v.push_back(i * i);
    }
    return {Array(v, {static_cast<int64_t>(v.size())})};
  }

 private:
  int64_t n_, broken_;
};

TEST(DataLoader, GenericSourceAndItsErrors) {
  DataLoader loader(std::make_shared<Squares>(10), {.batch_size = 4, .shuffle = true, .seed = 8});
  int64_t seen = 0;
  for (const Batch& b : loader.epoch(0)) {
    const std::vector<int64_t> v = b[0].to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], b.indices[i] * b.indices[i]);
    seen += b.size();
  }
  EXPECT_EQ(seen, 10);

  DataLoader broken(std::make_shared<Squares>(10, 5), {.batch_size = 4});
  EXPECT_EQ(broken.next().index, 0);
  EXPECT_THROW(broken.next(), KeyError);
  EXPECT_THROW(broken.next(), KeyError);
  EXPECT_THROW(Batch{}[0], ValueError);
}

// ---- shutdown and edge cases ----

TEST(DataLoader, DestructionAtAnyPointStopsTheThread) {
  { DataLoader never_started(fields(), {.batch_size = 2}); }
  {
    DataLoader full_queue(fields(), {.batch_size = 2, .shuffle = true});
    full_queue.next();
    ASSERT_TRUE(wait_until([&] { return full_queue.batches_prepared() == 3; }));
  }
  // Destroyed while the transform runs: the destructor waits for it, and nothing runs after.
  std::atomic<int> entered{0};
  {
    DataLoader busy(fields(), {.batch_size = 2,
                               .transform =
                                   [&](std::vector<Array> f) {
                                     ++entered;
                                     std::this_thread::sleep_for(20ms);
                                     return f;
                                   },
                               .prefetch = 4});
    busy.next();
    ASSERT_TRUE(wait_until([&] { return entered.load() >= 2; }));
  }
  const int after = entered.load();
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(entered.load(), after);
  // Mid-epoch in a range-for, leaving by an exception.
  int seen = 0;
  try {
    DataLoader loader(fields(), {.batch_size = 3});
    for (const Batch& b : loader.epoch(0))
      if (++seen, b.index == 2) throw std::runtime_error("stop");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(seen, 3);
}

TEST(DataLoader, EpochsWithoutBatches) {
  DataLoader empty({zeros({0, 3})}, {.batch_size = 4});
  EXPECT_EQ(empty.batches_per_epoch(), 0);
  EXPECT_THROW(empty.next(), ValueError);
  int n = 0;
  for (const Batch& b : empty.epoch(0)) n += static_cast<int>(b.size());
  EXPECT_EQ(n, 0);
  DataLoader dropped(fields(), {.batch_size = 24, .drop_last = true});
  EXPECT_EQ(dropped.batches_per_epoch(), 0);
  EXPECT_THROW(dropped.next(), ValueError);
  DataLoader single(fields(), {.batch_size = 24});
  EXPECT_EQ(single.batches_per_epoch(), 1);
  EXPECT_EQ(single.next().size(), kN);
  EXPECT_EQ(single.next().epoch, 1);
}

TEST(DataLoader, OptionsAreChecked) {
  EXPECT_THROW({ DataLoader l(fields(), {.batch_size = 0}); }, ValueError);
  EXPECT_THROW({ DataLoader l(fields(), {.prefetch = -1}); }, ValueError);
  EXPECT_THROW({ DataLoader l(std::shared_ptr<const BatchSource>{}); }, ValueError);
  EXPECT_THROW({ DataLoader l({zeros({3}), zeros({4})}); }, ShapeError);
}

// Two shards of batch B see, batch after batch, exactly what one loader of batch 2B sees, split
// between them in rank order: the data-parallel equivalence nn/distributed.h relies on.
TEST(DataLoader, ShardsSplitEveryGlobalBatchInRankOrder) {
  for (const bool drop_last : {false, true}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "keep the last batch");
    const DataLoaderOptions whole_options{
        .batch_size = 6, .shuffle = true, .seed = 5, .drop_last = drop_last};
    DataLoader whole(fields(), whole_options);
    DataLoader rank0(fields(), {.batch_size = 3,
                                .shuffle = true,
                                .seed = 5,
                                .drop_last = drop_last,
                                .shard_rank = 0,
                                .shard_count = 2});
    DataLoader rank1(fields(), {.batch_size = 3,
                                .shuffle = true,
                                .seed = 5,
                                .drop_last = drop_last,
                                .prefetch = 0,
                                .shard_rank = 1,
                                .shard_count = 2});
    ASSERT_EQ(rank0.batches_per_epoch(), whole.batches_per_epoch());
    ASSERT_EQ(rank1.batches_per_epoch(), whole.batches_per_epoch());
    EXPECT_EQ(whole.batches_per_epoch(), drop_last ? 3 : 4);  // 23 samples, global batches of 6
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t b = 0; b < whole.batches_per_epoch(); ++b) {
        const Batch w = whole.next(), p0 = rank0.next(), p1 = rank1.next();
        expect_consistent(p0);
        expect_consistent(p1);
        EXPECT_EQ(p0.epoch, e);
        EXPECT_EQ(p1.index, b);
        Indices joined = p0.indices;
        joined.insert(joined.end(), p1.indices.begin(), p1.indices.end());
        EXPECT_EQ(joined, w.indices) << "epoch " << e << " batch " << b;
        EXPECT_EQ(p0.indices, rank0.batch_indices(e, b));
        // Full global batches give every rank batch_size samples; the last (5 samples) splits 2 + 3.
        const bool last = !drop_last && b == 3;
        EXPECT_EQ(p0.size(), last ? 2 : 3);
        EXPECT_EQ(p1.size(), 3);
      }
  }
}

TEST(DataLoader, ShardsOfAShortLastBatchMayBeEmpty) {
  // 7 samples, 3 shards of batch 2: global batches of 6 and 1; the lone last sample goes to rank 2.
  std::vector<int64_t> sizes;
  for (int r = 0; r < 3; ++r) {
    DataLoader shard(fields(), {.batch_size = 2, .shard_rank = r, .shard_count = 3});
    DataLoader seven({slice(fields()[0], {Slice{0, 7}}), slice(fields()[1], {Slice{0, 7}})},
                     {.batch_size = 2, .shard_rank = r, .shard_count = 3});
    EXPECT_EQ(shard.batches_per_epoch(), 4);  // 23 / 6, rounded up
    ASSERT_EQ(seven.batches_per_epoch(), 2);
    EXPECT_EQ(seven.next().indices, (Indices{2 * r, 2 * r + 1}));
    const Batch last = seven.next();
    expect_consistent(last);
    EXPECT_EQ(last.indices, r == 2 ? Indices{6} : Indices{});
  }
}

TEST(DataLoader, ShardOptionsAreChecked) {
  EXPECT_THROW({ DataLoader l(fields(), {.shard_count = 0}); }, ValueError);
  EXPECT_THROW({ DataLoader l(fields(), {.shard_rank = 2, .shard_count = 2}); }, ValueError);
  EXPECT_THROW({ DataLoader l(fields(), {.shard_rank = -1, .shard_count = 2}); }, ValueError);
}

TEST(DataLoader, NullTransformResultIsAnError) {
  DataLoader loader(fields(), {.transform = [](std::vector<Array> f) {
                      f[1] = Array();
                      return f;
                    }});
  EXPECT_THROW(loader.next(), ValueError);
}

// ---- TextDataset ----

const std::string kText = "hello, world\n";  // 13 bytes

TEST(TextDataset, VocabularyEncodeDecode) {
  TextDataset ds(kText, 4);
  const std::string vocab(ds.vocabulary().begin(), ds.vocabulary().end());
  EXPECT_EQ(vocab, "\n ,dehlorw");
  EXPECT_EQ(ds.vocab_size(), 10);
  EXPECT_EQ(ds.encode("hello"), (std::vector<int32_t>{5, 4, 6, 6, 7}));
  EXPECT_EQ(ds.decode(ds.encode(kText)), kText);
  EXPECT_EQ(ds.tokens().shape(), (Shape{13}));
  EXPECT_EQ(ds.decode(ds.tokens()), kText);
  EXPECT_EQ(ds.decode(astype(Array({9, 7, 8, 3}, Shape{2, 2}), int64)), "word");
}

TEST(TextDataset, WindowsAreShiftedByOne) {
  TextDataset ds(kText, 4);
  EXPECT_EQ(ds.size(), 9);  // starts 0..8
  auto [in0, tg0] = ds.get(0);
  EXPECT_EQ(ds.decode(in0), "hell");
  EXPECT_EQ(ds.decode(tg0), "ello");
  auto [in8, tg8] = ds.get(8);
  EXPECT_EQ(ds.decode(in8), "orld");
  EXPECT_EQ(ds.decode(tg8), "rld\n");
  const std::vector<Array> b = ds.get_batch(Indices{8, 0, 3});
  EXPECT_EQ(b[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(b[0].dtype(), int32);
  EXPECT_EQ(ds.decode(b[0]), "orldhelllo, ");
  EXPECT_EQ(ds.decode(b[1]), "rld\nelloo, w");

  TextDataset strided(kText, 4, 4);
  EXPECT_EQ(strided.size(), 3);  // starts 0, 4, 8
  EXPECT_EQ(strided.decode(strided.get(1)[0]), "o, w");
  EXPECT_EQ(strided.decode(strided.get(2)[1]), "rld\n");
  EXPECT_EQ(TextDataset("ab", 1).size(), 1);
}

TEST(TextDataset, Errors) {
  EXPECT_THROW(TextDataset(kText, 0), ValueError);
  EXPECT_THROW(TextDataset(kText, 4, 0), ValueError);
  EXPECT_THROW(TextDataset("abc", 3), ValueError);
  TextDataset ds(kText, 4);
  EXPECT_THROW(ds.encode("hex"), KeyError);
  EXPECT_THROW(ds.decode(std::vector<int32_t>{10}), ValueError);
  EXPECT_THROW(ds.decode(std::vector<int32_t>{-1}), ValueError);
  EXPECT_THROW(ds.decode(Array({1.0f})), DtypeError);
  EXPECT_THROW(ds.get(9), ValueError);
  EXPECT_THROW(ds.get_batch(Indices{-1}), ValueError);
  EXPECT_THROW(TextDataset::from_file("/nonexistent/kiln/text.txt", 4), RuntimeError);
}

TEST(TextDataset, FromFileThroughADataLoader) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_text_" + std::to_string(::getpid()) + ".txt"))
          .string();
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i * 7919 % 1000) + "\n";
  std::ofstream(path, std::ios::binary) << text;
  auto ds = std::make_shared<TextDataset>(TextDataset::from_file(path, 8, 3));
  std::filesystem::remove(path);
  EXPECT_EQ(ds->decode(ds->tokens()), text);
  DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .seed = 4});
  int64_t windows = 0;
  for (const Batch& b : loader.epoch(0)) {
    ASSERT_EQ(b[0].shape(), (Shape{b.size(), 8}));
    const std::string in = ds->decode(b[0]), tg = ds->decode(b[1]);
    for (int64_t r = 0; r < b.size(); ++r) {
      const auto start = static_cast<size_t>(b.indices[static_cast<size_t>(r)] * 3);
      EXPECT_EQ(in.substr(static_cast<size_t>(r) * 8, 8), text.substr(start, 8));
      EXPECT_EQ(tg.substr(static_cast<size_t>(r) * 8, 8), text.substr(start + 1, 8));
    }
    windows += b.size();
  }
  EXPECT_EQ(windows, ds->size());
  EXPECT_EQ(ds->size(), (static_cast<int64_t>(text.size()) - 9) / 3 + 1);
}

// ---- ProgressBar ----

TEST(ProgressBar, LinesMode) {
  double t = 100;
  std::ostringstream out;
  ProgressBar bar(10, {.mode = ProgressMode::lines, .epochs = 3, .every = 5, .clock = [&] { return t; }},
                  out);
  EXPECT_FALSE(bar.terminal());
  bar.start_epoch(2);
  for (int s = 1; s <= 10; ++s) {
    t += 0.4;
    bar.step(32, 0.25 * s);
  }
  EXPECT_EQ(out.str(),
            "epoch 2/3  step 5/10  loss 0.7500  80.0 samples/s  ETA 0:02\n"
            "epoch 2/3  step 10/10  loss 1.3750  80.0 samples/s  in 0:04\n");
  bar.finish();  // already finished by the last step
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

TEST(ProgressBar, LinesModeByTimeIntervalAndResumedEpoch) {
  double t = 0;
  std::ostringstream out;
  ProgressBar bar(
      100, {.mode = ProgressMode::lines, .every = 1000, .interval = 1.0, .clock = [&] { return t; }}, out);
  bar.start_epoch(7, 40);  // resumed at step 40
  for (int s = 0; s < 5; ++s) {
    t += 0.3;
    bar.step(10);
  }
  bar.finish();
  // A line at 1.2 s (step 44) and the closing one at step 45; the rate counts this run's steps only.
  EXPECT_EQ(out.str(),
            "epoch 7  step 44/100  33.3 samples/s  ETA 0:17\n"
            "epoch 7  step 45/100  33.3 samples/s  in 0:02\n");
}

TEST(ProgressBar, TerminalModeRedrawsOneLine) {
  double t = 100;
  std::ostringstream out;
  ProgressBar bar(10,
                  {.mode = ProgressMode::terminal,
                   .epochs = 3,
                   .bar_width = 10,
                   .redraw_interval = 1.0,
                   .clock = [&] { return t; }},
                  out);
  EXPECT_TRUE(bar.terminal());
  bar.start_epoch(2);
  for (int s = 1; s <= 10; ++s) {
    t += 0.4;
    bar.step(32, 0.25 * s);
  }
  EXPECT_EQ(out.str(),
            "\repoch 2/3 [=>        ] 1/10  loss 0.2500  80.0 samples/s  ETA 0:04"
            "\repoch 2/3 [====>     ] 4/10  loss 0.6250  80.0 samples/s  ETA 0:02"
            "\repoch 2/3 [=======>  ] 7/10  loss 1.0000  80.0 samples/s  ETA 0:01"
            "\repoch 2/3 [==========] 10/10  loss 1.3750  80.0 samples/s  in 0:04\n");
}

TEST(ProgressBar, TerminalModeErasesTheRestOfALongerLine) {
  double t = 0;
  std::ostringstream out;
  ProgressBar bar(
      4, {.mode = ProgressMode::terminal, .bar_width = 4, .redraw_interval = 0, .clock = [&] { return t; }},
      out);
  t = 0.1;
  bar.step(100);
  t = 1.1;
  bar.step(1);
  bar.finish();  // before the total: the line shows the time so far
  EXPECT_EQ(out.str(),
            "\r[=>  ] 1/4  1000.0 samples/s  ETA 0:00"
            "\r[==> ] 2/4  91.8 samples/s  ETA 0:01  "
            "\r[==> ] 2/4  91.8 samples/s  in 0:01 \n");
}

TEST(ProgressBar, UnknownTotalNoEpochAndAutomaticMode) {
  double t = 0;
  std::ostringstream out;
  ProgressBar bar(0, {.every = 2, .clock = [&] { return t; }}, out);
  EXPECT_FALSE(bar.terminal());  // automatic: a string stream is not a terminal
  for (int s = 0; s < 3; ++s) {
    t += 0.5;
    bar.step(4, 1.0);
  }
  bar.finish();
  EXPECT_EQ(out.str(),
            "step 2  loss 1.0000  8.0 samples/s\n"
            "step 3  loss 1.0000  8.0 samples/s  in 0:02\n");
  EXPECT_EQ(ProgressBar(5, {.mode = ProgressMode::lines}, out).status(), "step 0/5");
}

TEST(ProgressBar, Errors) {
  std::ostringstream out;
  EXPECT_THROW(ProgressBar(-1, {}, out), ValueError);
  EXPECT_THROW(ProgressBar(5, {.every = -1}, out), ValueError);
  EXPECT_THROW(ProgressBar(5, {.interval = -1}, out), ValueError);
  EXPECT_THROW(ProgressBar(5, {.bar_width = 0}, out), ValueError);
  ProgressBar bar(5, {}, out);
  EXPECT_THROW(bar.start_epoch(0, 6), ValueError);
  EXPECT_THROW(bar.step(-1), ValueError);
}

}  // namespace
}  // namespace kiln::io
