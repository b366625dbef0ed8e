#include "kiln/io/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file_impl.h"

namespace kiln::io {
namespace {

// RFC 4180: a field is quoted when it holds the separator, a quote or a line break; edge spaces too,
// since some readers (pandas with skipinitialspace) would drop them otherwise.
std::string csv_field(std::string_view s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

// fmt's shortest round-trip form; NaN loses its sign bit ("-nan" reads back as NaN anyway, but
// Python's float() and pandas expect "nan").
std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{}", v);
}

void write_atomically(const std::string& path, std::string_view text, const char* op) {
  if (path.empty()) throw ValueError::of(op, "empty path");
  detail::replace_atomically(op, path, [&](detail::TempFile& file) { file.write(text.data(), text.size()); });
}

}  // namespace

void MetricsLog::log(const std::vector<std::pair<std::string, double>>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].first.empty()) throw ValueError::of("MetricsLog::log", "empty metric name");
    for (size_t j = 0; j < i; ++j)
      if (values[j].first == values[i].first)
        throw ValueError::of("MetricsLog::log", "metric given twice in one row", "{}", values[i].first);
  }
  std::vector<std::optional<double>> row(columns_.size());
  for (const auto& [name, value] : values) {
    const auto it = std::find(columns_.begin(), columns_.end(), name);
    if (it == columns_.end()) {
      columns_.push_back(name);
      row.emplace_back(value);
    } else {
      row[static_cast<size_t>(it - columns_.begin())] = value;
    }
  }
  rows_.push_back(std::move(row));
}

size_t MetricsLog::index_of(std::string_view name, const char* op) const {
  const auto it = std::find(columns_.begin(), columns_.end(), name);
  if (it == columns_.end()) throw KeyError::of(op, "no such column", "{}", name);
  return static_cast<size_t>(it - columns_.begin());
}

bool MetricsLog::has_column(std::string_view name) const {
  return std::find(columns_.begin(), columns_.end(), name) != columns_.end();
}

std::optional<double> MetricsLog::at(int64_t row, std::string_view name) const {
  const size_t c = index_of(name, "MetricsLog::at");
  if (row < 0 || row >= rows())
    throw ValueError::of("MetricsLog::at", "row out of range", "row {} of {}", row, rows());
  const auto& r = rows_[static_cast<size_t>(row)];
  return c < r.size() ? r[c] : std::nullopt;
}

std::vector<std::optional<double>> MetricsLog::column(std::string_view name) const {
  const size_t c = index_of(name, "MetricsLog::column");
  std::vector<std::optional<double>> out;
  out.reserve(rows_.size());
  for (const auto& r : rows_) out.push_back(c < r.size() ? r[c] : std::nullopt);
  return out;
}

PlotSeries MetricsLog::series(std::string_view x, std::string_view y, std::string label) const {
  const size_t cx = index_of(x, "MetricsLog::series"), cy = index_of(y, "MetricsLog::series");
  PlotSeries s{.label = label.empty() ? std::string(y) : std::move(label), .x = {}, .y = {}};
  for (const auto& r : rows_)
    if (cx < r.size() && cy < r.size() && r[cx] && r[cy]) {
      s.x.push_back(*r[cx]);
      s.y.push_back(*r[cy]);
    }
  return s;
}

std::string MetricsLog::csv() const {
  std::string out;
  for (size_t c = 0; c < columns_.size(); ++c) {
    if (c) out += ',';
    out += csv_field(columns_[c]);
  }
  out += '\n';
  for (const auto& r : rows_) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c) out += ',';
      if (c < r.size() && r[c]) out += csv_number(*r[c]);
    }
    out += '\n';
  }
  return out;
}

void MetricsLog::write_csv(const std::string& path) const { write_atomically(path, csv(), "write_csv"); }

void write_text_file_atomically(const std::string& path, std::string_view text) {
  write_atomically(path, text, "write_text_file_atomically");
}

void write_plot_svg(const std::string& path, const std::vector<PlotPanel>& panels,
                    const PlotOptions& options) {
  write_atomically(path, plot_svg(panels, options), "write_plot_svg");
}

}  // namespace kiln::io
