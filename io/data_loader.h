#pragma once
// DataLoader: batches of a dataset in a seeded order, prepared on a background thread while the
// caller trains, with a position that can be saved and restored (torch.utils.data.DataLoader with
// one worker thread and a resumable sampler).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/io/datasets.h"

namespace kiln::io {

/// One batch: the arrays of its fields and where it sits in the loader's stream.
struct Batch {
  std::vector<Array> arrays;     ///< one per field after the transform, e.g. {images (B, 28, 28), labels (B)}
  std::vector<int64_t> indices;  ///< dataset indices of its samples, in batch order
  int64_t epoch = 0;             ///< the epoch it belongs to
  int64_t index = 0;             ///< batch number within the epoch
  /// Field `i`. Throws ValueError when there is no such field.
  const Array& operator[](size_t i) const;
  /// Number of samples (batch_size, or less for the last batch of an epoch without drop_last).
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

/// The next batch a DataLoader delivers. Store it in a checkpoint; DataLoader::set_position makes a
/// loader with the same dataset and options continue with exactly the batches that would have come.
struct DataPosition {
  int64_t epoch = 0;  ///< >= 0
  int64_t batch = 0;  ///< in [0, batches_per_epoch())
  bool operator==(const DataPosition&) const = default;
};

/// Maps the fields of a batch to new fields; runs on the prefetch thread.
using BatchTransform = std::function<std::vector<Array>(std::vector<Array>)>;

/// A transform converting field `field` to float32 times `scale` (uint8 pixels -> [0, 1] by
/// default), leaving the other fields alone. The transform throws ValueError when a batch has no
/// such field.
BatchTransform to_float(size_t field = 0, double scale = 1.0 / 255.0);

/// Options of DataLoader, in declaration order (designated initializers must follow it).
struct DataLoaderOptions {
  int64_t batch_size = 1;  ///< samples per batch, >= 1
  bool shuffle = false;    ///< a new permutation every epoch, a function of (seed, epoch) only
  uint64_t seed = 0;
  bool drop_last = false;      ///< drop the last batch of an epoch when it would be smaller
  BatchTransform transform{};  ///< applied to every batch on the prefetch thread, then evaluated there
  int prefetch = 2;            ///< batches prepared ahead by a background thread; 0: made in next()
  /// Data-parallel sharding (nn/distributed.h): this process's rank among shard_count, each
  /// loading its own part of every global batch of batch_size * shard_count samples.
  int shard_rank = 0;   ///< in [0, shard_count)
  int shard_count = 1;  ///< >= 1
};

/// Batches of a dataset, epoch after epoch. Batch b of epoch e holds the samples
/// order_e[b * batch_size, (b + 1) * batch_size), where order_e is 0..N-1 or, with shuffle, a
/// permutation drawn from (seed, e) alone (kiln's own generator, so orders differ from PyTorch's).
/// Sharded (shard_count k > 1), batch b is rank r's part of global batch b, the L samples
/// order_e[b * G, min(N, (b + 1) * G)) with G = batch_size * k: the samples [r * L / k,
/// (r + 1) * L / k) of it. So every rank follows the same order, the ranks' parts are disjoint,
/// together they are exactly what one loader with batch_size G delivers, and a full global batch
/// gives each rank batch_size samples. batches_per_epoch() counts global batches; the last one may
/// be split unevenly (or leave a rank none): use drop_last so the ranks' means weigh alike.
/// A background thread runs ahead of the caller by up to `prefetch` batches, gathering, applying
/// the transform and evaluating its result; an exception it meets is rethrown by next() in place
/// of that batch. Use from one thread (next, epoch, set_position); position() and
/// batches_prepared() may be read from any. Destroying the loader stops its thread, mid-epoch too.
/// Not copyable or movable (the thread refers to it).
class DataLoader {
 public:
  /// Over arrays that share their first axis (ArrayDataset), e.g. {images, labels}.
  /// Throws as ArrayDataset does, and ValueError for bad options (batch_size < 1, prefetch < 0,
  /// shard_count < 1, shard_rank outside [0, shard_count)).
  explicit DataLoader(std::vector<Array> arrays, DataLoaderOptions options = {});
  /// Over any BatchSource (TextDataset, a user's class). Throws ValueError for a null source or
  /// bad options.
  explicit DataLoader(std::shared_ptr<const BatchSource> source, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Number of samples in the dataset.
  int64_t size() const { return size_; }
  /// ceil(size / (batch_size * shard_count)), or floor with drop_last.
  int64_t batches_per_epoch() const { return batches_; }
  /// The options it was built with.
  const DataLoaderOptions& options() const { return options_; }
  /// The dataset it reads.
  const BatchSource& source() const { return *source_; }

  /// The batch at position(), which then moves on by one (batch 0 of epoch e + 1 follows the last
  /// batch of epoch e). Blocks until the prefetch thread has it. Rethrows what the source or the
  /// transform threw for that batch; the position then stays, so the next call tries it again.
  /// Throws ValueError when an epoch has no batches (empty dataset, or drop_last with fewer
  /// samples than batch_size).
  Batch next();
  /// The position of the batch next() returns next.
  DataPosition position() const;
  /// Continue from `p` (from position()). batch == batches_per_epoch() means the start of the next
  /// epoch. Batches prepared for another position are dropped. Throws ValueError for a negative
  /// epoch or a batch outside [0, batches_per_epoch()].
  void set_position(DataPosition p);
  /// The dataset indices batch `batch` of epoch `epoch` holds (this shard's part). Throws as
  /// set_position does.
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;
  /// Batches the prefetch thread has finished and queued so far (the bound of the queue shows as
  /// batches_prepared() - batches delivered <= prefetch).
  int64_t batches_prepared() const;

  class EpochIterator;
  class EpochRange;
  /// The remaining batches of epoch e for range-for: `for (const Batch& b : loader.epoch(e))`.
  /// Continues from position() when it lies in epoch e (so a restored position resumes mid-epoch),
  /// otherwise starts epoch e at batch 0. Throws ValueError for e < 0.
  EpochRange epoch(int64_t e);

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  DataPosition advance(DataPosition p) const;
  std::pair<int64_t, int64_t> sample_range(int64_t batch) const;  // [begin, end) of order_e, this shard's
  void check_position(const char* op, DataPosition p) const;
  const std::vector<int64_t>& order(int64_t epoch);  // the maker's cached permutation
  Batch make_batch(DataPosition p);
  void produce();

  std::shared_ptr<const BatchSource> source_;
  DataLoaderOptions options_;
  int64_t size_ = 0;
  int64_t batches_ = 0;

  // Used only by the thread that makes batches (the prefetch thread, or the caller's when
  // prefetch == 0).
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;

  mutable std::mutex mutex_;    // guards everything below except thread_
  std::condition_variable cv_;  // queue changed, position changed, or stop
  std::deque<Slot> queue_;      // prepared batches; the front is at consumer_
  DataPosition consumer_;       // next batch to deliver
  DataPosition producer_;       // next batch to make
  uint64_t generation_ = 0;     // bumped by set_position: a batch made for an older one is dropped
  bool stalled_ = false;        // an error is queued; make nothing until the caller has seen it
  bool stop_ = false;
  int64_t prepared_ = 0;
  std::thread thread_;  // started by the first next(); touched only by the caller's thread
};

/// Iterator over the batches of one epoch; compares equal to the end once the epoch is done.
class DataLoader::EpochIterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::input_iterator_tag;

  const Batch& operator*() const { return *batch_; }
  const Batch* operator->() const { return &*batch_; }
  /// Fetches the next batch of the epoch (DataLoader::next, which may throw), or becomes the end.
  EpochIterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const { return !batch_.has_value(); }

 private:
  friend class EpochRange;
  explicit EpochIterator(DataLoader* loader) : loader_(loader) {}
  DataLoader* loader_;
  std::optional<Batch> batch_;
};

/// The batches of one epoch; begin() fetches the first one.
class DataLoader::EpochRange {
 public:
  /// Moves the loader to epoch e unless its position already lies in it, then fetches a batch.
  EpochIterator begin();
  std::default_sentinel_t end() const { return {}; }

 private:
  friend class DataLoader;
  EpochRange(DataLoader* loader, int64_t epoch) : loader_(loader), epoch_(epoch) {}
  DataLoader* loader_;
  int64_t epoch_;
};

}  // namespace kiln::io
