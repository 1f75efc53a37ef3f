#include "launcher_env.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace wt::cli {
namespace {

[[noreturn]] void bad(const std::string& why) {
  throw Error(WT_ERR_INVALID_ARGUMENT, why);
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// One bracket group's values, padded as written: "01-03,7" → 01 02 03 7.
std::vector<std::string> group_values(std::string_view group, std::string_view list,
                                      std::size_t limit) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= group.size()) {
    std::size_t comma = group.find(',', at);
    if (comma == std::string_view::npos) comma = group.size();
    const std::string_view item = group.substr(at, comma - at);
    const std::size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash),
                           hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      bad(
          fmt::format("host list '{}': '[{}]' holds '{}', which is neither a number nor a range "
                      "a-b",
                      list, group, item));
    unsigned long a = 0, b = 0;
    std::from_chars(lo.data(), lo.data() + lo.size(), a);
    std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (b < a) bad(fmt::format("host list '{}': the range '{}' runs backwards", list, item));
    if (b - a + 1 > limit || out.size() + (b - a + 1) > limit)
      bad(fmt::format("host list '{}' names more than {} hosts", list, limit));
    for (unsigned long v = a; v <= b; ++v) out.push_back(fmt::format("{:0{}}", v, lo.size()));
    at = comma + 1;
  }
  return out;
}

// One comma-separated item of the list, with any number of bracket groups.
void expand_item(std::string_view item, std::string_view list, std::size_t limit,
                 std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  std::size_t at = 0;
  while (at < item.size()) {
    const std::size_t open = item.find('[', at);
    const std::string_view text =
        item.substr(at, open == std::string_view::npos ? item.npos : open - at);
    if (text.find(']') != std::string_view::npos)
      bad(fmt::format("host list '{}': a ']' without its '['", list));
    for (auto& n : names) n += text;
    if (open == std::string_view::npos) break;
    const std::size_t close = item.find(']', open);
    if (close == std::string_view::npos)
      bad(fmt::format("host list '{}': a '[' is not closed", list));
    const auto values = group_values(item.substr(open + 1, close - open - 1), list, limit);
    if (names.size() * values.size() + out.size() > limit)
      bad(fmt::format("host list '{}' names more than {} hosts", list, limit));
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const auto& n : names)
      for (const auto& v : values) next.push_back(n + v);
    names = std::move(next);
    at = close + 1;
  }
  for (auto& n : names) {
    if (n.empty()) bad(fmt::format("host list '{}' has an empty host name", list));
    out.push_back(std::move(n));
  }
}

struct Reader {
  const Getenv& getenv;
  LauncherPlace& place;
  const char* get(const char* name) {
    const char* v = getenv(name);
    if (v != nullptr) place.variables.push_back(name);
    return v;
  }
  int number(const char* name, const char* value, int lo, int hi) {
    int n = 0;
    const std::string_view s(value);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < lo || n > hi)
      bad(fmt::format("{}={} is not a number in {}..{} (set by the launcher: {})", name, s, lo, hi,
                      place.source));
    return n;
  }
};

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view list, std::size_t limit) {
  std::vector<std::string> out;
  std::size_t at = 0, depth = 0, start = 0;
  for (; at <= list.size(); ++at) {
    const char c = at < list.size() ? list[at] : ',';
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) bad(fmt::format("host list '{}': a ']' without its '['", list));
      --depth;
    }
    if (c == ',' && depth == 0) {
      expand_item(list.substr(start, at - start), list, limit, out);
      start = at + 1;
    }
  }
  if (depth != 0) bad(fmt::format("host list '{}': a '[' is not closed", list));
  return out;
}

std::optional<LauncherPlace> place_from_env(const Getenv& getenv) {
  struct Launcher {
    const char *source, *rank, *size, *local, *local_size;  // local_size: ranks on this host
  };
  static constexpr Launcher kLaunchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},  // or Ray's (below)
      {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  constexpr int kMaxWorld = 1 << 20;
  for (const Launcher& l : kLaunchers) {
    const char* rank = getenv(l.rank);
    const char* size = getenv(l.size);
    if (rank == nullptr && size == nullptr) continue;
    LauncherPlace p;
    p.source = l.source;
    Reader r{getenv, p};
    rank = r.get(l.rank);
    size = r.get(l.size);
    if (rank == nullptr || size == nullptr)
      bad(fmt::format("{} is set but {} is not: a {} launch sets both", rank ? l.rank : l.size,
                      rank ? l.size : l.rank, l.source));
    p.world_size = r.number(l.size, size, 1, kMaxWorld);
    p.rank = r.number(l.rank, rank, 0, kMaxWorld - 1);
    if (p.rank >= p.world_size)
      bad(fmt::format("{}={} is not below {}={} (set by the launcher: {})", l.rank, p.rank, l.size,
                      p.world_size, l.source));
    if (const char* local = r.get(l.local)) p.local_rank = r.number(l.local, local, 0, p.rank);
    const char* local_size_name = l.local_size;
    // verl's Ray workers set torchrun's names but count the ranks on a host as Ray does.
    if (local_size_name != nullptr && getenv(local_size_name) == nullptr &&
        p.source == std::string("torchrun") && getenv("RAY_LOCAL_WORLD_SIZE") != nullptr)
      local_size_name = "RAY_LOCAL_WORLD_SIZE";
    if (const char* n = local_size_name ? r.get(local_size_name) : nullptr) {
      const int here = r.number(local_size_name, n, 1, p.world_size);
      if (p.local_rank >= here)
        bad(fmt::format("{}={} is not below {}={} (set by the launcher: {})", l.local, p.local_rank,
                        local_size_name, here, l.source));
      p.hosts = (p.world_size + here - 1) / here;
    }
    // torchrun numbers a host's ranks together: a local rank other than the rank is on another
    // host than rank 0.
    if (p.source == std::string("torchrun") && p.local_rank != p.rank)
      p.hosts = std::max(p.hosts, 2);
    if (p.source == std::string("torchrun")) {
      if (const char* a = r.get("MASTER_ADDR")) p.master_addr = a;
      p.master_from = "MASTER_ADDR";
      if (const char* port = r.get("MASTER_PORT"))
        p.master_port = r.number("MASTER_PORT", port, 1, 65535);
      if (p.world_size > 1 && p.master_addr.empty())
        bad(fmt::format("RANK and WORLD_SIZE={} are set but MASTER_ADDR is not: where is rank 0?",
                        p.world_size));
    } else if (p.source == std::string("SLURM")) {
      const char* list = r.get("SLURM_STEP_NODELIST");
      p.master_from = "SLURM_STEP_NODELIST";
      if (list == nullptr || *list == '\0') {
        list = r.get("SLURM_JOB_NODELIST");
        p.master_from = "SLURM_JOB_NODELIST";
      }
      if (list != nullptr && *list != '\0') {
        const auto hosts = expand_slurm_nodelist(list);
        p.master_addr = hosts.front();
        p.hosts = static_cast<int>(hosts.size());
        p.host_list = hosts;
      }
    }
    return p;
  }
  return std::nullopt;
}

}  // namespace wt::cli
