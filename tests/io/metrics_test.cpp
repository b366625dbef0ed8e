// MetricsLog (columns, cells, CSV text and quoting), the atomic file writes and their errors,
// nice_ticks, and plot_svg checked through a small XML parser: well-formed, points inside the plot
// area at the positions the axis ticks give, NaN and infinities skipped, one point, constant curves.
#include "kiln/io/metrics.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "support/temp_dir.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Random doubles from kiln's generator: a spread of magnitudes and signs, never all zeros.
std::vector<double> random_values(uint64_t seed, int64_t n) {
  const auto mantissa = random::normal({n}, random::key(seed)).to_vector<float>();
  const auto exponent = random::uniform({n}, random::key(seed + 1), -8, 8).to_vector<float>();
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(mantissa[i] * std::pow(10.0, std::floor(exponent[i])));
  return v;
}

// ---- a minimal XML parser: elements, attributes, text, the five predefined entities ----------------

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlNode> children;
  std::string text;  // the text directly inside, entities decoded
  const std::string& attr(const std::string& key) const {
    const auto it = attrs.find(key);
    if (it == attrs.end()) throw std::runtime_error("missing attribute " + key + " on <" + name + ">");
    return it->second;
  }
  double number(const std::string& key) const { return std::stod(attr(key)); }
};

class XmlParser {
 public:
  explicit XmlParser(std::string s) : s_(std::move(s)) {}
  // Throws std::runtime_error for anything not well-formed (for the subset SVG output uses).
  XmlNode parse() {
    skip_space();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const size_t end = s_.find("?>", i_);
      if (end == std::string::npos) fail("unterminated declaration");
      i_ = end + 2;
    }
    skip_space();
    XmlNode root = element();
    skip_space();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at offset " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '_' || s_[i_] == ':'))
      ++i_;
    if (i_ == start) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  std::string decode(const std::string& raw) const {
    static const std::map<std::string, char> entities = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    std::string out;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '<') fail("'<' in text or attribute");
      if (raw[k] != '&') {
        out += raw[k];
        continue;
      }
      const size_t semi = raw.find(';', k);
      if (semi == std::string::npos) fail("unterminated entity");
      const auto it = entities.find(raw.substr(k + 1, semi - k - 1));
      if (it == entities.end()) fail("unknown entity " + raw.substr(k, semi - k + 1));
      out += it->second;
      k = semi;
    }
    return out;
  }
  XmlNode element() {
    expect('<');
    XmlNode node;
    node.name = name();
    for (;;) {
      skip_space();
      if (i_ >= s_.size()) fail("unterminated tag");
      if (s_[i_] == '/') {
        ++i_;
        expect('>');
        return node;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string key = name();
      expect('=');
      expect('"');
      const size_t end = s_.find('"', i_);
      if (end == std::string::npos) fail("unterminated attribute");
      if (node.attrs.count(key)) fail("attribute given twice: " + key);
      node.attrs[key] = decode(s_.substr(i_, end - i_));
      i_ = end + 1;
    }
    for (;;) {
      const size_t lt = s_.find('<', i_);
      if (lt == std::string::npos) fail("unclosed <" + node.name + ">");
      node.text += decode(s_.substr(i_, lt - i_));
      i_ = lt;
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != node.name) fail("mismatched closing tag for <" + node.name + ">");
        skip_space();
        expect('>');
        return node;
      }
      node.children.push_back(element());
    }
  }

  std::string s_;
  size_t i_ = 0;
};

// Every element below `node` (itself included) named `name`, in document order.
void find_all(const XmlNode& node, const std::string& name, std::vector<const XmlNode*>& out) {
  if (node.name == name) out.push_back(&node);
  for (const auto& c : node.children) find_all(c, name, out);
}
std::vector<const XmlNode*> find_all(const XmlNode& node, const std::string& name) {
  std::vector<const XmlNode*> out;
  find_all(node, name, out);
  return out;
}
// The children of `node` (any depth) with class="cls".
std::vector<const XmlNode*> by_class(const XmlNode& node, const std::string& cls) {
  std::vector<const XmlNode*> out;
  std::vector<const XmlNode*> stack = {&node};
  while (!stack.empty()) {
    const XmlNode* n = stack.back();
    stack.pop_back();
    if (auto it = n->attrs.find("class"); it != n->attrs.end() && it->second == cls) out.push_back(n);
    for (auto c = n->children.rbegin(); c != n->children.rend(); ++c) stack.push_back(&*c);
  }
  return out;
}
std::vector<std::string> texts(const XmlNode& node) {
  std::vector<std::string> out;
  for (const XmlNode* t : find_all(node, "text")) out.push_back(t->text);
  return out;
}

