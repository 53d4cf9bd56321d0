// swy-sim: run a workload file on a platform file under each policy, with
// every rank a real Switchyard engine (swy_sim.h) progressed by this
// driver in SimGrid's simulated time. Usage: see usage().
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim.hh"
#include "switchyard/swy_sim.h"
#include "switchyard/switchyard.h"

namespace sg4 = simgrid::s4u;
using namespace swysim;

namespace {

void usage(FILE *to)
{
    std::fprintf(to,
        "usage: swy-sim [--policy fifo,fair,lina] [--json FILE] [--quiet]\n"
        "               [--copy-all]\n"
        "               PLATFORM WORKLOAD\n"
        "Runs WORKLOAD (post/wait/compute lines, docs/sim.md) on every rank\n"
        "of the cluster PLATFORM describes, once per policy, each rank a\n"
        "Switchyard engine in simulated time; prints each op's time and the\n"
        "step's, and with --json the same as a JSON array (one object per\n"
        "policy). Messages above 64 KiB are timed without moving their bytes\n"
        "unless --copy-all.\n"
        "       swy-sim interference --platform PLATFORM [options]\n"
        "swy-bench interference's JSON lines from the simulation (for\n"
        "swy-tune --sim; swy-sim interference --help).\n");
}

struct OpRec {
    std::string name;
    Kind kind;
    size_t bytes;
    int priority;
    double posted = -1, done = -1;
    int ranks_done = 0;
};

struct RankState {
    size_t pc = 0;
    double compute_until = -1;
    std::vector<std::pair<size_t, swy_request_t>> pending; // op, request
    std::vector<size_t> posted;                             // its ops
    bool finished = false;
};

struct Run {
    const Platform *pf;
    const Workload *wl;
    std::vector<swy_comm_t> comms;
    // The workload's splits: [split][rank], and each rank's rank there.
    std::vector<std::vector<swy_comm_t>> split_comms;
    std::vector<RankState> ranks;
    std::vector<OpRec> ops;
    std::vector<float> sendbuf, recvbuf;
    std::vector<size_t> counts, displs;
    double step = 0;
    std::string error;
    std::string *bench_settings = nullptr; // "PARTITION CREDIT" at the end
};

double now_s()
{
    return sg4::Engine::get_clock();
}

// The engines' clock: simulated time, one second on (swy_sim.h: a stamp
// of 0 means "not yet" to the engine).
uint64_t sim_clock_ns(void *)
{
    return (uint64_t)(sg4::Engine::get_clock() * 1e9 + 0.5) + 1000000000u;
}

[[noreturn]] void swy_fail(const char *what, int rank, swy_comm_t comm)
{
    throw std::runtime_error(std::string(what) + " failed on rank " +
                             std::to_string(rank) + ": " +
                             swy_last_error(comm));
}

// Post statement s's ops on rank r (op records made by rank 0's post).
void post(Run &run, int r, const Stmt &s)
{
    swy_comm_t comm = run.comms[r];
    for (size_t k = 0; k < run.wl->splits.size(); k++)
        if (run.wl->splits[k].name == s.comm)
            comm = run.split_comms[k][r];
    int n = swy_comm_size(comm);
    for (int i = 0; i < s.count; i++) {
        std::string name = s.count > 1 ? s.name + "#" + std::to_string(i)
                                       : s.name;
        size_t idx = 0;
        while (idx < run.ops.size() && run.ops[idx].name != name)
            idx++;
        if (idx == run.ops.size())
            run.ops.push_back({name, s.kind, s.bytes, s.priority});
        OpRec &op = run.ops[idx];
        if (op.posted < 0)
            op.posted = now_s();
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.priority = s.priority;
        attr.order = (int64_t)idx;
        attr.name = name.c_str();
        swy_request_t req = nullptr;
        swy_status_t st;
        if (s.kind == Kind::Alltoallv) {
            size_t per = s.bytes / sizeof(float);
            for (int p = 0; p < n; p++) {
                run.counts[p] = per;
                run.displs[p] = (size_t)p * per;
            }
            st = swy_alltoallv(run.sendbuf.data(), run.counts.data(),
                               run.displs.data(), run.recvbuf.data(),
                               run.counts.data(), run.displs.data(),
                               SWY_FLOAT32, comm, &attr, &req);
        } else {
            st = swy_allreduce(run.sendbuf.data(), run.recvbuf.data(),
                               s.bytes / sizeof(float), SWY_FLOAT32, SWY_SUM,
                               comm, &attr, &req);
        }
        if (st != SWY_OK)
            swy_fail(name.c_str(), r, comm);
        run.ranks[r].pending.emplace_back(idx, req);
        run.ranks[r].posted.push_back(idx);
    }
}

bool op_done_here(const Run &run, int r, const std::string &name)
{
    for (auto &p : run.ranks[r].pending) {
        const std::string &n = run.ops[p.first].name;
        if (name == "all" || n == name ||
            (n.compare(0, name.size() + 1, name + "#") == 0))
            return false;
    }
    return true;
}

// Move rank r as far as it goes now; true when anything changed.
bool rank_step(Run &run, int r)
{
    RankState &rs = run.ranks[r];
    bool changed = false;
    for (size_t i = 0; i < rs.pending.size();) {
        int done = 0;
        if (swy_test(rs.pending[i].second, &done) != SWY_OK)
            swy_fail(run.ops[rs.pending[i].first].name.c_str(), r,
                     run.comms[r]);
        if (!done) {
            i++;
            continue;
        }
        OpRec &op = run.ops[rs.pending[i].first];
        op.done = std::max(op.done, now_s());
        op.ranks_done++;
        swy_request_free(rs.pending[i].second);
        rs.pending.erase(rs.pending.begin() + (long)i);
        changed = true;
    }
    while (rs.pc < run.wl->stmts.size()) {
        const Stmt &s = run.wl->stmts[rs.pc];
        if (s.type == Stmt::Post) {
            post(run, r, s);
        } else if (s.type == Stmt::Wait) {
            if (!op_done_here(run, r, s.name))
                break;
        } else {
            if (rs.compute_until < 0)
                rs.compute_until = now_s() + s.seconds;
            if (now_s() < rs.compute_until)
                break;
            rs.compute_until = -1;
        }
        rs.pc++;
        changed = true;
    }
    if (rs.pc == run.wl->stmts.size() && rs.pending.empty() &&
        !rs.finished) {
        rs.finished = true;
        changed = true;
    }
    return changed;
}

void drive(Run *run)
{
    try {
        int n = run->pf->nranks();
        int idle_steps = 0;
        for (;;) {
            bool moved = true;
            while (moved) {
                moved = false;
                for (int r = 0; r < n; r++)
                    moved = rank_step(*run, r) || moved;
                moved = net_take_activity() || moved;
            }
            bool all = true;
            double timer = -1;
            for (auto &rs : run->ranks) {
                all = all && rs.finished;
                if (rs.compute_until >= 0 &&
                    (timer < 0 || rs.compute_until < timer))
                    timer = rs.compute_until;
            }
            if (all)
                break;
            if (net_wait(timer)) {
                idle_steps = 0;
                continue;
            }
            // Nothing in flight and nobody computing: an engine may wait
            // for its clock (a deadline); let simulated time pass a
            // little, a bounded number of times.
            if (++idle_steps > 1000) {
                std::string who;
                for (int r = 0; r < n; r++)
                    for (auto &p : run->ranks[r].pending)
                        who += " " + run->ops[p.first].name + "@" +
                               std::to_string(r);
                throw std::runtime_error(
                    "the simulation stalled at " + std::to_string(now_s()) +
                    " s: ranks wait for ops with nothing in flight (op@rank:" +
                    who + ")");
            }
            sg4::this_actor::sleep_for(1e-3);
        }
        run->step = now_s();
        if (run->bench_settings != nullptr) {
            char part[64] = "0", credit[64] = "0";
            swy_comm_query(run->comms[0], "SWY_PARTITION_BYTES", part,
                           sizeof(part));
            swy_comm_query(run->comms[0], "SWY_CREDIT_BYTES", credit,
                           sizeof(credit));
            *run->bench_settings = std::string(part) + " " + credit;
        }
        for (auto &split : run->split_comms)
            for (int r = 0; r < n; r++)
                if (swy_comm_destroy(split[r]) != SWY_OK)
                    swy_fail("swy_comm_destroy (split)", r, split[r]);
        for (int r = 0; r < n; r++)
            if (swy_comm_destroy(run->comms[r]) != SWY_OK)
                swy_fail("swy_comm_destroy", r, run->comms[r]);
    } catch (const std::exception &e) {
        run->error = e.what();
    }
}

std::string json_escape(const std::string &s)
{
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\')
            o += '\\';
        o += c;
    }
    return o;
}

