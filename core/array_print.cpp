// NumPy-style repr of an Array: NumPy 2's arrayprint rules (precision 8, 'maxprec' float mode,
// line width 75, summarization past 1000 elements with 3 edge items), except that the dtype is
// always shown, since kiln's default float is float32 rather than NumPy's float64.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/cpu/dispatch.h"

namespace kiln {
namespace {

constexpr int kLineWidth = 75;
constexpr int64_t kThreshold = 1000;  // more elements than this are summarized
constexpr int64_t kEdgeItems = 3;
constexpr int kPrecision = 8;  // most fractional digits a float shows
constexpr std::string_view kPrefix = "array(";

// ---------------------------------------------------------------- reading elements

// An element widened without loss: floats to double, integers and bools to int64.
struct Value {
  double f = 0;
  int64_t i = 0;
};

Value read(const Array& a, int64_t offset) {
  return detail::visit_dtype<kAllTypes>(a.dtype(), "print", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = a.strided_data<T>()[offset];
    Value out;
    if constexpr (std::is_integral_v<T>)
      out.i = static_cast<int64_t>(v);
    else
      out.f = static_cast<double>(static_cast<compute_t<T>>(v));
    return out;
  });
}

// ---------------------------------------------------------------- decimal digits of floats

// v = d1.d2d3...dn x 10^exp, with `neg` for the sign.
struct Decimal {
  bool neg = false;
  std::string digits;
  int exp = 0;
};

// Parses printf/to_chars scientific output such as "-1.25e-05".
Decimal parse_scientific(std::string_view s) {
  Decimal d;
  size_t p = 0;
  if (s[p] == '-') {
    d.neg = true;
    ++p;
  }
  const size_t e = s.find('e');
  for (size_t k = p; k < e; ++k)
    if (s[k] != '.') d.digits += s[k];
  d.exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  return d;
}

// True when the decimal text reads back as exactly `v` in dtype t.
bool round_trips(const char* text, double v, Dtype t) {
  const double back = std::strtod(text, nullptr);
  if (t == float16) return float16_t(back).bits == float16_t(v).bits;
  return bfloat16_t(static_cast<float>(back)).bits == bfloat16_t(static_cast<float>(v)).bits;
}

// The shortest digits that read back as v in its own dtype (NumPy's "unique" Dragon4 mode).
Decimal shortest(double v, Dtype t) {
  char buf[64];
  if (t == float64 || t == float32) {
    const auto r = t == float64 ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific)
                                : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v),
                                                std::chars_format::scientific);
    return parse_scientific(std::string_view(buf, r.ptr));
  }
  for (int digits = 1;; ++digits) {  // 16-bit floats: at most 5 significant digits are needed
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    if (digits >= 17 || round_trips(buf, v, t)) return parse_scientific(buf);
  }
}

// Integer part (with sign), fractional digits and, for scientific notation, the exponent.
struct Parts {
  std::string int_part, frac;
  int exp = 0;
};

Parts positional(double v, Dtype t) {
  Decimal d = shortest(v, t);
  const int n = static_cast<int>(d.digits.size());
  if (n - 1 - d.exp > kPrecision) {  // more fractional digits than shown: round the exact value
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", kPrecision, v);
    std::string s(buf);
    const size_t dot = s.find('.');
    Parts p{s.substr(0, dot), s.substr(dot + 1)};
    while (!p.frac.empty() && p.frac.back() == '0') p.frac.pop_back();
    return p;
  }
  Parts p;
  if (d.exp >= 0) {
    p.int_part = d.digits.substr(0, std::min(n, d.exp + 1));
    p.int_part.append(static_cast<size_t>(std::max(0, d.exp + 1 - n)), '0');
    if (n > d.exp + 1) p.frac = d.digits.substr(static_cast<size_t>(d.exp + 1));
  } else {
    p.int_part = "0";
    p.frac = std::string(static_cast<size_t>(-d.exp - 1), '0') + d.digits;
  }
  if (p.frac == "0") p.frac.clear();
  if (d.neg) p.int_part.insert(0, "-");
  return p;
}

Parts scientific(double v, Dtype t) {
  Decimal d = shortest(v, t);
  if (static_cast<int>(d.digits.size()) - 1 > kPrecision) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*e", kPrecision, v);
    d = parse_scientific(buf);
  }
  Parts p{std::string(d.neg ? "-" : "") + d.digits[0], d.digits.substr(1), d.exp};
  if (p.frac == "0") p.frac.clear();
  return p;
}

