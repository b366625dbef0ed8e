// The SVG line chart of io/metrics.h: hand-written SVG 1.1, so a plot needs no library and opens in
// any browser. Coordinates are absolute (no transforms), which keeps the file easy to check.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/io/metrics.h"

namespace kiln::io {
namespace {

// Matplotlib's default cycle: distinct hues that stay distinct for most color-blind readers.
constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
// Margins of the plot area inside a panel, in pixels: room for the title, tick labels and axis labels.
constexpr double kLeft = 64, kRight = 16, kTop = 30, kBottom = 44;
constexpr double kTitleHeight = 30;      // the plot's title row above the panels
constexpr double kLegendRow = 18;        // one row of legend entries below the x-axis label
constexpr double kCharWidth = 7;         // a 12px sans-serif character, wide enough for legend layout
constexpr size_t kMaxMarkedPoints = 40;  // more points than this: a line without markers

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  return out;
}

// A pixel coordinate with two decimals: finer than any screen, short in the file.
std::string px(double v) { return fmt::format("{:.2f}", v); }

// A tick label printed with the decimals its step needs, so 0.1 steps read 0.1 0.2 0.3, not
// 0.30000000000000004; very large or small values in scientific notation with enough significant
// digits to tell neighbouring ticks apart (1000000 and 1000001 are not both "1e+06").
std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-6) v = 0;  // no "-0.0" from rounding
  const int step_exponent = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  const double magnitude = std::max(std::abs(v), step);
  if (magnitude < 1e6 && step_exponent >= -4) return fmt::format("{:.{}f}", v, std::max(0, -step_exponent));
  const int digits =
      std::clamp(static_cast<int>(std::floor(std::log10(magnitude))) - step_exponent + 1, 1, 17);
  return fmt::format("{:.{}g}", v, digits);
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return lo > hi; }
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
};

bool finite_point(const PlotSeries& s, size_t i) { return std::isfinite(s.x[i]) && std::isfinite(s.y[i]); }

// The legend's entries laid out in rows that fit `width`; returns each entry's row and x offset.
struct LegendSlot {
  int row;
  double x;
};
std::vector<LegendSlot> legend_layout(const std::vector<PlotSeries>& series, double width) {
  std::vector<LegendSlot> slots;
  int row = 0;
  double x = 0;
  for (const auto& s : series) {
    const double w = 28 + kCharWidth * static_cast<double>(s.label.size()) + 14;
    if (x > 0 && x + w > width) ++row, x = 0;
    slots.push_back({row, x});
    x += w;
  }
  return slots;
}