struct Point {
  double x, y;
};
std::vector<Point> points_of(const XmlNode& polyline) {
  std::vector<Point> out;
  std::istringstream in(polyline.attr("points"));
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    if (comma == std::string::npos) throw std::runtime_error("bad point " + pair);
    out.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return out;
}

// The plot area and the axis range of one panel, read back from its SVG.
struct Axes {
  double x0, y0, x1, y1;       // plot area in pixels (y0 at the top)
  double xlo, xhi, ylo, yhi;   // first and last tick values
  std::vector<double> xt, yt;  // tick values read from the labels
};
Axes axes_of(const XmlNode& panel) {
  const auto areas = by_class(panel, "plot-area");
  if (areas.size() != 1) throw std::runtime_error("expected one plot area");
  Axes a{};
  a.x0 = areas[0]->number("x"), a.y0 = areas[0]->number("y");
  a.x1 = a.x0 + areas[0]->number("width"), a.y1 = a.y0 + areas[0]->number("height");
  for (const std::string axis : {"x-ticks", "y-ticks"}) {
    const auto groups = by_class(panel, axis);
    if (groups.size() != 1) throw std::runtime_error("expected one " + axis + " group");
    auto& ticks = axis == "x-ticks" ? a.xt : a.yt;
    for (const auto& label : texts(*groups[0])) ticks.push_back(std::stod(label));
    if (ticks.size() < 2) throw std::runtime_error("fewer than two ticks on " + axis);
  }
  a.xlo = a.xt.front(), a.xhi = a.xt.back(), a.ylo = a.yt.front(), a.yhi = a.yt.back();
  return a;
}
double map_x(const Axes& a, double v) { return a.x0 + (v - a.xlo) / (a.xhi - a.xlo) * (a.x1 - a.x0); }
double map_y(const Axes& a, double v) { return a.y1 - (v - a.ylo) / (a.yhi - a.ylo) * (a.y1 - a.y0); }

XmlNode parse_svg(const std::string& svg) {
  XmlNode root = XmlParser(svg).parse();
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.attr("xmlns"), "http://www.w3.org/2000/svg");
  return root;
}

// ---- MetricsLog ---------------------------------------------------------------------------------

TEST(MetricsLog, ColumnsInFirstSeenOrderAndMissingCells) {
  MetricsLog log;
  EXPECT_EQ(log.rows(), 0);
  EXPECT_TRUE(log.columns().empty());
  log.log({{"epoch", 1}, {"step", 100}, {"train_loss", 0.75}});
  log.log({{"step", 200}, {"epoch", 1}, {"test_accuracy", 0.5}});
  log.log({});
  EXPECT_EQ(log.rows(), 3);
  EXPECT_EQ(log.columns(), (std::vector<std::string>{"epoch", "step", "train_loss", "test_accuracy"}));
  EXPECT_TRUE(log.has_column("train_loss"));
  EXPECT_FALSE(log.has_column("loss"));
  EXPECT_EQ(log.at(0, "train_loss"), 0.75);
  EXPECT_EQ(log.at(1, "step"), 200);
  EXPECT_EQ(log.at(1, "train_loss"), std::nullopt);
  EXPECT_EQ(log.at(0, "test_accuracy"), std::nullopt);  // a row logged before the column existed
  EXPECT_EQ(log.at(2, "epoch"), std::nullopt);
  EXPECT_EQ(log.column("step"), (std::vector<std::optional<double>>{100, 200, std::nullopt}));
  EXPECT_EQ(log.column("test_accuracy"),
            (std::vector<std::optional<double>>{std::nullopt, 0.5, std::nullopt}));
}

TEST(MetricsLog, BadRowsLeaveTheLogUnchanged) {
  MetricsLog log;
  log.log({{"a", 1}});
  EXPECT_THROW(log.log({{"b", 2}, {"", 3}}), ValueError);
  EXPECT_THROW(log.log({{"b", 2}, {"c", 3}, {"b", 4}}), ValueError);
  try {
    log.log({{"loss", 1}, {"loss", 2}});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loss"), std::string::npos) << e.what();
  }
  EXPECT_EQ(log.rows(), 1);
  EXPECT_EQ(log.columns(), std::vector<std::string>{"a"});
}

