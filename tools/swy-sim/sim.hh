// swy-sim: Switchyard's own engines (swy_sim.h) on SimGrid's network
// model. The pieces: parse.cc (platform and workload files), transport.cc
// (the transport every simulated rank uses), main.cc (the driver).
#ifndef SWY_SIM_TOOL_HH
#define SWY_SIM_TOOL_HH

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/swy_transport_v1.h"

namespace swysim {

// The cluster, from a platform file (docs/sim.md). Bandwidths in bytes/s
// each direction, latencies in seconds.
struct Platform {
    std::string path;
    int nodes = 0, ranks_per_node = 0;
    double intra_bw = 0, intra_lat = 0;   // each rank's link into its node
    double uplink_bw = 0, uplink_lat = 0; // each node's link to the core
    double core_bw = 0, core_lat = 0;     // shared core; 0: non-blocking
    int nranks() const { return nodes * ranks_per_node; }
};

enum class Kind { Alltoallv, Allreduce };

// One statement of a workload file, run by every rank in order.
struct Stmt {
    enum Type { Post, Wait, Compute } type = Post;
    int line = 0;
    std::string name;  // Post, Wait ("all": every op posted so far)
    Kind kind = Kind::Alltoallv;
    size_t bytes = 0;  // alltoallv: per pair; allreduce: the vector
    int priority = -1; // -1: the op kind's default
    int count = 1;     // Post: so many ops, NAME#0..count-1
    double seconds = 0; // Compute
    std::string comm;   // Post: a split's name, empty for the world
};

// A communicator split from the world before the first op: every rank,
// colored by its node ("node"), by its index on its node ("rail"), or
// all in one ("all": the same ranks in the same order).
struct Split {
    std::string name;
    enum By { All, Node, Rail } by = All;
};

struct Workload {
    std::string path;
    std::vector<Stmt> stmts;
    std::vector<Split> splits;
};

// Both throw std::runtime_error("FILE:LINE: what is wrong").
Platform platform_load(const std::string &path);
Workload workload_load(const std::string &path);

// The simulated network and the transport over it (transport.cc).
void net_build(const Platform &pf);
const swy_transport_v1_t *net_transport();
// Messages above this size are timed but move no bytes (the receiver's
// buffer keeps what it had); the engines' own headers are far below it.
void net_copy_limit(size_t bytes);
// Progress made since the last call (messages delivered or posted).
bool net_take_activity();
// Wait in simulated time for the next transfer to end, at most until
// `until` (s; < 0: no limit). False when nothing is in flight.
bool net_wait(double until);
size_t net_in_flight();
uint64_t net_messages();

} // namespace swysim

#endif