std::string run_json(const Run &run, const char *policy)
{
    char buf[512];
    std::string j = "{\"policy\": \"" + std::string(policy) +
                    "\", \"platform\": \"" + json_escape(run.pf->path) +
                    "\", \"workload\": \"" + json_escape(run.wl->path) +
                    "\", ";
    std::snprintf(buf, sizeof(buf),
                  "\"nodes\": %d, \"ranks_per_node\": %d, "
                  "\"step_s\": %.9f, \"messages\": %llu, \"ops\": [",
                  run.pf->nodes, run.pf->ranks_per_node, run.step,
                  (unsigned long long)net_messages());
    j += buf;
    for (size_t i = 0; i < run.ops.size(); i++) {
        const OpRec &op = run.ops[i];
        std::snprintf(buf, sizeof(buf),
                      "%s{\"name\": \"%s\", \"kind\": \"%s\", \"bytes\": %zu, "
                      "\"priority\": %d, \"posted_s\": %.9f, "
                      "\"done_s\": %.9f, \"time_s\": %.9f}",
                      i ? ", " : "", json_escape(op.name).c_str(),
                      op.kind == Kind::Alltoallv ? "alltoallv" : "allreduce",
                      op.bytes, op.priority, op.posted, op.done,
                      op.done - op.posted);
        j += buf;
    }
    return j + "]}";
}