TEST(MetricsLog, LookupErrors) {
  MetricsLog log;
  log.log({{"a", 1}});
  EXPECT_THROW(log.at(0, "nope"), KeyError);
  EXPECT_THROW(log.at(1, "a"), ValueError);
  EXPECT_THROW(log.at(-1, "a"), ValueError);
  EXPECT_THROW(log.column("nope"), KeyError);
  EXPECT_THROW(log.series("a", "nope"), KeyError);
  EXPECT_THROW(log.series("nope", "a"), KeyError);
  try {
    log.column("test_loss");
  } catch (const KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("test_loss"), std::string::npos) << e.what();
  }
}

TEST(MetricsLog, SeriesTakesRowsWithBothColumns) {
  MetricsLog log;
  log.log({{"epoch", 0.5}, {"train_loss", 0.9}});
  log.log({{"epoch", 1}, {"train_loss", 0.6}, {"test_loss", 0.7}});
  log.log({{"epoch", 1.5}, {"train_loss", kNaN}});
  log.log({{"train_loss", 0.4}});
  log.log({{"epoch", 2}, {"train_loss", 0.3}, {"test_loss", 0.5}});
  const PlotSeries train = log.series("epoch", "train_loss");
  EXPECT_EQ(train.label, "train_loss");
  EXPECT_EQ(train.x, (std::vector<double>{0.5, 1, 1.5, 2}));
  ASSERT_EQ(train.y.size(), 4u);
  EXPECT_EQ(train.y[1], 0.6);
  EXPECT_TRUE(std::isnan(train.y[2]));  // kept: the plot skips it, the series does not hide it
  const PlotSeries test = log.series("epoch", "test_loss", "test");
  EXPECT_EQ(test.label, "test");
  EXPECT_EQ(test.x, (std::vector<double>{1, 2}));
  EXPECT_EQ(test.y, (std::vector<double>{0.7, 0.5}));
}

// ---- CSV ----------------------------------------------------------------------------------------

TEST(MetricsCsv, ExactTextOfASmallLog) {
  MetricsLog log;
  EXPECT_EQ(log.csv(), "\n");
  log.log({{"epoch", 1}, {"step", 469}, {"train_loss", 0.5}, {"seconds", 12.25}});
  log.log({{"epoch", 1}, {"test_loss", 0.375}, {"test_accuracy", 0.8765}});
  log.log({{"epoch", 2}, {"step", 938}, {"train_loss", 1e-5}, {"seconds", -3}});
  EXPECT_EQ(log.csv(),
            "epoch,step,train_loss,seconds,test_loss,test_accuracy\n"
            "1,469,0.5,12.25,,\n"
            "1,,,,0.375,0.8765\n"
            "2,938,1e-05,-3,,\n");
}

TEST(MetricsCsv, NonFiniteValues) {
  MetricsLog log;
  log.log({{"a", kNaN}, {"b", kInf}, {"c", -kInf}, {"d", -kNaN}});
  EXPECT_EQ(log.csv(), "a,b,c,d\nnan,inf,-inf,nan\n");
}

TEST(MetricsCsv, ValuesReadBackExactly) {
  const auto values = random_values(7, 64);
  MetricsLog log;
  for (double v : values) log.log({{"v", v}});
  std::istringstream in(log.csv());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "v");
  for (double v : values) {
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(std::strtod(line.c_str(), nullptr), v) << line;
  }
  EXPECT_FALSE(std::getline(in, line));
}

TEST(MetricsCsv, QuotesNamesThatNeedIt) {
  MetricsLog log;
  log.log({{"plain", 1},
           {"a,b", 2},
           {"say \"hi\"", 3},
           {"two\nlines", 4},
           {"cr\r", 5},
           {" lead", 6},
           {"trail ", 7},
           {"in side", 8}});
  EXPECT_EQ(log.csv(),
            "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\"cr\r\",\" lead\",\"trail \",in side\n"
            "1,2,3,4,5,6,7,8\n");
}

