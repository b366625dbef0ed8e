#include "kiln/io/data_loader.h"

#include <algorithm>
#include <numeric>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"

namespace kiln::io {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fixed, portable generator, so an order depends on
// (seed, epoch) alone and not on the standard library (std::shuffle's algorithm is unspecified).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fisher-Yates with unbiased bounded draws (rejection below 2^64 mod n).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t mix = seed;
  uint64_t state = splitmix64(mix) ^ (static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ull);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto bound = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do r = splitmix64(state);
    while (r < threshold);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

void check_options(const DataLoaderOptions& o) {
  if (o.batch_size < 1) throw ValueError::of("DataLoader", "batch_size must be >= 1", "got {}", o.batch_size);
  if (o.prefetch < 0) throw ValueError::of("DataLoader", "prefetch must be >= 0", "got {}", o.prefetch);
  if (o.shard_count < 1)
    throw ValueError::of("DataLoader", "shard_count must be >= 1", "got {}", o.shard_count);
  if (o.shard_rank < 0 || o.shard_rank >= o.shard_count)
    throw ValueError::of("DataLoader", "shard_rank must be in [0, shard_count)", "got {} of {}", o.shard_rank,
                         o.shard_count);
}

}  // namespace

const Array& Batch::operator[](size_t i) const {
  if (i >= arrays.size()) throw ValueError::of("Batch", "no such field", "field {} of {}", i, arrays.size());
  return arrays[i];
}

BatchTransform to_float(size_t field, double scale) {
  return [field, scale](std::vector<Array> fields) {
    if (field >= fields.size())
      throw ValueError::of("to_float", "no such field", "field {} of a batch of {} fields", field,
                           fields.size());
    fields[field] = astype(fields[field], float32) * static_cast<float>(scale);
    return fields;
  };
}

DataLoader::DataLoader(std::vector<Array> arrays, DataLoaderOptions options)
    : DataLoader(std::make_shared<const ArrayDataset>(std::move(arrays)), std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const BatchSource> source, DataLoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  if (!source_) throw ValueError::of("DataLoader", "source is null");
  check_options(options_);
  size_ = source_->size();
  if (size_ < 0) throw ValueError::of("DataLoader", "source has a negative size", "{}", size_);
  const int64_t bs = options_.batch_size * options_.shard_count;  // a global batch
  batches_ = options_.drop_last ? size_ / bs : size_ / bs + (size_ % bs != 0);
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DataPosition DataLoader::advance(DataPosition p) const {
  return p.batch + 1 >= batches_ ? DataPosition{p.epoch + 1, 0} : DataPosition{p.epoch, p.batch + 1};
}

std::pair<int64_t, int64_t> DataLoader::sample_range(int64_t batch) const {
  const int64_t k = options_.shard_count, r = options_.shard_rank;
  const int64_t begin = batch * options_.batch_size * k;
  const int64_t length = std::max<int64_t>(std::min(size_, begin + options_.batch_size * k) - begin, 0);
  return {begin + r * length / k, begin + (r + 1) * length / k};
}

void DataLoader::check_position(const char* op, DataPosition p) const {
  if (p.epoch < 0) throw ValueError::of(op, "epoch must be >= 0", "got {}", p.epoch);
  if (p.batch < 0 || p.batch > batches_)
    throw ValueError::of(op, "batch out of range", "{} for {} batches per epoch", p.batch, batches_);
}

const std::vector<int64_t>& DataLoader::order(int64_t epoch) {
  if (order_epoch_ != epoch) {
    order_ = permutation(size_, options_.seed, epoch);
    order_epoch_ = epoch;
  }
  return order_;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  check_position("DataLoader::batch_indices", {epoch, batch});
  const auto [begin, end] = sample_range(batch);
  if (batch == batches_ || begin >= end) return {};
  if (!options_.shuffle) {
    std::vector<int64_t> out(static_cast<size_t>(end - begin));
    std::iota(out.begin(), out.end(), begin);
    return out;
  }
  const std::vector<int64_t> perm = permutation(size_, options_.seed, epoch);
  return {perm.begin() + begin, perm.begin() + end};
}

Batch DataLoader::make_batch(DataPosition p) {
  Batch b;
  b.epoch = p.epoch;
  b.index = p.batch;
  const auto [begin, end] = sample_range(p.batch);
  if (options_.shuffle) {
    const std::vector<int64_t>& perm = order(p.epoch);
    b.indices.assign(perm.begin() + begin, perm.begin() + end);
  } else {
    b.indices.resize(static_cast<size_t>(end - begin));
    std::iota(b.indices.begin(), b.indices.end(), begin);
  }
  b.arrays = source_->get_batch(b.indices);
  if (options_.transform) b.arrays = options_.transform(std::move(b.arrays));
  for (size_t i = 0; i < b.arrays.size(); ++i)
    if (!b.arrays[i].valid())
      throw ValueError::of("DataLoader", "a batch field is an empty array",
                           "field {} of batch {} of epoch {}", i, p.batch, p.epoch);
  // Evaluate here, so the work happens on the prefetch thread and not in the caller's step.
  eval(b.arrays);
  return b;
}

void DataLoader::produce() {
  std::unique_lock lock(mutex_);
  const auto capacity = static_cast<size_t>(options_.prefetch);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!stalled_ && queue_.size() < capacity); });
    if (stop_) return;
    const DataPosition p = producer_;
    const uint64_t generation = generation_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = make_batch(p);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (generation != generation_) {
      // The caller moved elsewhere meanwhile; release the stale batch outside the lock.
      lock.unlock();
      slot = Slot{};
      lock.lock();
      continue;
    }
    stalled_ = slot.error != nullptr;
    queue_.push_back(std::move(slot));
    producer_ = advance(p);
    ++prepared_;
    cv_.notify_all();
  }
}

