#pragma once
// A training progress display: one redrawn line on a terminal, plain lines in logs and pipes.
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>

namespace kiln::io {

/// How a ProgressBar writes.
enum class ProgressMode {
  automatic,  ///< terminal when the stream is std::cout, std::cerr or std::clog and its fd is a tty
  terminal,   ///< one line redrawn in place with '\r'
  lines,      ///< a plain line every `every` steps or `interval` seconds, readable in a log
};

/// Options of ProgressBar, in declaration order (designated initializers must follow it).
struct ProgressOptions {
  ProgressMode mode = ProgressMode::automatic;
  int64_t epochs = 0;            ///< shown as "epoch e/epochs" when > 0
  int64_t every = 0;             ///< lines: a line every `every` steps; 0: total / 10 (100 if total is 0)
  double interval = 0;           ///< lines: also a line once this many seconds passed since the last; 0: off
  int bar_width = 24;            ///< terminal: characters between the brackets
  double redraw_interval = 0.1;  ///< terminal: seconds between redraws (the last step is always drawn)
  std::function<double()> clock{};  ///< monotonic seconds; std::chrono::steady_clock when empty
};

/// Shows epoch, step/total, the mean loss of the epoch so far, samples/s and the ETA of the epoch:
///   terminal: "\repoch 2/10 [=====>      ] 120/469  loss 0.4123  2345.6 samples/s  ETA 0:12"
///   lines:    "epoch 2/10  step 120/469  loss 0.4123  2345.6 samples/s  ETA 0:12"
/// After the last step of an epoch (or finish()), "ETA m:ss" becomes the epoch's time "in m:ss".
/// Epoch numbers are shown as given. Not thread-safe: drive it from the training loop.
class ProgressBar {
 public:
  /// `total` steps per epoch (0: unknown, then no bar, total or ETA). Throws ValueError for a
  /// negative total, every or interval, or bar_width < 1.
  explicit ProgressBar(int64_t total, ProgressOptions options = {}, std::ostream& out = std::cerr);
  /// Ends an unfinished epoch's line (as finish()).
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Starts epoch `epoch` with `done` steps already taken (a resumed epoch) and restarts the clock.
  /// Finishes the previous epoch first if needed. Throws ValueError for done < 0 or over total.
  void start_epoch(int64_t epoch, int64_t done = 0);
  /// One step of `samples` samples with an optional loss; prints when the mode says so. The step
  /// that reaches `total` finishes the epoch. Without a running epoch, starts one that began at
  /// construction or at the end of the last epoch (with the last epoch number; none is shown if
  /// start_epoch was never called). Throws ValueError for
  /// samples < 0.
  void step(int64_t samples, std::optional<double> loss = std::nullopt);
  /// Ends the epoch: the terminal line is redrawn a last time and closed with '\n'; in lines mode a
  /// last line is printed unless the current step was just printed. Does nothing twice.
  void finish();
  /// True when writing in terminal mode (decided at construction).
  bool terminal() const { return terminal_; }
  /// The current status text, without '\r' or '\n'.
  std::string status() const;

 private:
  double now() const;
  void draw(bool final);

  int64_t total_;
  ProgressOptions options_;
  std::ostream& out_;
  bool terminal_ = false;
  int64_t every_ = 1;

  int64_t epoch_ = 0;
  int64_t step_ = 0;
  int64_t steps_seen_ = 0;  // steps of this run (excludes `done`), the rate's denominator
  int64_t samples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  double start_ = 0;
  double end_ = 0;  // when the epoch finished (construction time before the first)
  double last_draw_ = 0;
  int64_t last_printed_step_ = -1;
  size_t last_width_ = 0;
  bool open_ = false;       // an epoch is running and not finished
  bool finished_ = false;   // the epoch ended: show its time instead of the ETA
  bool has_epoch_ = false;  // start_epoch was called: show the epoch number
};

}  // namespace kiln::io