TEST(MetricsCsv, WriteCsvWritesTheTextAndReplacesAnOldFile) {
  TempDir dir;
  MetricsLog log;
  log.log({{"epoch", 1}, {"loss", 0.25}});
  const std::string path = dir.file("metrics.csv");
  log.write_csv(path);
  EXPECT_EQ(read_file(path), log.csv());
  log.log({{"epoch", 2}, {"loss", 0.125}});
  log.write_csv(path);
  EXPECT_EQ(read_file(path), "epoch,loss\n1,0.25\n2,0.125\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"metrics.csv"});  // no temporary file left
}

// A write that fails throws RuntimeError naming the path and leaves nothing behind.
void expect_write_fails(const std::function<void(const std::string&)>& write, const std::string& path,
                        const TempDir& dir, const std::vector<std::string>& entries_after) {
  try {
    write(path);
    FAIL() << "no error writing " << path;
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.entries(), entries_after);
}

TEST(MetricsCsv, WriteErrors) {
  TempDir dir;
  MetricsLog log;
  log.log({{"loss", 0.5}});
  const auto write = [&](const std::string& p) { log.write_csv(p); };
  expect_write_fails(write, dir.file("missing/metrics.csv"), dir, {});
  fs::create_directory(dir.file("folder"));
  expect_write_fails(write, dir.file("folder"), dir, {"folder"});
  EXPECT_TRUE(fs::is_directory(dir.file("folder")));
  EXPECT_THROW(log.write_csv(""), ValueError);
}

TEST(WriteTextFileAtomically, WritesReplacesAndKeepsTheOldFileOnError) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  write_text_file_atomically(path, "first\n");
  EXPECT_EQ(read_file(path), "first\n");
  write_text_file_atomically(path, std::string("bytes\0and more", 14));
  EXPECT_EQ(read_file(path), std::string("bytes\0and more", 14));
  write_text_file_atomically(path, "");
  EXPECT_EQ(read_file(path), "");
  write_text_file_atomically(path, "kept");
  // A file size limit the new text passes makes the write fail (EFBIG) before `path` is touched.
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // so write() fails instead of killing us
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 2;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_write_fails([](const std::string& p) { write_text_file_atomically(p, "new"); }, path, dir,
                     {"out.txt"});
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(read_file(path), "kept");
  EXPECT_THROW(write_text_file_atomically("", "x"), ValueError);
}

TEST(WriteTextFileAtomically, RelativePathInTheWorkingFolder) {
  TempDir dir;
  const fs::path old = fs::current_path();
  fs::current_path(dir.file(""));
  write_text_file_atomically("plain.txt", "here");
  fs::current_path(old);
  EXPECT_EQ(read_file(dir.file("plain.txt")), "here");
}

// ---- nice_ticks ---------------------------------------------------------------------------------

TEST(NiceTicks, KnownRanges) {
  const auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  };
  near(nice_ticks(0, 1), {0, 0.2, 0.4, 0.6, 0.8, 1});
  near(nice_ticks(0.3, 0.91), {0.2, 0.4, 0.6, 0.8, 1.0});
  near(nice_ticks(0.3, 0.9, 6), {0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9});
  near(nice_ticks(1, 3, 5), {1, 1.5, 2, 2.5, 3});
  near(nice_ticks(-7, 42, 5), {-10, 0, 10, 20, 30, 40, 50});
  near(nice_ticks(1, 469, 4), {0, 200, 400, 600});
  near(nice_ticks(0, 0), {-1, -0.5, 0, 0.5, 1});
  near(nice_ticks(5, 5, 1), {4, 5, 6});
  near(nice_ticks(2, 3, 1), {2, 3});
}

TEST(NiceTicks, PropertiesOnRandomRanges) {
  const auto a = random_values(11, 200), b = random_values(12, 200);
  const auto targets = random::uniform({200}, random::key(13), 1, 12).to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    const double lo = std::min(a[i], b[i]), hi = std::max(a[i], b[i]);
    const int target = static_cast<int>(targets[i]);
    const auto t = nice_ticks(lo, hi, target);
    SCOPED_TRACE(fmt::format("lo {} hi {} target {}", lo, hi, target));
    ASSERT_GE(t.size(), 2u);
    const double step = t[1] - t[0];
    const double tol = step * 1e-6;
    EXPECT_LE(t.front(), lo + tol);
    EXPECT_GE(t.back(), hi - tol);
    const double intervals = static_cast<double>(t.size() - 1);
    EXPECT_LE(intervals, target + 1);
    EXPECT_GE(intervals, std::max(1.0, std::floor(target / 2.5)));
    for (size_t k = 1; k < t.size(); ++k) EXPECT_NEAR(t[k] - t[k - 1], step, tol);
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                std::abs(mantissa - 5) < 1e-6)
        << step;
  }
}