Batch DataLoader::next() {
  if (batches_ == 0)
    throw ValueError::of("DataLoader::next", "an epoch has no batches", "{} samples, batch_size {}{}", size_,
                         options_.batch_size, options_.drop_last ? ", drop_last" : "");
  if (options_.prefetch == 0) {
    const DataPosition p = position();
    Batch b = make_batch(p);
    std::lock_guard lock(mutex_);
    consumer_ = advance(p);
    ++prepared_;
    return b;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { produce(); });
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty(); });
  Slot slot = std::move(queue_.front());
  queue_.pop_front();
  if (slot.error) {
    // The producer stalled behind the error, so the queue is empty: restart it at this batch.
    ++generation_;
    producer_ = consumer_;
    stalled_ = false;
    lock.unlock();
    cv_.notify_all();
    std::rethrow_exception(slot.error);
  }
  consumer_ = advance(consumer_);
  lock.unlock();
  cv_.notify_all();
  return std::move(slot.batch);
}

DataPosition DataLoader::position() const {
  std::lock_guard lock(mutex_);
  return consumer_;
}

int64_t DataLoader::batches_prepared() const {
  std::lock_guard lock(mutex_);
  return prepared_;
}

void DataLoader::set_position(DataPosition p) {
  check_position("DataLoader::set_position", p);
  if (p.batch == batches_) p = {p.epoch + 1, 0};
  std::deque<Slot> dropped;
  {
    std::lock_guard lock(mutex_);
    if (p == consumer_) return;  // keep what is prepared
    ++generation_;
    dropped.swap(queue_);
    consumer_ = producer_ = p;
    stalled_ = false;
  }
  cv_.notify_all();
}

DataLoader::EpochRange DataLoader::epoch(int64_t e) {
  if (e < 0) throw ValueError::of("DataLoader::epoch", "epoch must be >= 0", "got {}", e);
  return EpochRange(this, e);
}

DataLoader::EpochIterator DataLoader::EpochRange::begin() {
  EpochIterator it(loader_);
  if (loader_->position().epoch != epoch_) loader_->set_position({epoch_, 0});
  if (loader_->batches_per_epoch() > 0) it.batch_ = loader_->next();
  return it;
}

DataLoader::EpochIterator& DataLoader::EpochIterator::operator++() {
  if (batch_->index + 1 < loader_->batches_per_epoch())
    batch_ = loader_->next();
  else
    batch_.reset();
  return *this;
}

}  // namespace kiln::io
