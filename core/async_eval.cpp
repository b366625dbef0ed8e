// async_eval: evaluation on a scheduler thread. Waiting needs no events of its own: every node
// already has a claim word (core/eval.cpp) that says whether it is unevaluated, running or
// available, and eval() waits on the words of nodes another thread runs. So a waiter blocks on
// the nodes the scheduler is computing, computes itself what the scheduler has not reached, and
// when the scheduler fails a node (its word goes back to unevaluated) runs that node again, which
// raises the same error on the waiting thread.
//
// GPU work is submitted without waiting (detail::eval_nowait): the scheduler records the next job
// while the device runs this one, and the waiter completes the work it needs.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "kiln/core/array.h"
#include "kiln/core/cpu/parallel.h"

namespace kiln {
namespace detail {
namespace {

class Scheduler {
 public:
  void submit(std::vector<Array> arrays) {
    std::vector<std::vector<Array>> finished;  // released after the lock
    {
      std::lock_guard lock(mutex_);
      // Jobs that waiting threads already computed are dropped: when callers wait on each step,
      // they often do the work before this thread gets to it, and the queue must not keep every
      // old step's arrays alive until it catches up.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (std::all_of(it->begin(), it->end(), [](const Array& a) { return a.is_available(); })) {
          finished.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      queue_.push_back(std::move(arrays));
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    wake_.notify_one();
  }
  // At exit, pending work is finished before the thread is joined (nothing is dropped half-done).
  ~Scheduler() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    for (;;) {
      std::vector<Array> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        eval_nowait(job);
      } catch (...) {
        // Not lost: the failed node is unevaluated again, and whoever waits on it (or on what
        // depends on it) runs it and gets the error on their own thread.
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::vector<Array>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

Scheduler& scheduler() {
  // The CPU pool is built first, so it is destroyed after the scheduler, whose destructor may
  // still run queued work on it.
  [[maybe_unused]] static const int pool_first = num_threads();
  static Scheduler s;
  return s;
}

}  // namespace
}  // namespace detail

void async_eval(std::span<const Array> arrays) {
  if (detail::in_trace()) return eval(arrays);
  std::vector<Array> pending;
  for (const Array& a : arrays)
    if (a.valid() && !a.is_available()) pending.push_back(a);
  if (!pending.empty()) detail::scheduler().submit(std::move(pending));
}

void async_eval(std::initializer_list<Array> arrays) {
  async_eval(std::span<const Array>(arrays.begin(), arrays.size()));
}

}  // namespace kiln
