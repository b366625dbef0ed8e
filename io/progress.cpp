#include "kiln/io/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

#include "kiln/core/error.h"

namespace kiln::io {
namespace {

// Only the standard streams have a known file descriptor; any other stream (a file, a string)
// is not a terminal.
int fd_of(const std::ostream& os) {
  if (&os == &std::cout) return STDOUT_FILENO;
  if (&os == &std::cerr || &os == &std::clog) return STDERR_FILENO;
  return -1;
}

// "m:ss", or "h:mm:ss" from an hour on.
std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, ProgressOptions options, std::ostream& out)
    : total_(total), options_(std::move(options)), out_(out) {
  if (total < 0) throw ValueError::of("ProgressBar", "total must be >= 0", "got {}", total);
  if (options_.every < 0) throw ValueError::of("ProgressBar", "every must be >= 0", "got {}", options_.every);
  if (options_.interval < 0 || options_.redraw_interval < 0)
    throw ValueError::of("ProgressBar", "intervals must be >= 0", "interval {}, redraw_interval {}",
                         options_.interval, options_.redraw_interval);
  if (options_.bar_width < 1)
    throw ValueError::of("ProgressBar", "bar_width must be >= 1", "got {}", options_.bar_width);
  switch (options_.mode) {
    case ProgressMode::terminal:
      terminal_ = true;
      break;
    case ProgressMode::lines:
      terminal_ = false;
      break;
    case ProgressMode::automatic:
      terminal_ = fd_of(out_) >= 0 && ::isatty(fd_of(out_)) == 1;
      break;
  }
  end_ = now();  // an epoch started implicitly by step() counts from here
  every_ = options_.every > 0 ? options_.every : total_ > 0 ? std::max<int64_t>(1, total_ / 10) : 100;
}

ProgressBar::~ProgressBar() {
  try {
    finish();
  } catch (...) {  // a stream set to throw must not take the program down from a destructor
  }
}

double ProgressBar::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressBar::start_epoch(int64_t epoch, int64_t done) {
  if (done < 0 || (total_ > 0 && done > total_))
    throw ValueError::of("ProgressBar::start_epoch", "done out of range", "{} of {} steps", done, total_);
  finish();
  epoch_ = epoch;
  has_epoch_ = true;
  step_ = done;
  steps_seen_ = samples_ = loss_count_ = 0;
  loss_sum_ = 0;
  start_ = last_draw_ = now();
  last_printed_step_ = -1;
  last_width_ = 0;
  open_ = true;
  finished_ = false;
}

void ProgressBar::step(int64_t samples, std::optional<double> loss) {
  if (samples < 0) throw ValueError::of("ProgressBar::step", "samples must be >= 0", "got {}", samples);
  if (!open_) {
    // Started by the step itself: the epoch began at construction or when the last one ended.
    const bool shown = has_epoch_;
    const double since = end_;
    start_epoch(epoch_);
    has_epoch_ = shown;
    start_ = last_draw_ = since;
  }
  ++step_;
  ++steps_seen_;
  samples_ += samples;
  if (loss) {
    loss_sum_ += *loss;
    ++loss_count_;
  }
  const double t = now();
  const bool last = total_ > 0 && step_ >= total_;
  bool due;
  if (terminal_)
    due = last || steps_seen_ == 1 || t - last_draw_ >= options_.redraw_interval;
  else
    due = last || step_ % every_ == 0 || (options_.interval > 0 && t - last_draw_ >= options_.interval);
  if (last) {
    end_ = t;
    open_ = false;
    finished_ = true;
  }
  if (due) {
    draw(last);
    last_draw_ = t;
    last_printed_step_ = step_;
  }
}

void ProgressBar::finish() {
  if (!open_) return;
  end_ = now();
  open_ = false;
  finished_ = true;
  if (terminal_ || last_printed_step_ != step_) draw(true);
  last_printed_step_ = step_;
}

std::string ProgressBar::status() const {
  std::string s;
  auto out = std::back_inserter(s);
  if (has_epoch_) {
    if (options_.epochs > 0)
      fmt::format_to(out, "epoch {}/{}", epoch_, options_.epochs);
    else
      fmt::format_to(out, "epoch {}", epoch_);
  }
  const char* sep = has_epoch_ ? "  " : "";
  if (terminal_ && total_ > 0) {
    const int width = options_.bar_width;
    const auto filled = static_cast<int>(std::min<int64_t>(width, step_ * width / total_));
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
    fmt::format_to(out, "{}[{}] {}/{}", has_epoch_ ? " " : "", bar, step_, total_);
  } else if (total_ > 0) {
    fmt::format_to(out, "{}step {}/{}", sep, step_, total_);
  } else {
    fmt::format_to(out, "{}step {}", sep, step_);
  }
  if (loss_count_ > 0) fmt::format_to(out, "  loss {:.4f}", loss_sum_ / static_cast<double>(loss_count_));
  const double elapsed = open_ ? now() - start_ : finished_ ? end_ - start_ : 0.0;
  if (elapsed > 0 && samples_ > 0)
    fmt::format_to(out, "  {:.1f} samples/s", static_cast<double>(samples_) / elapsed);
  if (finished_)
    fmt::format_to(out, "  in {}", format_duration(elapsed));
  else if (total_ > 0 && steps_seen_ > 0 && elapsed > 0)
    fmt::format_to(
        out, "  ETA {}",
        format_duration(elapsed / static_cast<double>(steps_seen_) * static_cast<double>(total_ - step_)));
  return s;
}

void ProgressBar::draw(bool final) {
  const std::string text = status();
  if (terminal_) {
    out_ << '\r' << text;
    if (text.size() < last_width_) out_ << std::string(last_width_ - text.size(), ' ');
    last_width_ = text.size();
    if (final) out_ << '\n';
  } else {
    out_ << text << '\n';
  }
  out_.flush();
}

}  // namespace kiln::io