TEST(NiceTicks, BadArguments) {
  EXPECT_THROW(nice_ticks(2, 1), ValueError);
  EXPECT_THROW(nice_ticks(kNaN, 1), ValueError);
  EXPECT_THROW(nice_ticks(0, kInf), ValueError);
  EXPECT_THROW(nice_ticks(-1.5e308, 1.5e308), ValueError);  // the width overflows
  EXPECT_THROW(nice_ticks(0, 1, 0), ValueError);
}

// ---- plot_svg -----------------------------------------------------------------------------------

// Every polyline point and marker of `panel` lies in its plot area, at the pixel the axis ticks give
// for the data of `series`: each run of finite points of two or more is one polyline, and the
// markers sit on every finite point or (for long series) on the isolated ones.
void expect_points_mapped(const XmlNode& panel, const std::vector<PlotSeries>& series) {
  const Axes a = axes_of(panel);
  const auto groups = by_class(panel, "series");
  ASSERT_EQ(groups.size(), series.size());
  const auto expect_near = [&](const std::vector<Point>& got, const std::vector<Point>& want,
                               const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i].x, want[i].x, 0.01) << what << " " << i;
      EXPECT_NEAR(got[i].y, want[i].y, 0.01) << what << " " << i;
      EXPECT_GE(got[i].x, a.x0 - 0.01);
      EXPECT_LE(got[i].x, a.x1 + 0.01);
      EXPECT_GE(got[i].y, a.y0 - 0.01);
      EXPECT_LE(got[i].y, a.y1 + 0.01);
    }
  };
  for (size_t k = 0; k < series.size(); ++k) {
    SCOPED_TRACE(fmt::format("series {}", k));
    const PlotSeries& s = series[k];
    std::vector<std::vector<Point>> runs(1);
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]))
        runs.back().push_back({map_x(a, s.x[i]), map_y(a, s.y[i])});
      else if (!runs.back().empty())
        runs.emplace_back();
    }
    std::vector<Point> line_points, all_points, isolated;
    int64_t lines = 0;
    for (const auto& run : runs) {
      all_points.insert(all_points.end(), run.begin(), run.end());
      if (run.size() == 1) isolated.push_back(run[0]);
      if (run.size() > 1) line_points.insert(line_points.end(), run.begin(), run.end()), ++lines;
    }
    std::vector<Point> got_lines, got_markers;
    const auto polylines = find_all(*groups[k], "polyline");
    EXPECT_EQ(static_cast<int64_t>(polylines.size()), lines);
    for (const XmlNode* line : polylines)
      for (const Point& p : points_of(*line)) got_lines.push_back(p);
    for (const XmlNode* c : find_all(*groups[k], "circle"))
      got_markers.push_back({c->number("cx"), c->number("cy")});
    expect_near(got_lines, line_points, "line point");
    expect_near(got_markers, got_markers.size() == all_points.size() ? all_points : isolated, "marker");
  }
}

