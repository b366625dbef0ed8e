#include "kiln/core/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::detail {
namespace {

thread_local bool tls_in_pool_task = false;

class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // One job at a time: a caller that finds the pool busy runs its loop itself.
  bool try_run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock job(job_mu_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      n_ = n;
      chunk_ = chunk;
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_.notify_all();
    run_chunks();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
    return true;
  }

 private:
  void run_chunks() {
    tls_in_pool_task = true;
    for (;;) {
      const int64_t b = next_.fetch_add(chunk_);
      if (b >= n_) break;
      (*fn_)(b, std::min(n_, b + chunk_));
    }
    tls_in_pool_task = false;
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      run_chunks();
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex job_mu_;  // held by the caller whose job is running
  std::mutex mu_;      // guards the job fields and generation_
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

int configured_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& pool() {
  static ThreadPool p(configured_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = num_threads();
  if (threads <= 1 || n < 2 * grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread evens out uneven cores without making tasks tiny.
  const int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  if (!tls_in_pool_task && pool().try_run(n, chunk, fn)) return;
  // The same chunks, one after another: the partition depends only on (n, grain, pool size),
  // never on whether the pool was free, so results do not either (a GEMM split in two parts
  // rounds differently from one sgemm over the whole: examples/serve_concurrent caught it).
  for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
}

}  // namespace kiln::detail
