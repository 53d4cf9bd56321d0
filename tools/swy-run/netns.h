/* Network plumbing of the emulated cluster, done with ip(8) and tc(8):
 *
 *   swy-<pid>-br   bridge namespace: lo, bridge br0, and per node a veth
 *                  end v<i> attached to br0 (shaped toward node i)
 *   swy-<pid>-n<i> node i: lo, eth0 = the other veth end, 198.18.0.<i+1>/24
 *                  (shaped away from node i)
 *
 * Every link is created inside these namespaces (a veth pair is made in
 * the bridge namespace with its peer placed straight into the node's), so
 * the root namespace never gets an address, link or qdisc. Deleting the
 * namespaces deletes the links and qdiscs with them. <pid> is swy-run's,
 * which keeps parallel runs apart and tells a crashed run's leftovers. */
#ifndef SWY_RUN_NETNS_H
#define SWY_RUN_NETNS_H

#include <stdbool.h>

#define SWY_RUN_NETNS_NAME_MAX 48

typedef struct {
    int   nodes;
    char  prefix[24];            /* "swy-<pid>" */
    bool  bridge_created;
    int   nodes_created;         /* namespaces swy-<pid>-n0.. that exist */
    bool  run_netns_foreign;     /* /run/netns held namespaces of others
                                  * than swy-run when this run began */
} swy_run_netns_t;

/* Absolute path of an executable found in PATH or in /usr/sbin, /sbin
 * (root's tools are there even when PATH lacks them); false if none. */
bool swy_run_tool_find(const char *name, char *path_p, unsigned path_len);

/* First deletes namespaces named swy-<pid>-... whose <pid> is no process
 * any more (what a run killed outright left behind). Then builds the
 * bridge and nodes namespaces with links, addresses and, if
 * link_bits_s > 0, tbf on both ends of each node's uplink. Returns 0, or
 * 77 if not even the first namespace could be created (no privilege), or
 * 1 on another failure; reports on stderr. What was built is recorded in
 * net, to be removed by swy_run_netns_destroy even after a failure. */
int swy_run_netns_create(swy_run_netns_t *net, int nodes,
                         double link_bits_s);

/* Name of node i's namespace: "swy-<pid>-n<i>". */
void swy_run_netns_node_name(const swy_run_netns_t *net, int node,
                             char name_p[SWY_RUN_NETNS_NAME_MAX]);

/* Deletes what swy_run_netns_create built, and /run/netns if it is
 * empty now and held only swy-run's namespaces when this run began. Accepts a net with nothing made. */
void swy_run_netns_destroy(swy_run_netns_t *net);

#endif