TEST(PlotSvg, WellFormedWithTitlesLabelsAndLegend) {
  MetricsLog log;
  const auto noise = random_values(21, 30);
  for (int s = 1; s <= 30; ++s) {
    const double loss = 2.0 / s + 1e-3 * std::tanh(noise[s - 1]);
    if (s % 10 == 0)
      log.log({{"epoch", s / 10.0},
               {"train_loss", loss},
               {"test_loss", loss * 1.1},
               {"test_accuracy", 0.8 + s / 300.0}});
    else
      log.log({{"epoch", s / 10.0}, {"train_loss", loss}});
  }
  const std::vector<PlotPanel> panels = {
      {.title = "loss",
       .x_label = "epoch",
       .y_label = "cross-entropy",
       .series = {log.series("epoch", "train_loss", "train"), log.series("epoch", "test_loss", "test")}},
      {.title = "test accuracy",
       .x_label = "epoch",
       .y_label = "accuracy",
       .series = {log.series("epoch", "test_accuracy")}}};
  const std::string svg = plot_svg(panels, {.title = "Fashion-MNIST <cnn> & friends"});
  const XmlNode root = parse_svg(svg);
  EXPECT_EQ(root.number("width"), 960);
  const auto all = texts(root);
  for (const std::string want : {"Fashion-MNIST <cnn> & friends", "loss", "test accuracy", "epoch",
                                 "cross-entropy", "accuracy", "train", "test", "test_accuracy"})
    EXPECT_NE(std::find(all.begin(), all.end(), want), all.end()) << want;
  const auto panel_nodes = by_class(root, "panel");
  ASSERT_EQ(panel_nodes.size(), 2u);
  expect_points_mapped(*panel_nodes[0], panels[0].series);
  expect_points_mapped(*panel_nodes[1], panels[1].series);
  // The ticks bracket the data: the extremes map inside the plot area, onto the axis range.
  const Axes a = axes_of(*panel_nodes[0]);
  EXPECT_LE(a.xlo, 0.1);
  EXPECT_GE(a.xhi, 3.0);
  EXPECT_LT(a.xhi - a.xlo, 2 * 2.9);
  // The legend lists each series once, in panel order.
  const auto legends = by_class(root, "legend");
  ASSERT_EQ(legends.size(), 2u);
  EXPECT_EQ(texts(*legends[0]), (std::vector<std::string>{"train", "test"}));
  EXPECT_EQ(texts(*legends[1]), std::vector<std::string>{"test_accuracy"});
  // Few points: a marker on each; the colors of a series' line, markers and legend agree.
  const auto series_groups = by_class(*panel_nodes[0], "series");
  EXPECT_EQ(find_all(*series_groups[1], "circle").size(), 3u);
  EXPECT_NE(series_groups[0]->attr("stroke"), series_groups[1]->attr("stroke"));
  EXPECT_EQ(find_all(*legends[0], "line")[1]->attr("stroke"), series_groups[1]->attr("stroke"));
}

TEST(PlotSvg, DataMinAndMaxMapOntoTheirTicks) {
  // Data that starts and ends on nice values fills the plot area exactly.
  const PlotSeries s{.label = "s", .x = {0, 1, 2, 3, 4}, .y = {10, 30, 20, 50, 40}};
  const XmlNode root = parse_svg(plot_svg({{.series = {s}}}));
  const XmlNode& panel = *by_class(root, "panel").at(0);
  const Axes a = axes_of(panel);
  EXPECT_EQ(a.xlo, 0);
  EXPECT_EQ(a.xhi, 4);
  EXPECT_EQ(a.ylo, 10);
  EXPECT_EQ(a.yhi, 50);
  const auto pts = points_of(*find_all(panel, "polyline").at(0));
  ASSERT_EQ(pts.size(), 5u);
  EXPECT_NEAR(pts[0].x, a.x0, 0.01);
  EXPECT_NEAR(pts[4].x, a.x1, 0.01);
  EXPECT_NEAR(pts[0].y, a.y1, 0.01);  // y = 10, the minimum, at the bottom
  EXPECT_NEAR(pts[3].y, a.y0, 0.01);  // y = 50, the maximum, at the top
  expect_points_mapped(panel, {s});
}

TEST(PlotSvg, TickLabelsOfLargeAndSmallValuesReadBackExactly) {
  // The checks map points through the tick labels, so labels rounded too far would move them.
  const std::vector<PlotSeries> cases = {
      {.label = "large", .x = {1e6, 1e6 + 3, 1e6 + 4}, .y = {2.5e9, 2.5e9 + 700, 2.5e9 + 100}},
      {.label = "small", .x = {1e-7, 2e-7, 3.5e-7}, .y = {-1e-5, 4e-5, 2e-5}},
      {.label = "mixed", .x = {-12345.5, 0.25}, .y = {0.001, 0.0011}}};
  for (const PlotSeries& s : cases) {
    SCOPED_TRACE(s.label);
    const XmlNode root = parse_svg(plot_svg({{.series = {s}}}));
    const XmlNode& panel = *by_class(root, "panel").at(0);
    const Axes a = axes_of(panel);
    for (const auto* ticks : {&a.xt, &a.yt})
      for (size_t i = 1; i < ticks->size(); ++i) {
        const double step = (*ticks)[1] - (*ticks)[0];
        EXPECT_GT(step, 0);
        EXPECT_NEAR((*ticks)[i] - (*ticks)[i - 1], step, step * 1e-9) << i;
      }
    expect_points_mapped(panel, {s});
  }
}