// One policy's simulation, in a child process (SimGrid's engine is one
// per process); its JSON object goes to fd.
// What one configuration of `swy-sim interference` prints: a line as
// swy-bench interference's (--json), so that swy-tune reads it.
struct BenchLine {
    bool on = false;
    size_t credit = 0; // as asked (0: auto), as swy-bench reports it
    size_t a2a_bytes = 0, ar_bytes = 0; // per rank, the allreduce's
    double delay_ms = 0;
};

std::string bench_json(const Run &run, const char *policy,
                       const BenchLine &b)
{
    auto time_of = [&](const char *name) {
        for (auto &op : run.ops)
            if (op.name == name)
                return op.done - op.posted;
        return 0.0;
    };
    char part[64] = "0", credit[64];
    if (run.bench_settings != nullptr)
        std::sscanf(run.bench_settings->c_str(), "%63s", part);
    std::snprintf(credit, sizeof(credit), "%zu", b.credit);
    double alone = time_of("alone"), loaded = time_of("loaded");
    double ar_alone = time_of("ar_alone"), backlog = time_of("backlog");
    char buf[1024];
    std::snprintf(buf, sizeof(buf),
        "{\"bench\":\"interference\",\"impl\":\"swy-sim\","
        "\"policy\":\"%s\",\"sweep\":\"policies\","
        "\"partition_bytes\":%s,\"credit_bytes\":%s,"
        "\"a2a_bytes\":%zu,\"allreduce_bytes\":%zu,\"delay_ms\":%.3f,"
        "\"reps\":1,\"a2a_alone_ms\":%.4f,\"a2a_loaded_ms\":%.4f,"
        "\"a2a_loaded_p95_ms\":%.4f,\"slowdown\":%.4f,"
        "\"allreduce_MBps\":%.3f,\"allreduce_alone_MBps\":%.3f,"
        "\"ranks\":%d,\"nodes\":%d,\"check\":\"ok\"}\n",
        policy, part, credit, b.a2a_bytes, b.ar_bytes, b.delay_ms,
        alone * 1e3, loaded * 1e3, loaded * 1e3, loaded / alone,
        (double)b.ar_bytes / backlog / 1e6,
        (double)b.ar_bytes / ar_alone / 1e6, run.pf->nranks(),
        run.pf->nodes);
    return buf;
}

