#include "kiln/io/checkpoint_manager.h"

#include <algorithm>
#include <string_view>
#include <system_error>

namespace kiln::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOp = "CheckpointManager";
constexpr std::string_view kExtension = ".ckpt";

// The step of "<prefix><digits>.ckpt", or -1 for any other name.
int64_t step_of(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() + kExtension.size() || !name.starts_with(prefix) ||
      !name.ends_with(kExtension))
    return -1;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - kExtension.size());
  if (digits.size() > 18) return -1;  // beyond int64
  int64_t step = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return -1;
    step = step * 10 + (ch - '0');
  }
  return step;
}

// True for ".<checkpoint name>.tmp-*": what save_checkpoint writes before its rename.
bool is_leftover(std::string_view name, std::string_view prefix) {
  const size_t tmp = name.find(".tmp-");
  return name.starts_with('.') && tmp != std::string_view::npos &&
         step_of(name.substr(1, tmp - 1), prefix) >= 0;
}

}  // namespace

CheckpointManager::CheckpointManager(std::filesystem::path folder, CheckpointManagerOptions options)
    : folder_(std::move(folder)), options_(std::move(options)) {
  if (options_.keep_last < 0)
    throw ValueError::of(kOp, "keep_last must be >= 0", "got {}", options_.keep_last);
  if (options_.prefix.empty() || options_.prefix.find('/') != std::string::npos)
    throw ValueError::of(kOp, "prefix must be a non-empty file name part", "got '{}'", options_.prefix);
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) throw RuntimeError::of(kOp, "cannot create folder", "{}: {}", folder_.string(), ec.message());
  if (!fs::is_directory(folder_, ec)) throw RuntimeError::of(kOp, "not a folder", "{}", folder_.string());
  // A save killed before its rename leaves its temporary file; no save of this folder runs now.
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;  // a file that cannot go is tried again by the next manager
    if (is_leftover(it->path().filename().string(), options_.prefix)) fs::remove(it->path(), ignored);
  }
}

std::filesystem::path CheckpointManager::path_for(int64_t step) const {
  if (step < 0) throw ValueError::of(kOp, "step must be >= 0", "got {}", step);
  return folder_ / fmt::format("{}{:010d}{}", options_.prefix, step, kExtension);
}

std::filesystem::path CheckpointManager::save(const Checkpoint& checkpoint) {
  const fs::path path = path_for(checkpoint.step);
  save_checkpoint(path, checkpoint);
  prune(path);
  return path;
}

std::filesystem::path CheckpointManager::save(const nn::Module& model, const optim::Optimizer& optimizer,
                                              const DataLoader* loader,
                                              std::map<std::string, std::string> metadata) {
  return save(make_checkpoint(model, optimizer, loader, std::move(metadata)));
}

std::vector<std::pair<int64_t, std::filesystem::path>> CheckpointManager::list() const {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = step_of(it->path().filename().string(), options_.prefix);
    std::error_code type_ec;  // a dangling link or a file removed meanwhile is skipped
    if (step >= 0 && it->is_regular_file(type_ec)) found.emplace_back(step, it->path());
  }
  if (ec) throw RuntimeError::of(kOp, "cannot list folder", "{}: {}", folder_.string(), ec.message());
  // Names of one step can differ only in leading zeros; order those by name to stay deterministic.
  std::sort(found.begin(), found.end());
  return found;
}

void CheckpointManager::prune(const std::filesystem::path& keep) {
  if (options_.keep_last == 0) return;
  std::vector<fs::path> others;
  for (auto& [step, path] : list())
    if (path.filename() != keep.filename()) others.push_back(std::move(path));
  const size_t keep_others = static_cast<size_t>(options_.keep_last) - 1;
  if (others.size() <= keep_others) return;
  std::error_code ec;  // a file that cannot go now is retried after the next save
  for (size_t i = 0; i < others.size() - keep_others; ++i) fs::remove(others[i], ec);
}

std::vector<std::filesystem::path> CheckpointManager::checkpoints() const {
  std::vector<fs::path> paths;
  for (auto& [step, path] : list()) paths.push_back(std::move(path));
  return paths;
}

std::optional<std::filesystem::path> CheckpointManager::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return std::move(all.back().second);
}

std::optional<Checkpoint> CheckpointManager::load_latest() const {
  const std::optional<fs::path> path = latest();
  if (!path) return std::nullopt;
  return load_checkpoint(*path);
}

}  // namespace kiln::io