TEST(PlotSvg, NonFinitePointsBreakTheLine) {
  const PlotSeries s{.label = "loss",
                     .x = {1, 2, 3, 4, 5, 6, kNaN, 8, 9, 10, 11},
                     .y = {0.9, 0.8, kNaN, 0.6, kInf, 0.5, 0.4, 0.3, 0.2, 0.1, -kInf}};
  const XmlNode root = parse_svg(plot_svg({{.series = {s}}}));
  const XmlNode& panel = *by_class(root, "panel").at(0);
  const auto lines = find_all(panel, "polyline");
  ASSERT_EQ(lines.size(), 2u);  // runs {1, 2}, {4}, {6}, {8, 9, 10}
  EXPECT_EQ(points_of(*lines[0]).size(), 2u);
  EXPECT_EQ(points_of(*lines[1]).size(), 3u);
  EXPECT_EQ(find_all(panel, "circle").size(), 7u);
  expect_points_mapped(panel, {s});
  // The axes cover the finite values only.
  const Axes a = axes_of(panel);
  EXPECT_GE(a.xlo, 0);
  EXPECT_LE(a.xhi, 12);
  EXPECT_GE(a.ylo, 0);
  EXPECT_LE(a.yhi, 1);
}

TEST(PlotSvg, LongSeriesHasOnlyLinesAndIsolatedPointsKeepMarkers) {
  const auto noise = random_values(31, 200);
  PlotSeries s{.label = "step loss", .x = {}, .y = {}};
  for (int i = 0; i < 200; ++i) {
    s.x.push_back(i);
    s.y.push_back(i == 100 || i == 102 ? kNaN : std::exp(-i / 50.0) + 0.01 * std::tanh(noise[i]));
  }
  const XmlNode root = parse_svg(plot_svg({{.series = {s}}}));
  const XmlNode& panel = *by_class(root, "panel").at(0);
  EXPECT_EQ(find_all(panel, "polyline").size(), 2u);
  const auto circles = find_all(panel, "circle");
  ASSERT_EQ(circles.size(), 1u);  // point 101, alone between two NaNs
  expect_points_mapped(panel, {s});
}

TEST(PlotSvg, XRangeWidensTheAxis) {
  const PlotSeries s{.label = "acc", .x = {1, 2}, .y = {0.8, 0.9}};
  const XmlNode root = parse_svg(plot_svg(
      {{.series = {s}, .x_range = std::pair{0.0, 3.0}}, {.series = {s}, .x_range = std::pair{1.5, 1.75}}}));
  const auto panels = by_class(root, "panel");
  const Axes wide = axes_of(*panels.at(0)), inside = axes_of(*panels.at(1));
  EXPECT_EQ(wide.xlo, 0);
  EXPECT_EQ(wide.xhi, 3);
  EXPECT_EQ(inside.xlo, 1);  // a range inside the data changes nothing
  EXPECT_EQ(inside.xhi, 2);
  expect_points_mapped(*panels[0], {s});
  expect_points_mapped(*panels[1], {s});
  EXPECT_THROW(plot_svg({{.series = {s}, .x_range = std::pair{2.0, 1.0}}}), ValueError);
  EXPECT_THROW(plot_svg({{.series = {s}, .x_range = std::pair{0.0, kInf}}}), ValueError);
  EXPECT_THROW(plot_svg({{.series = {s}, .x_range = std::pair{kNaN, 1.0}}}), ValueError);
}

TEST(PlotSvg, SinglePointShowsAMarker) {
  const PlotSeries s{.label = "acc", .x = {3}, .y = {0.875}};
  const XmlNode root = parse_svg(plot_svg({{.series = {s}}}));
  const XmlNode& panel = *by_class(root, "panel").at(0);
  EXPECT_TRUE(find_all(panel, "polyline").empty());
  ASSERT_EQ(find_all(panel, "circle").size(), 1u);
  const Axes a = axes_of(panel);
  EXPECT_LT(a.xlo, 3);  // the one value sits inside a widened range, not on the frame
  EXPECT_GT(a.xhi, 3);
  EXPECT_LT(a.ylo, 0.875);
  EXPECT_GT(a.yhi, 0.875);
  expect_points_mapped(panel, {s});
}

