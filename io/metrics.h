#pragma once
// Training metrics: a table of named numeric columns (MetricsLog) written as CSV, and a line chart
// of its curves written as a self-contained SVG file a browser opens (no scripts, no fonts to fetch).
//
//   io::MetricsLog log;
//   log.log({{"epoch", 1}, {"train_loss", 0.52}, {"test_accuracy", 0.86}});
//   log.write_csv("run/metrics.csv");
//   io::write_plot_svg("run/plot.svg", {{.title = "loss", .series = {log.series("epoch", "train_loss")}}});
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::io {

/// One curve of a plot: points (x[i], y[i]). Points where x or y is NaN or infinite are skipped,
/// and the line breaks there.
struct PlotSeries {
  std::string label{};  ///< shown in the legend
  std::vector<double> x{};
  std::vector<double> y{};
};

/// A table of metrics: one row per log() call, one column per name, in the order names first
/// appeared. A row may leave columns out (test metrics logged once per epoch beside per-step
/// training loss); such cells are empty. Values are doubles (integers up to 2^53 are exact).
class MetricsLog {
 public:
  /// Appends a row. Names not seen before become new columns after the existing ones. Throws
  /// ValueError for an empty name or a name given twice in one row; the log is unchanged then.
  void log(const std::vector<std::pair<std::string, double>>& values);

  /// The column names, in the order they first appeared.
  const std::vector<std::string>& columns() const { return columns_; }
  /// Number of rows logged.
  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  /// True when some row has a value named `name`.
  bool has_column(std::string_view name) const;
  /// The value of column `name` in row `row`, or std::nullopt when that row left it out. Throws
  /// KeyError for an unknown column, ValueError for a row outside [0, rows()).
  std::optional<double> at(int64_t row, std::string_view name) const;
  /// The values of column `name`, one per row (std::nullopt where left out). Throws KeyError for an
  /// unknown column.
  std::vector<std::optional<double>> column(std::string_view name) const;
  /// The curve y against x over the rows that have both (label: `label`, or y's name when empty).
  /// NaN and infinite values are kept (a plot skips them). Throws KeyError for an unknown column.
  PlotSeries series(std::string_view x, std::string_view y, std::string label = "") const;

  /// The table as CSV (RFC 4180): a header of the column names, then one line per row, '\n' line
  /// ends. Names holding a comma, quote, line break or edge space are quoted ("" for a quote);
  /// values use the shortest text that reads back the same double ("0.1", "3", "1e-05", "nan",
  /// "inf", "-inf"); a left-out cell is empty.
  std::string csv() const;
  /// Writes csv() to `path` atomically (see write_text_file_atomically). Throws what it throws.
  void write_csv(const std::string& path) const;

 private:
  size_t index_of(std::string_view name, const char* op) const;

  std::vector<std::string> columns_;
  std::vector<std::vector<std::optional<double>>> rows_;  // each as long as columns_ was when logged
};

/// Writes `text` to `path` so that a reader never sees a partial file: into a temporary file of its
/// own in the same folder (".<name>.tmp-<pid>-<n>"), flushed to disk, then renamed over `path` and
/// the folder synced. Throws ValueError for an empty path, RuntimeError naming the path when a step
/// fails (a missing folder, `path` is a folder, a full disk); `path` is then unchanged and the
/// temporary file removed (a failure to sync the folder is reported with the new file in place).
void write_text_file_atomically(const std::string& path, std::string_view text);

/// One chart: its curves against shared axes.
struct PlotPanel {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  std::vector<PlotSeries> series{};
  /// When set, the x axis spans at least [first, second] besides the data: panels side by side line
  /// up, and an axis shows the whole run while it is under way.
  std::optional<std::pair<double, double>> x_range{};
};

/// Layout of a plot; sizes in SVG pixels.
struct PlotOptions {
  std::string title{};        ///< above all panels; none when empty
  double panel_width = 480;   ///< each panel, axes labels and legend included; >= 160
  double panel_height = 320;  ///< >= 120
};

/// Axis ticks for the range [lo, hi]: equally spaced "nice" values (step 1, 2 or 5 times a power of
/// ten), the first <= lo and the last >= hi, about `target` intervals (at least 1, at most 2 target).
/// A range of one value (lo == hi) is widened around it first. Throws ValueError unless lo <= hi,
/// both are finite, and target >= 1.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

/// A line chart as SVG text: the panels side by side, each with axes, ticks (nice_ticks over the
/// finite values of its curves), grid lines, axis labels, a title and a legend; a marker at every
/// point when a curve has few points (so a single point shows). A panel without finite points shows
/// "no data". Throws ValueError for no panels, a series whose x and y differ in length, an x_range
/// that is not finite with first <= second, or sizes below PlotOptions' minimums.
std::string plot_svg(const std::vector<PlotPanel>& panels, const PlotOptions& options = {});
/// Writes plot_svg(panels, options) to `path` atomically. Throws what plot_svg and
/// write_text_file_atomically throw.
void write_plot_svg(const std::string& path, const std::vector<PlotPanel>& panels,
                    const PlotOptions& options = {});

}  // namespace kiln::io
