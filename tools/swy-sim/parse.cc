// Platform and workload files: one statement a line, '#' starts a
// comment; every error names the file and the line.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sim.hh"

namespace swysim {
namespace {

[[noreturn]] void fail(const std::string &path, int line,
                       const std::string &what)
{
    throw std::runtime_error(path + ":" + std::to_string(line) + ": " +
                             what);
}

// A number with a unit from the table; the unit is required.
struct Unit {
    const char *name;
    double factor;
};

double parse_with_units(const std::string &path, int line,
                        const std::string &text, const Unit *units,
                        const char *what)
{
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || errno != 0 || !std::isfinite(v) || v < 0)
        fail(path, line, std::string("'") + text + "' is not a " + what);
    std::string unit(end);
    for (const Unit *u = units; u->name != nullptr; u++)
        if (unit == u->name)
            return v * u->factor;
    std::string known;
    for (const Unit *u = units; u->name != nullptr; u++)
        known += std::string(known.empty() ? "" : ", ") + u->name;
    fail(path, line, std::string("'") + text + "': unit '" + unit +
                         "' unknown for a " + what + " (one of: " + known +
                         ")");
}

const Unit bandwidth_units[] = {
    {"B/s", 1},        {"kB/s", 1e3},       {"KB/s", 1e3},
    {"MB/s", 1e6},     {"GB/s", 1e9},       {"KiB/s", 1024.0},
    {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
    {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},   {"gbit", 1e9 / 8},
    {"Gbps", 1e9 / 8}, {"Mbps", 1e6 / 8},   {nullptr, 0}};
const Unit time_units[] = {{"s", 1},     {"ms", 1e-3}, {"us", 1e-6},
                           {"ns", 1e-9}, {nullptr, 0}};
const Unit size_units[] = {{"", 1},   {"B", 1},        {"KiB", 1024.0},
                           {"MiB", 1048576.0},  {"GiB", 1073741824.0},
                           {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6},
                           {"GB", 1e9}, {nullptr, 0}};

int parse_count(const std::string &path, int line, const std::string &text,
                const char *what, int lo, int hi)
{
    char *end = nullptr;
    errno = 0;
    long v = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || errno != 0 || v < lo ||
        v > hi)
        fail(path, line, std::string(what) + " '" + text +
                             "' is not a whole number in " +
                             std::to_string(lo) + ".." + std::to_string(hi));
    return (int)v;
}

// Lines split into words, comments and blank lines dropped.
std::vector<std::pair<int, std::vector<std::string>>>
read_lines(const std::string &path, const char *what)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error(path + ": cannot open the " + what +
                                 " file: " + std::strerror(errno));
    std::vector<std::pair<int, std::vector<std::string>>> out;
    std::string text;
    for (int line = 1; std::getline(in, text); line++) {
        size_t hash = text.find('#');
        if (hash != std::string::npos)
            text.resize(hash);
        std::istringstream words(text);
        std::vector<std::string> w;
        for (std::string word; words >> word;)
            w.push_back(word);
        if (!w.empty())
            out.emplace_back(line, std::move(w));
    }
    return out;
}

} // namespace

Platform platform_load(const std::string &path)
{
    Platform pf;
    pf.path = path;
    auto lines = read_lines(path, "platform");
    int last = 0;
    for (auto &[line, w] : lines) {
        last = line;
        const std::string &key = w[0];
        if (w.size() != 2)
            fail(path, line, "'" + key + "' takes one value (" +
                                 std::to_string(w.size() - 1) + " given)");
        const std::string &v = w[1];
        if (key == "nodes")
            pf.nodes = parse_count(path, line, v, "nodes", 1, 4096);
        else if (key == "ranks-per-node")
            pf.ranks_per_node = parse_count(path, line, v, "ranks-per-node",
                                            1, 256);
        else if (key == "intra-bandwidth")
            pf.intra_bw = parse_with_units(path, line, v, bandwidth_units,
                                           "bandwidth");
        else if (key == "intra-latency")
            pf.intra_lat = parse_with_units(path, line, v, time_units,
                                            "time");
        else if (key == "uplink-bandwidth")
            pf.uplink_bw = parse_with_units(path, line, v, bandwidth_units,
                                            "bandwidth");
        else if (key == "uplink-latency")
            pf.uplink_lat = parse_with_units(path, line, v, time_units,
                                             "time");
        else if (key == "core-bandwidth")
            pf.core_bw = parse_with_units(path, line, v, bandwidth_units,
                                          "bandwidth");
        else if (key == "core-latency")
            pf.core_lat = parse_with_units(path, line, v, time_units, "time");
        else
            fail(path, line, "unknown key '" + key + "' (nodes, "
                             "ranks-per-node, intra-bandwidth, intra-latency, "
                             "uplink-bandwidth, uplink-latency, "
                             "core-bandwidth, core-latency)");
    }
    if (pf.nodes == 0 || pf.ranks_per_node == 0)
        fail(path, last, std::string("no '") +
                             (pf.nodes == 0 ? "nodes" : "ranks-per-node") +
                             "' in the file");
    if (pf.intra_bw <= 0 || (pf.nodes > 1 && pf.uplink_bw <= 0))
        fail(path, last, std::string("no '") +
                             (pf.intra_bw <= 0 ? "intra-bandwidth"
                                               : "uplink-bandwidth") +
                             "' above zero in the file");
    return pf;
}