void draw_panel(std::string& out, const PlotPanel& panel, double ox, double oy, double width, double height) {
  const auto slots = legend_layout(panel.series, width - kLeft - kRight);
  const double x0 = ox + kLeft, x1 = ox + width - kRight;
  const double y0 = oy + kTop, y1 = oy + height - kBottom;

  out += fmt::format("<g class=\"panel\">\n");
  if (!panel.title.empty())
    out += fmt::format(
        "<text class=\"panel-title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        px((x0 + x1) / 2), px(oy + 20), escape(panel.title));

  Range xr, yr;
  for (const auto& s : panel.series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (finite_point(s, i)) xr.add(s.x[i]), yr.add(s.y[i]);
  if (panel.x_range && !xr.empty()) xr.add(panel.x_range->first), xr.add(panel.x_range->second);

  if (xr.empty()) {
    out += fmt::format(
        "<rect class=\"plot-area\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        px(x0), px(y0), px(x1 - x0), px(y1 - y0));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666\">no data</text>\n",
                       px((x0 + x1) / 2), px((y0 + y1) / 2));
  } else {
    const auto xt = nice_ticks(xr.lo, xr.hi, std::max(2, static_cast<int>((x1 - x0) / 80)));
    const auto yt = nice_ticks(yr.lo, yr.hi, std::max(2, static_cast<int>((y1 - y0) / 50)));
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
    const auto map_x = [&](double v) { return x0 + (v - xt.front()) / (xt.back() - xt.front()) * (x1 - x0); };
    const auto map_y = [&](double v) { return y1 - (v - yt.front()) / (yt.back() - yt.front()) * (y1 - y0); };

    out += "<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
    for (double t : xt)
      out +=
          fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", px(map_x(t)), px(y0), px(y1));
    for (double t : yt)
      out +=
          fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\"/>\n", px(map_y(t)), px(x0), px(x1));
    out += "</g>\n";
    out += fmt::format(
        "<rect class=\"plot-area\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        px(x0), px(y0), px(x1 - x0), px(y1 - y0));
    out += "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
    for (double t : xt)
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/><text x=\"{0}\" "
          "y=\"{3}\">{4}</text>\n",
          px(map_x(t)), px(y1), px(y1 + 5), px(y1 + 18), tick_label(t, xstep));
    out += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\">\n";
    for (double t : yt)
      out += fmt::format(
          "<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\" stroke=\"#333\"/><text x=\"{3}\" "
          "y=\"{4}\">{5}</text>\n",
          px(map_y(t)), px(x0 - 5), px(x0), px(x0 - 8), px(map_y(t) + 4), tick_label(t, ystep));
    out += "</g>\n";

    for (size_t k = 0; k < panel.series.size(); ++k) {
      const PlotSeries& s = panel.series[k];
      const char* color = kColors[k % kColors.size()];
      size_t finite = 0;
      for (size_t i = 0; i < s.x.size(); ++i) finite += finite_point(s, i);
      out += fmt::format("<g class=\"series\" stroke=\"{0}\" fill=\"{0}\">\n", color);
      // Each run of finite points is its own polyline: a NaN breaks the curve instead of being joined over.
      for (size_t i = 0; i < s.x.size();) {
        if (!finite_point(s, i)) {
          ++i;
          continue;
        }
        size_t end = i;
        std::string points;
        for (; end < s.x.size() && finite_point(s, end); ++end)
          points += fmt::format("{}{},{}", end > i ? " " : "", px(map_x(s.x[end])), px(map_y(s.y[end])));
        if (end - i > 1)
          out += fmt::format(
              "<polyline fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
              points);
        if (end - i == 1 || finite <= kMaxMarkedPoints)
          for (size_t j = i; j < end; ++j)
            out +=
                fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\"/>\n", px(map_x(s.x[j])), px(map_y(s.y[j])));
        i = end;
      }
      out += "</g>\n";
    }
  }

  if (!panel.x_label.empty())
    out += fmt::format("<text class=\"x-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       px((x0 + x1) / 2), px(y1 + 36), escape(panel.x_label));
  if (!panel.y_label.empty()) {
    const double lx = ox + 16, ly = (y0 + y1) / 2;
    out += fmt::format(
        "<text class=\"y-label\" x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" transform=\"rotate(-90 {0} "
        "{1})\">{2}</text>\n",
        px(lx), px(ly), escape(panel.y_label));
  }
  if (!slots.empty()) {
    out += "<g class=\"legend\">\n";
    for (size_t k = 0; k < slots.size(); ++k) {
      const double lx = x0 + slots[k].x, ly = y1 + kBottom + (slots[k].row + 1) * kLegendRow - 4;
      const char* color = kColors[k % kColors.size()];
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>",
                         px(lx), px(ly - 4), px(lx + 22), px(ly - 4), color);
      out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", px(lx + 28), px(ly),
                         escape(panel.series[k].label));
    }
    out += "</g>\n";
  }
  out += "</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || !std::isfinite(hi - lo))
    throw ValueError::of("nice_ticks", "need finite lo <= hi", "lo {}, hi {}", lo, hi);
  if (target < 1) throw ValueError::of("nice_ticks", "target must be >= 1", "got {}", target);
  // A range too narrow for the doubles around it has no meaningful ticks: treat it as one value.
  const double scale = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= scale * 1e-12) {
    const double mid = lo / 2 + hi / 2, pad = scale > 0 ? scale * 0.1 : 1.0;
    lo = mid - pad, hi = mid + pad;
  }
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  // The slack keeps rounding from promoting a step: (0.9 - 0.3) / 6 is 0.10000000000000002.
  const double r = raw / magnitude * (1 - 1e-9);
  const double step = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * magnitude;
  // Ticks are integer multiples of the step, computed one by one rather than accumulated; the
  // tolerance keeps lo = 0.3, step 0.1 from starting at 0.2 because 0.3 / 0.1 = 2.9999999999999996.
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back((last + 1) * step);
  return ticks;
}

std::string plot_svg(const std::vector<PlotPanel>& panels, const PlotOptions& options) {
  if (panels.empty()) throw ValueError::of("plot_svg", "no panels to draw");
  if (!(options.panel_width >= 160) || !(options.panel_height >= 120))
    throw ValueError::of("plot_svg", "panel too small", "{}x{}, need at least 160x120", options.panel_width,
                         options.panel_height);
  for (const auto& panel : panels) {
    if (const auto& r = panel.x_range;
        r && !(std::isfinite(r->first) && std::isfinite(r->second) && r->first <= r->second))
      throw ValueError::of("plot_svg", "x_range needs finite first <= second", "({}, {}) in panel {}",
                           r->first, r->second, panel.title);
    for (const auto& s : panel.series)
      if (s.x.size() != s.y.size())
        throw ValueError::of("plot_svg", "series x and y differ in length", "{} in panel {}: {} x, {} y",
                             s.label, panel.title, s.x.size(), s.y.size());
  }
  // The legend goes below the x-axis label and makes the image taller, so the plot areas keep the
  // size the options give whatever the labels.
  int legend_rows = 0;
  for (const auto& panel : panels) {
    const auto slots = legend_layout(panel.series, options.panel_width - kLeft - kRight);
    if (!slots.empty()) legend_rows = std::max(legend_rows, slots.back().row + 1);
  }
  const double top = options.title.empty() ? 0 : kTitleHeight;
  const double width = options.panel_width * static_cast<double>(panels.size());
  const double height = top + options.panel_height + legend_rows * kLegendRow + (legend_rows ? 6 : 0);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      px(width), px(height));
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!options.title.empty())
    out += fmt::format(
        "<text class=\"title\" x=\"{}\" y=\"21\" text-anchor=\"middle\" font-size=\"16\" "
        "font-weight=\"bold\">{}</text>\n",
        px(width / 2), escape(options.title));
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(out, panels[i], options.panel_width * static_cast<double>(i), top, options.panel_width,
               options.panel_height);
  out += "</svg>\n";
  return out;
}

}  // namespace kiln::io