// ---------------------------------------------------------------- element formats

std::string pad_left(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// NumPy's FloatingFormat: one layout (fixed or scientific, paddings) fitted to all shown values.
class FloatFormat {
 public:
  FloatFormat(const std::vector<double>& values, Dtype t) : t_(t) {
    std::vector<double> finite;
    bool neg_inf = false;
    for (double v : values) {
      if (std::isfinite(v))
        finite.push_back(v);
      else if (v < 0)
        neg_inf = true;
    }
    double max_abs = 0, min_abs = INFINITY;
    for (double v : finite)
      if (v != 0) {
        max_abs = std::max(max_abs, std::abs(v));
        min_abs = std::min(min_abs, std::abs(v));
      }
    // NumPy 2.3 scales the switch to scientific by the dtype's decimal precision.
    const double cutoff = t == float64 ? 1e8 : t == float32 ? 1e6 : t == float16 ? 1e3 : 1e2;
    exp_ = max_abs > 0 && (max_abs >= cutoff || min_abs < 1e-4 || max_abs / min_abs > 1000.0);
    for (double v : finite) {
      const Parts p = exp_ ? scientific(v, t) : positional(v, t);
      pad_left_ = std::max(pad_left_, p.int_part.size());
      pad_right_ = std::max(pad_right_, p.frac.size());
      if (exp_) exp_digits_ = std::max(exp_digits_, std::to_string(std::abs(p.exp)).size());
    }
    if (exp_) {
      exp_digits_ = std::max<size_t>(exp_digits_, 2);
      precision_ = pad_right_;
      pad_right_ = exp_digits_ + 2 + precision_;
    }
    if (finite.size() != values.size()) {  // room for nan / inf / -inf
      const size_t right = pad_right_ + 1, inf_len = neg_inf ? 4 : 3;
      pad_left_ = std::max({pad_left_, 3 > right ? 3 - right : 0, inf_len > right ? inf_len - right : 0});
    }
  }

  std::string operator()(double v) const {
    if (!std::isfinite(v)) {
      const std::string s = std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
      return pad_left(s, pad_left_ + pad_right_ + 1);
    }
    if (!exp_) {
      const Parts p = positional(v, t_);
      std::string s = pad_left(p.int_part, pad_left_) + "." + p.frac;
      s.append(pad_right_ - p.frac.size(), ' ');
      return s;
    }
    const Parts p = scientific(v, t_);
    std::string s = pad_left(p.int_part, pad_left_) + "." + p.frac;
    s.append(precision_ - p.frac.size(), '0');
    const std::string e = std::to_string(std::abs(p.exp));
    s += p.exp < 0 ? "e-" : "e+";
    s.append(exp_digits_ - e.size(), '0');
    return s + e;
  }

 private:
  Dtype t_;
  bool exp_ = false;
  size_t pad_left_ = 0, pad_right_ = 0, precision_ = 0, exp_digits_ = 0;
};

// All shown elements, formatted alike, in the order they are printed.
std::vector<std::string> format_elements(const Array& a, const std::vector<int64_t>& offsets) {
  std::vector<std::string> out;
  out.reserve(offsets.size());
  const Dtype t = a.dtype();
  if (t == bool_) {
    for (int64_t off : offsets) out.push_back(read(a, off).i ? (a.ndim() > 0 ? " True" : "True") : "False");
  } else if (is_integral(t)) {
    size_t width = 0;
    for (int64_t off : offsets) {
      out.push_back(std::to_string(read(a, off).i));
      width = std::max(width, out.back().size());
    }
    for (std::string& s : out) s = pad_left(std::move(s), width);
  } else {
    std::vector<double> values;
    for (int64_t off : offsets) values.push_back(read(a, off).f);
    const FloatFormat format(values, t);
    for (double v : values) out.push_back(format(v));
  }
  return out;
}

// ---------------------------------------------------------------- layout (NumPy's _formatArray)

class Printer {
 public:
  explicit Printer(const Array& a) : a_(a), summarize_(a.size() > kThreshold) {
    collect_offsets(0, 0, offsets_);
    words_ = format_elements(a, offsets_);
  }

  std::string render() {
    const std::string hanging(kPrefix.size() + 1, ' ');
    return recurse(0, hanging, kLineWidth - 1);  // -1: the closing ")" of the repr
  }

 private:
  bool summarized(int axis) const { return summarize_ && a_.shape(axis) > 2 * kEdgeItems; }

  // Indices shown along an axis: all of them, or the edge items on either side of "...".
  std::vector<int64_t> shown(int axis) const {
    const int64_t n = a_.shape(axis);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i)
      if (!summarized(axis) || i < kEdgeItems || i >= n - kEdgeItems) idx.push_back(i);
    return idx;
  }

  void collect_offsets(int axis, int64_t offset, std::vector<int64_t>& out) const {
    if (axis == a_.ndim()) {
      out.push_back(offset);
      return;
    }
    for (int64_t i : shown(axis)) collect_offsets(axis + 1, offset + i * a_.strides()[axis], out);
  }

  // Appends `word` to `line`, first moving to a new line when it would pass `width` (and a new
  // line would help).
  static void extend(std::string& s, std::string& line, const std::string& word, size_t width,
                     const std::string& next_prefix) {
    if (line.size() + word.size() > width && line.size() > next_prefix.size()) {
      line.erase(line.find_last_not_of(' ') + 1);
      s += line + "\n";
      line = next_prefix;
    }
    line += word;
  }

  std::string recurse(int axis, const std::string& hanging, int width) {
    if (axis == a_.ndim()) return words_[next_word_++];
    const int64_t n = a_.shape(axis);
    const bool summary = summarized(axis);
    const int64_t lead = summary ? kEdgeItems : 0, trail = summary ? kEdgeItems : n;
    const std::string next_hanging = hanging + " ";
    std::string s;
    if (axis == a_.ndim() - 1) {
      const size_t elem_width = static_cast<size_t>(width - 1);  // leave room for "," or "]"
      std::string line = hanging;
      for (int64_t i = 0; i < lead; ++i) {
        extend(s, line, recurse(axis + 1, next_hanging, width - 1), elem_width, hanging);
        line += ", ";
      }
      if (summary) {
        extend(s, line, "...", elem_width, hanging);
        line += ", ";
      }
      for (int64_t i = trail; i > 1; --i) {
        extend(s, line, recurse(axis + 1, next_hanging, width - 1), elem_width, hanging);
        line += ", ";
      }
      extend(s, line, recurse(axis + 1, next_hanging, width - 1), elem_width, hanging);
      s += line;
    } else {
      const std::string sep = "," + std::string(static_cast<size_t>(a_.ndim() - axis - 1), '\n');
      for (int64_t i = 0; i < lead; ++i) s += hanging + recurse(axis + 1, next_hanging, width - 1) + sep;
      if (summary) s += hanging + "..." + sep;
      for (int64_t i = trail; i > 1; --i) s += hanging + recurse(axis + 1, next_hanging, width - 1) + sep;
      s += hanging + recurse(axis + 1, next_hanging, width - 1);
    }
    return "[" + s.substr(hanging.size()) + "]";
  }

  const Array& a_;
  const bool summarize_;
  std::vector<int64_t> offsets_;
  std::vector<std::string> words_;
  size_t next_word_ = 0;
};

// Python's tuple repr: (0,), (2, 0, 3).
std::string tuple_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Array& a) {
  if (!a.valid()) return os << "array(<empty handle>)";
  a.eval();
  std::string body = std::string(kPrefix);
  std::string extras;
  if (a.size() == 0) {
    body += "[],";
    if (a.shape() != Shape{0}) extras = "shape=" + tuple_str(a.shape()) + ", ";
  } else {
    body += Printer(a).render() + ",";
  }
  extras += "dtype=" + std::string(dtype_name(a.dtype())) + ")";
  // The extras go on a line of their own when they would push the last line past the width.
  const size_t last_line = body.size() - (body.rfind('\n') == std::string::npos ? 0 : body.rfind('\n') + 1);
  const std::string spacer = last_line + extras.size() + 1 > static_cast<size_t>(kLineWidth)
                                 ? "\n" + std::string(kPrefix.size(), ' ')
                                 : " ";
  return os << body << spacer << extras;
}

}  // namespace kiln