Workload workload_load(const std::string &path)
{
    Workload wl;
    wl.path = path;
    std::vector<std::string> names;
    for (auto &[line, w] : read_lines(path, "workload")) {
        Stmt s;
        s.line = line;
        const std::string &verb = w[0];
        if (verb == "post") {
            if (w.size() < 4)
                fail(path, line, "post takes NAME KIND SIZE [priority=P] "
                                 "[count=N]");
            s.type = Stmt::Post;
            s.name = w[1];
            if (s.name == "all" || s.name.find('#') != std::string::npos)
                fail(path, line, "'" + s.name + "' cannot name an op");
            for (auto &n : names)
                if (n == s.name)
                    fail(path, line, "op '" + s.name + "' posted before");
            if (w[2] == "alltoallv")
                s.kind = Kind::Alltoallv;
            else if (w[2] == "allreduce")
                s.kind = Kind::Allreduce;
            else
                fail(path, line, "op kind '" + w[2] +
                                     "' unknown (alltoallv, allreduce)");
            double b = parse_with_units(path, line, w[3], size_units, "size");
            if (b < 4 || b > 64.0 * 1073741824.0)
                fail(path, line, "size '" + w[3] + "' out of 4 B..64 GiB");
            s.bytes = (size_t)b & ~(size_t)3; // whole floats
            for (size_t i = 4; i < w.size(); i++) {
                size_t eq = w[i].find('=');
                std::string k = w[i].substr(0, eq),
                            v = eq == std::string::npos ? ""
                                                        : w[i].substr(eq + 1);
                if (k == "priority")
                    s.priority = v == "low"    ? 0
                                 : v == "high" ? 100
                                               : parse_count(path, line, v,
                                                             "priority", 0,
                                                             1000);
                else if (k == "count")
                    s.count = parse_count(path, line, v, "count", 1, 4096);
                else if (k == "comm") {
                    bool known = false;
                    for (auto &sp : wl.splits)
                        known = known || sp.name == v;
                    if (!known)
                        fail(path, line, "comm '" + v + "' is no earlier "
                                         "line's split");
                    s.comm = v;
                } else
                    fail(path, line, "unknown option '" + w[i] +
                                         "' (priority=, count=, comm=)");
            }
            names.push_back(s.name);
        } else if (verb == "wait") {
            if (w.size() != 2)
                fail(path, line, "wait takes one NAME (or all)");
            s.type = Stmt::Wait;
            s.name = w[1];
            bool known = s.name == "all";
            for (auto &n : names)
                known = known || n == s.name;
            if (!known)
                fail(path, line, "wait for '" + s.name +
                                     "', which no earlier line posts");
        } else if (verb == "split") {
            if (w.size() != 3)
                fail(path, line, "split takes NAME all|node|rail");
            Split sp;
            sp.name = w[1];
            for (auto &other : wl.splits)
                if (other.name == sp.name)
                    fail(path, line, "split '" + sp.name + "' made before");
            if (w[2] == "all")
                sp.by = Split::All;
            else if (w[2] == "node")
                sp.by = Split::Node;
            else if (w[2] == "rail")
                sp.by = Split::Rail;
            else
                fail(path, line, "split by '" + w[2] +
                                     "' unknown (all, node, rail)");
            wl.splits.push_back(sp);
            continue;
        } else if (verb == "compute") {
            if (w.size() != 2)
                fail(path, line, "compute takes one DURATION");
            s.type = Stmt::Compute;
            s.seconds = parse_with_units(path, line, w[1], time_units,
                                         "time");
        } else {
            fail(path, line, "unknown statement '" + verb +
                                 "' (post, wait, compute, split)");
        }
        wl.stmts.push_back(s);
    }
    if (wl.stmts.empty())
        throw std::runtime_error(path + ": no statement in the workload");
    return wl;
}

} // namespace swysim
