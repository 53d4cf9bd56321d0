// The simulated cluster as SimGrid sees it, and the transport every
// simulated rank's engine uses (swy_transport_v1): a send is one SimGrid
// communication between the two ranks' hosts, whose end in simulated time
// hands the bytes to the receiver. Matching is on (source, tag), in
// posting order, as the ABI asks; the bytes are copied in memory when
// the transfer ends, so the collectives compute real results.
#include <simgrid/s4u.hpp>

#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>

#include "sim.hh"

namespace sg4 = simgrid::s4u;

namespace swysim {
namespace {

struct RankCtx;

struct Msg {
    RankCtx *from;
    int dst;
    uint64_t tag;
    const void *buf;
    size_t len;
    swy_transport_complete_cb_v1_t cb;
    void *arg;
};

struct Recv {
    int peer;
    uint64_t tag;
    void *buf;
    size_t len;
    swy_transport_complete_cb_v1_t cb;
    void *arg;
};

struct Unexpected {
    int src;
    uint64_t tag;
    std::vector<unsigned char> data; // empty past the copy limit
    size_t len;
};

struct Done {
    swy_transport_complete_cb_v1_t cb;
    void *arg;
    swy_status_t status;
    size_t bytes;
};

struct RankCtx {
    int rank;
    std::deque<Recv *> posted;
    std::deque<Unexpected> unexpected;
    std::vector<Done> done;
};

// Each message is carried by an actor of its own that puts it into its
// receiver's mailbox, waits for the transfer and queues it for the
// driver: the driver then waits on one condition rather than on every
// transfer in flight (SimGrid's wait_any costs in proportion to the
// transfers it waits on, each time). Each rank's mailbox has a permanent
// receiver, so that transfers start when they are sent, all at once, as
// eager sends do; host-to-host transfers (Comm::sendto) would do the
// same, but their completion costs SimGrid a scan of every one in flight.
struct Net {
    std::vector<sg4::Host *> hosts; // [rank]
    std::vector<sg4::Mailbox *> boxes; // [rank]
    std::vector<RankCtx *> ranks;   // [rank], once init() ran
    sg4::MutexPtr lock;
    sg4::ConditionVariablePtr arrived_cv;
    std::deque<Msg *> arrived; // transfers ended, in the order they did
    size_t in_flight = 0;
    bool activity = false;
    uint64_t messages = 0;
    size_t copy_limit = SIZE_MAX; // larger messages move no bytes
};
Net net;

void deliver(Msg *m)
{
    m->from->done.push_back({m->cb, m->arg, SWY_OK, m->len});
    RankCtx *to = net.ranks[m->dst];
    int src = m->from->rank;
    for (auto it = to->posted.begin(); it != to->posted.end(); ++it) {
        Recv *r = *it;
        if (r->peer != src || r->tag != m->tag)
            continue;
        size_t n = m->len <= r->len ? m->len : r->len;
        if (n > 0 && m->len <= net.copy_limit)
            std::memcpy(r->buf, m->buf, n);
        to->done.push_back({r->cb, r->arg,
                            m->len <= r->len ? SWY_OK : SWY_ERR_MISMATCH,
                            n});
        to->posted.erase(it);
        delete r;
        return;
    }
    const unsigned char *p = static_cast<const unsigned char *>(m->buf);
    if (m->len <= net.copy_limit)
        to->unexpected.push_back({src, m->tag, {p, p + m->len}, m->len});
    else
        to->unexpected.push_back({src, m->tag, {}, m->len});
}

swy_status_t t_init(const swy_transport_host_v1_t *host, void **ctx_p)
{
    if (host->nranks != (int)net.hosts.size())
        return SWY_ERR_INVALID_ARG;
    auto *c = new RankCtx();
    c->rank = host->rank;
    net.ranks[host->rank] = c;
    *ctx_p = c;
    return SWY_OK;
}

swy_status_t t_query(void *, swy_transport_caps_v1_t *caps)
{
    *caps = {};
    caps->mem_types = 1u << SWY_MEM_HOST;
    caps->score[SWY_LINK_SAME_NUMA] = 100;
    caps->score[SWY_LINK_SAME_NODE] = 100;
    caps->score[SWY_LINK_CROSS_NODE] = 100;
    caps->max_address_len = sizeof(int32_t);
    return SWY_OK;
}

swy_status_t t_get_address(void *ctx, void *addr, size_t *len_p)
{
    int32_t r = static_cast<RankCtx *>(ctx)->rank;
    std::memcpy(addr, &r, sizeof(r));
    *len_p = sizeof(r);
    return SWY_OK;
}

swy_status_t t_connect(void *, const void *const *, const size_t *,
                       const uint8_t *)
{
    return SWY_OK;
}

swy_status_t t_isend(void *ctx, int peer, uint64_t tag, const void *buf,
                     size_t len, swy_mem_type_t, 
                     swy_transport_complete_cb_v1_t cb, void *arg,
                     void **handle_p)
{
    auto *c = static_cast<RankCtx *>(ctx);
    if (peer < 0 || peer >= (int)net.hosts.size() || peer == c->rank)
        return SWY_ERR_INVALID_ARG;
    auto *m = new Msg{c, peer, tag, buf, len, cb, arg};
    sg4::Mailbox *box = net.boxes[peer];
    sg4::Actor::create("msg", net.hosts[c->rank], [m, box]() {
        box->put(m, m->len);
        net.arrived.push_back(m);
        net.arrived_cv->notify_one();
    });
    net.in_flight++;
    net.activity = true;
    net.messages++;
    *handle_p = m;
    return SWY_OK;
}

swy_status_t t_irecv(void *ctx, int peer, uint64_t tag, void *buf,
                     size_t len, swy_mem_type_t,
                     swy_transport_complete_cb_v1_t cb, void *arg,
                     void **handle_p)
{
    auto *c = static_cast<RankCtx *>(ctx);
    for (auto it = c->unexpected.begin(); it != c->unexpected.end(); ++it) {
        if (it->src != peer || it->tag != tag)
            continue;
        size_t n = it->len <= len ? it->len : len;
        if (n > 0 && !it->data.empty())
            std::memcpy(buf, it->data.data(), n);
        c->done.push_back({cb, arg, it->len <= len ? SWY_OK
                                                   : SWY_ERR_MISMATCH,
                           n});
        c->unexpected.erase(it);
        net.activity = true;
        *handle_p = nullptr;
        return SWY_OK;
    }
    auto *r = new Recv{peer, tag, buf, len, cb, arg};
    c->posted.push_back(r);
    *handle_p = r;
    return SWY_OK;
}

// A posted receive is dropped with SWY_ERR_ABORTED; a send in flight
// runs to its end (as a rendezvous send the receiver already pulls).
void t_cancel(void *ctx, void *handle)
{
    auto *c = static_cast<RankCtx *>(ctx);
    for (auto it = c->posted.begin(); it != c->posted.end(); ++it)
        if (*it == handle) {
            c->done.push_back({(*it)->cb, (*it)->arg, SWY_ERR_ABORTED, 0});
            delete *it;
            c->posted.erase(it);
            net.activity = true;
            return;
        }
}

int t_progress(void *ctx)
{
    auto *c = static_cast<RankCtx *>(ctx);
    std::vector<Done> done;
    done.swap(c->done);
    for (auto &d : done)
        d.cb(d.arg, d.status, d.bytes);
    return (int)done.size();
}

int t_event_fd(void *)
{
    return -1;
}

swy_status_t t_arm(void *ctx)
{
    return static_cast<RankCtx *>(ctx)->done.empty() ? SWY_OK
                                                     : SWY_INPROGRESS;
}

swy_status_t t_describe(void *, int peer, char *buf, size_t len)
{
    snprintf(buf, len, "sim:host r%d", peer);
    return SWY_OK;
}

void t_finalize(void *ctx)
{
    auto *c = static_cast<RankCtx *>(ctx);
    for (Recv *r : c->posted)
        delete r;
    net.ranks[c->rank] = nullptr;
    delete c;
}

const swy_transport_v1_t sim_ops = {
    SWY_TRANSPORT_ABI_V1, sizeof(swy_transport_v1_t), "sim",
    nullptr, 0, 0, /* no SWY_SIM_* variables of its own */
    t_init,
    t_query, t_get_address, t_connect, t_isend, t_irecv, t_cancel,
    t_progress, t_event_fd, t_arm, t_describe, t_finalize};

} // namespace

const swy_transport_v1_t *net_transport()
{
    return &sim_ops;
}

// One SimGrid host per rank; a rank's own link each way into its node
// (memory copies, or NVLink), each node's uplink each way, and a shared
// core when the platform has one. The network model is the flow-level one
// without TCP's corrections (CM02), so that a transfer alone takes
// latency + bytes / bandwidth: the files say which bandwidth a flow gets.
void net_build(const Platform &pf)
{
    auto *zone = sg4::create_full_zone("cluster");
    int n = pf.nranks();
    std::vector<sg4::Link *> out(n), in(n), up(pf.nodes), down(pf.nodes);
    sg4::Link *core = nullptr;
    net.hosts.resize(n);
    net.ranks.assign(n, nullptr);
    for (int r = 0; r < n; r++) {
        std::string id = std::to_string(r);
        net.hosts[r] = zone->create_host("r" + id, 1e9);
        out[r] = zone->create_link("out" + id, pf.intra_bw)
                     ->set_latency(pf.intra_lat);
        in[r] = zone->create_link("in" + id, pf.intra_bw);
    }
    for (int k = 0; k < pf.nodes && pf.nodes > 1; k++) {
        std::string id = std::to_string(k);
        up[k] = zone->create_link("up" + id, pf.uplink_bw)
                    ->set_latency(pf.uplink_lat);
        down[k] = zone->create_link("down" + id, pf.uplink_bw);
    }
    if (pf.core_bw > 0)
        core = zone->create_link("core", pf.core_bw)->set_latency(pf.core_lat);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b)
                continue;
            int na = a / pf.ranks_per_node, nb = b / pf.ranks_per_node;
            std::vector<sg4::LinkInRoute> route{sg4::LinkInRoute(out[a])};
            if (na != nb) {
                route.emplace_back(up[na]);
                if (core != nullptr)
                    route.emplace_back(core);
                route.emplace_back(down[nb]);
            }
            route.emplace_back(in[b]);
            zone->add_route(net.hosts[a]->get_netpoint(),
                            net.hosts[b]->get_netpoint(), nullptr, nullptr,
                            route, false);
        }
    zone->seal();
    net.boxes.resize(n);
    for (int r = 0; r < n; r++) {
        net.boxes[r] = sg4::Mailbox::by_name("r" + std::to_string(r));
        sg4::Mailbox *box = net.boxes[r];
        // Takes the transfers that ended; the senders' actors hand them on.
        sg4::ActorPtr taker = sg4::Actor::create(
            "taker" + std::to_string(r), net.hosts[r], [box]() {
                for (;;)
                    box->get<Msg>();
            });
        taker->daemonize();
        box->set_receiver(taker);
    }
    net.lock = sg4::Mutex::create();
    net.arrived_cv = sg4::ConditionVariable::create();
}

void net_copy_limit(size_t bytes)
{
    net.copy_limit = bytes;
}

bool net_take_activity()
{
    bool a = net.activity;
    net.activity = false;
    return a;
}

bool net_wait(double until)
{
    double now = sg4::Engine::get_clock();
    if (net.in_flight == 0) {
        if (until < 0)
            return false;
        if (until > now)
            sg4::this_actor::sleep_until(until);
        return true;
    }
    if (net.arrived.empty()) {
        std::unique_lock<sg4::Mutex> hold(*net.lock);
        while (net.arrived.empty()) {
            if (until < 0)
                net.arrived_cv->wait(hold);
            else if (net.arrived_cv->wait_until(hold, until) ==
                     std::cv_status::timeout)
                break;
        }
    }
    // Every transfer that ended by now, in the order they ended.
    while (!net.arrived.empty()) {
        Msg *m = net.arrived.front();
        net.arrived.pop_front();
        net.in_flight--;
        deliver(m);
        delete m;
        net.activity = true;
    }
    return true;
}

size_t net_in_flight()
{
    return net.in_flight;
}

uint64_t net_messages()
{
    return net.messages;
}

} // namespace swysim