int simulate(const Platform &pf, const Workload &wl, const char *policy,
             bool quiet, bool copy_all, int fd, const BenchLine &bench = {})
{
    // The bytes' values do not change the schedule; copying them costs
    // most of the wall time at scale. Headers (small) always move.
    net_copy_limit(copy_all ? SIZE_MAX : 65536);
    setenv("SWY_POLICY", policy, 1);
    // Messages waiting for their receive are copied into buffers of their
    // own: keep freed ones in the heap instead of mapping them anew.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    int argc = 1;
    char arg0[] = "swy-sim";
    char *argv[] = {arg0, nullptr};
    xbt_log_control_set("root.thres:critical");
    sg4::Engine engine(&argc, argv);
    sg4::Engine::set_config("network/model:CM02");
    sg4::Engine::set_config("network/crosstraffic:0");
    // One actor per message in flight: small stacks (KiB), and no guard
    // page, whose mapping each would count against vm.max_map_count
    // (65,530: tens of thousands of messages are in flight at 64 ranks).
    sg4::Engine::set_config("contexts/stack-size:64");
    sg4::Engine::set_config("contexts/guard-size:0");
    net_build(pf);
    swy_sim_clock_set(sim_clock_ns, nullptr);

    Run run;
    std::string settings;
    run.pf = &pf;
    run.wl = &wl;
    if (bench.on)
        run.bench_settings = &settings;
    int n = pf.nranks();
    size_t floats = 1;
    for (auto &s : wl.stmts) {
        size_t need = s.kind == Kind::Alltoallv ? s.bytes * (size_t)n
                                                : s.bytes;
        if (s.type == Stmt::Post && need / sizeof(float) > floats)
            floats = need / sizeof(float);
    }
    // Every rank reads and writes the same zeroed buffers: the bytes'
    // values do not change the schedule, and n ranks' own buffers would
    // not fit at scale.
    run.sendbuf.assign(floats, 0.0f);
    run.recvbuf.assign(floats, 0.0f);
    run.counts.resize(n);
    run.displs.resize(n);
    run.ranks.resize(n);
    run.comms.resize(n);
    std::vector<int> node_of(n);
    std::vector<double> bw((size_t)n * n), lat((size_t)n * n);
    for (int a = 0; a < n; a++) {
        node_of[a] = a / pf.ranks_per_node;
        for (int b = 0; b < n; b++) {
            bool same = a / pf.ranks_per_node == b / pf.ranks_per_node;
            double core = pf.core_bw > 0 ? pf.core_bw : 1e300;
            double up = pf.uplink_bw < core ? pf.uplink_bw : core;
            bw[(size_t)a * n + b] = same || pf.intra_bw < up ? pf.intra_bw
                                                             : up;
            lat[(size_t)a * n + b] =
                pf.intra_lat + (same ? 0 : pf.uplink_lat + pf.core_lat);
        }
    }
    swy_sim_params_t params = {sizeof(params), n, node_of.data(), bw.data(),
                               lat.data(), net_transport()};
    if (swy_sim_comms_create(&params, run.comms.data()) != SWY_OK) {
        std::fprintf(stderr, "swy-sim: %s\n", swy_last_error(nullptr));
        return 1;
    }
    for (auto &sp : wl.splits) {
        std::vector<int> colors(n), keys(n);
        for (int r = 0; r < n; r++) {
            colors[r] = sp.by == Split::All    ? 0
                        : sp.by == Split::Node ? r / pf.ranks_per_node
                                               : r % pf.ranks_per_node;
            keys[r] = r;
        }
        run.split_comms.emplace_back(n, nullptr);
        if (swy_sim_comms_split(run.comms.data(), n, colors.data(),
                                keys.data(),
                                run.split_comms.back().data()) != SWY_OK) {
            std::fprintf(stderr, "swy-sim: split %s: %s\n", sp.name.c_str(),
                         swy_last_error(nullptr));
            return 1;
        }
    }
    auto wall0 = std::chrono::steady_clock::now();
    sg4::Actor::create("driver", sg4::Host::by_name("r0"), drive, &run);
    engine.run();
    double wall = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - wall0)
                      .count();
    if (!run.error.empty()) {
        std::fprintf(stderr, "swy-sim: %s (policy %s)\n", run.error.c_str(),
                     policy);
        return 1;
    }
    if (bench.on) {
        std::string line = bench_json(run, policy, bench);
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
    }
    if (!quiet) {
        std::printf("policy %s: %d nodes x %d ranks, %s on %s\n", policy,
                    pf.nodes, pf.ranks_per_node, wl.path.c_str(),
                    pf.path.c_str());
        for (auto &op : run.ops)
            std::printf("  op %-16s %-9s %12zu B  prio %4d  posted %10.6f s  "
                        "done %10.6f s  time %10.3f ms\n",
                        op.name.c_str(),
                        op.kind == Kind::Alltoallv ? "alltoallv"
                                                   : "allreduce",
                        op.bytes, op.priority, op.posted, op.done,
                        (op.done - op.posted) * 1e3);
        std::printf("  step %.6f s simulated; %llu messages; %.2f s wall\n",
                    run.step, (unsigned long long)net_messages(), wall);
        std::fflush(stdout);
    }
    std::string j = run_json(run, policy) + "\n";
    if (write(fd, j.data(), j.size()) != (ssize_t)j.size())
        return 1;
    return 0;
}