TEST(PlotSvg, ConstantSeriesIsAHorizontalLineInside) {
  const PlotSeries s{.label = "flat", .x = {0, 1, 2, 3}, .y = {0.25, 0.25, 0.25, 0.25}};
  const PlotSeries zero{.label = "zero", .x = {0, 1}, .y = {0, 0}};
  const XmlNode root = parse_svg(plot_svg({{.series = {s}}, {.series = {zero}}}));
  for (const XmlNode* panel : by_class(root, "panel")) {
    const auto pts = points_of(*find_all(*panel, "polyline").at(0));
    const Axes a = axes_of(*panel);
    for (const Point& p : pts) {
      EXPECT_DOUBLE_EQ(p.y, pts[0].y);
      EXPECT_GT(p.y, a.y0 + 1);
      EXPECT_LT(p.y, a.y1 - 1);
    }
  }
  expect_points_mapped(*by_class(root, "panel").at(0), {s});
  expect_points_mapped(*by_class(root, "panel").at(1), {zero});
}

TEST(PlotSvg, PanelWithoutDataSaysSo) {
  const PlotSeries nan{.label = "nan", .x = {1, 2}, .y = {kNaN, kInf}};
  for (const std::vector<PlotSeries>& series : {std::vector<PlotSeries>{}, std::vector<PlotSeries>{nan}}) {
    const XmlNode root = parse_svg(plot_svg({{.title = "empty", .series = series}}));
    const auto all = texts(root);
    EXPECT_NE(std::find(all.begin(), all.end(), "no data"), all.end());
    EXPECT_TRUE(find_all(root, "polyline").empty());
    EXPECT_TRUE(find_all(root, "circle").empty());
    EXPECT_EQ(by_class(root, "plot-area").size(), 1u);
  }
}

TEST(PlotSvg, LegendWrapsAndTheImageGrows) {
  const PlotSeries one{.label = "a", .x = {0, 1}, .y = {1, 2}};
  std::vector<PlotSeries> many;
  for (int i = 0; i < 9; ++i)
    many.push_back(
        {.label = fmt::format("a rather long series label {}", i), .x = {0, 1}, .y = {1.0 * i, 2.0 * i}});
  const XmlNode small = parse_svg(plot_svg({{.series = {one}}}));
  const XmlNode big = parse_svg(plot_svg({{.series = many}}));
  EXPECT_GT(big.number("height"), small.number("height"));
  // Every legend entry fits across the panel, and the plot area keeps its size.
  for (const XmlNode* t : find_all(*by_class(big, "legend").at(0), "text")) EXPECT_LT(t->number("x"), 480);
  const Axes a = axes_of(*by_class(big, "panel").at(0)), b = axes_of(*by_class(small, "panel").at(0));
  EXPECT_EQ(a.y1 - a.y0, b.y1 - b.y0);
  expect_points_mapped(*by_class(big, "panel").at(0), many);
}

TEST(PlotSvg, BadArguments) {
  const PlotSeries ok{.label = "ok", .x = {0, 1}, .y = {1, 2}};
  const PlotSeries bad{.label = "bad", .x = {0, 1, 2}, .y = {1, 2}};
  EXPECT_THROW(plot_svg({}), ValueError);
  try {
    plot_svg({{.title = "p", .series = {ok, bad}}});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plot_svg({{.series = {ok}}}, {.panel_width = 100}), ValueError);
  EXPECT_THROW(plot_svg({{.series = {ok}}}, {.panel_height = 50}), ValueError);
  EXPECT_THROW(plot_svg({{.series = {ok}}}, {.panel_width = kNaN}), ValueError);
}

TEST(PlotSvg, WritePlotSvg) {
  TempDir dir;
  const std::vector<PlotPanel> panels = {
      {.title = "loss", .series = {{.label = "l", .x = {0, 1}, .y = {2, 1}}}}};
  const std::string path = dir.file("plot.svg");
  write_plot_svg(path, panels, {.title = "run"});
  EXPECT_EQ(read_file(path), plot_svg(panels, {.title = "run"}));
  parse_svg(read_file(path));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plot.svg"});
  const auto write = [&](const std::string& p) { write_plot_svg(p, panels); };
  expect_write_fails(write, dir.file("no/such/plot.svg"), dir, {"plot.svg"});
  expect_write_fails(write, dir.file(""), dir, {"plot.svg"});  // the folder itself
  EXPECT_THROW(write_plot_svg(path, {}), ValueError);
  EXPECT_EQ(read_file(path), plot_svg(panels, {.title = "run"}));  // untouched by the failures
}

}  // namespace
}  // namespace kiln::io