// Run one simulation in a child (SimGrid's engine is one per process)
// with the given settings in its environment; its JSON object (when
// json_out) is appended to *json_out. 0, or the child's failure.
int run_child(const Platform &pf, const Workload &wl,
              const std::string &policy,
              const std::vector<std::pair<const char *, std::string>> &env,
              bool quiet, bool copy_all, const BenchLine &bench,
              std::string *json_out)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        for (auto &kv : env)
            setenv(kv.first, kv.second.c_str(), 1);
        _exit(simulate(pf, wl, policy.c_str(), quiet, copy_all, fds[1],
                       bench));
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t got; (got = read(fds[0], buf, sizeof(buf))) > 0;)
        out.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return 1;
    while (!out.empty() && out.back() == '\n')
        out.pop_back();
    if (json_out != nullptr)
        *json_out += (json_out->size() > 1 ? ",\n " : "") + out;
    return 0;
}

std::vector<std::string> split_list(const std::string &text)
{
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos)
            comma = text.size();
        if (comma > start)
            out.push_back(text.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

void interference_usage(FILE *to)
{
    std::fprintf(to,
        "usage: swy-sim interference --platform FILE [--json]\n"
        "       [--policies LIST] [--partitions LIST|none] [--credits LIST]\n"
        "       [--a2a-size SIZE] [--allreduce-size SIZE] [--delay-ms MS]\n"
        "swy-bench interference on the simulated cluster, for swy-tune\n"
        "--sim: per policy x partition x credit (the credit for lina and\n"
        "credit only), the all-to-all alone and posted --delay-ms after\n"
        "the allreduce backlog, one JSON line each as swy-bench's.\n"
        "  --policies LIST        default fifo,fair,lina,credit\n"
        "  --partitions LIST      partition sizes; none (default): auto\n"
        "  --credits LIST         credit sizes, auto = one partition\n"
        "                         (default auto)\n"
        "  --a2a-size SIZE        bytes each rank sends in the all-to-all,\n"
        "                         split evenly over all ranks (default 2M)\n"
        "  --allreduce-size SIZE  default 8 x the all-to-all's\n"
        "  --delay-ms MS          backlog alone before the all-to-all\n"
        "                         (default 5)\n"
        "--json, --reps, --warmup and --nodes are accepted for swy-bench's\n"
        "command line: one simulation is exact, so there is one repetition.\n");
}

int size_arg(const char *opt, const char *text, size_t *out)
{
    if (swy_parse_size(text, out) != SWY_OK || *out == 0) {
        std::fprintf(stderr, "swy-sim interference: bad %s '%s'\n", opt,
                     text);
        return -1;
    }
    return 0;
}

int interference_main(int argc, char **argv)
{
    std::string platform, policies = "fifo,fair,lina,credit",
                partitions = "none", credits = "auto";
    size_t a2a = 2u << 20, ar = 0;
    double delay_ms = 5;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        bool has = i + 1 < argc;
        if (a == "--help" || a == "-h") {
            interference_usage(stdout);
            return 0;
        } else if (a == "--json") {
        } else if (a == "--platform" && has) {
            platform = argv[++i];
        } else if (a == "--policies" && has) {
            policies = argv[++i];
        } else if (a == "--partitions" && has) {
            partitions = argv[++i];
        } else if (a == "--credits" && has) {
            credits = argv[++i];
        } else if (a == "--a2a-size" && has) {
            if (size_arg("--a2a-size", argv[++i], &a2a) != 0)
                return 2;
        } else if (a == "--allreduce-size" && has) {
            if (size_arg("--allreduce-size", argv[++i], &ar) != 0)
                return 2;
        } else if (a == "--delay-ms" && has) {
            char *end = nullptr;
            delay_ms = std::strtod(argv[++i], &end);
            if (*end != '\0' || !(delay_ms >= 0) || delay_ms > 1e4) {
                std::fprintf(stderr, "swy-sim interference: bad --delay-ms "
                                     "'%s'\n", argv[i]);
                return 2;
            }
        } else if ((a == "--reps" || a == "--warmup" || a == "--nodes") &&
                   has) {
            ++i;
        } else {
            std::fprintf(stderr, "swy-sim interference: unknown option %s\n",
                         a.c_str());
            interference_usage(stderr);
            return 2;
        }
    }
    if (platform.empty()) {
        std::fprintf(stderr, "swy-sim interference: no --platform FILE\n");
        return 2;
    }
    if (ar == 0)
        ar = 8 * a2a;
    Platform pf;
    try {
        pf = platform_load(platform);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "swy-sim: %s\n", e.what());
        return 1;
    }
    size_t per_pair = (a2a / (size_t)pf.nranks()) & ~(size_t)3;
    if (per_pair < 4) {
        std::fprintf(stderr, "swy-sim interference: --a2a-size %zu is below "
                             "4 bytes a rank for %d ranks\n", a2a,
                     pf.nranks());
        return 2;
    }
    Workload wl;
    wl.path = "(interference)";
    auto post = [&](const char *name, Kind kind, size_t bytes, int prio) {
        Stmt st;
        st.type = Stmt::Post;
        st.name = name;
        st.kind = kind;
        st.bytes = bytes & ~(size_t)3;
        st.priority = prio;
        wl.stmts.push_back(st);
    };
    auto wait = [&](const char *name) {
        Stmt st;
        st.type = Stmt::Wait;
        st.name = name;
        wl.stmts.push_back(st);
    };
    post("alone", Kind::Alltoallv, per_pair, SWY_PRIO_HIGH);
    wait("alone");
    post("ar_alone", Kind::Allreduce, ar, SWY_PRIO_LOW);
    wait("ar_alone");
    post("backlog", Kind::Allreduce, ar, SWY_PRIO_LOW);
    Stmt delay;
    delay.type = Stmt::Compute;
    delay.seconds = delay_ms * 1e-3;
    wl.stmts.push_back(delay);
    post("loaded", Kind::Alltoallv, per_pair, SWY_PRIO_HIGH);
    wait("all");

    std::vector<std::string> parts = partitions == "none"
                                         ? std::vector<std::string>{"auto"}
                                         : split_list(partitions);
    for (auto &policy : split_list(policies)) {
        bool prioritized = policy != "fifo" && policy != "fair";
        for (auto &part : parts) {
            auto cl = prioritized ? split_list(credits)
                                  : std::vector<std::string>{"auto"};
            for (auto &credit : cl) {
                BenchLine b;
                b.on = true;
                b.a2a_bytes = a2a;
                b.ar_bytes = ar & ~(size_t)3;
                b.delay_ms = delay_ms;
                std::vector<std::pair<const char *, std::string>> env;
                if (part != "auto")
                    env.emplace_back("SWY_PARTITION_BYTES", part);
                if (credit != "auto") {
                    if (size_arg("--credits", credit.c_str(), &b.credit) != 0)
                        return 2;
                    env.emplace_back("SWY_CREDIT_BYTES", credit);
                }
                if (run_child(pf, wl, policy, env, true, false, b,
                              nullptr) != 0)
                    return 1;
            }
        }
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc > 1 && std::strcmp(argv[1], "interference") == 0)
        return interference_main(argc, argv);
    std::string policies = "fifo,fair,lina", json;
    bool quiet = false, copy_all = false;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if ((a == "--policy" || a == "--json") && i + 1 < argc)
            (a == "--policy" ? policies : json) = argv[++i];
        else if (a == "--quiet")
            quiet = true;
        else if (a == "--copy-all")
            copy_all = true;
        else if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else if (a.size() > 1 && a[0] == '-') {
            std::fprintf(stderr, "swy-sim: unknown option %s\n", a.c_str());
            usage(stderr);
            return 2;
        } else
            files.push_back(a);
    }
    if (files.size() != 2) {
        usage(stderr);
        return 2;
    }
    Platform pf;
    Workload wl;
    try {
        pf = platform_load(files[0]);
        wl = workload_load(files[1]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "swy-sim: %s\n", e.what());
        return 1;
    }
    std::string all = "[";
    for (auto &policy : split_list(policies))
        if (run_child(pf, wl, policy, {}, quiet, copy_all, {}, &all) != 0)
            return 1;
    all += "]\n";
    if (!json.empty()) {
        FILE *f = json == "-" ? stdout : std::fopen(json.c_str(), "w");
        if (f == nullptr) {
            std::fprintf(stderr, "swy-sim: cannot write %s\n", json.c_str());
            return 1;
        }
        std::fputs(all.c_str(), f);
        if (f != stdout)
            std::fclose(f);
    }
    return 0;
}
